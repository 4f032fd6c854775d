"""GET /metrics: the web machine's metrics and the deployment's state, for a Prometheus holding METRICS_TOKEN."""
from flask import Blueprint, Response, current_app, request

from ..errors import error_response
from ..extensions import db
from .processes import exposition, refusal
from .state import ClusterState

blp = Blueprint("metrics", __name__)


@blp.get("/metrics")
def metrics():
    """Prometheus exposition; 404 while METRICS_TOKEN is unset, 401/403 without it."""
    refused = refusal(current_app.config["METRICS_TOKEN"], request.headers.get("Authorization"))
    if refused:
        return error_response(*refused)
    body, content_type = exposition(ClusterState(db.engine, current_app.extensions["broker"]))
    return Response(body, content_type=content_type, headers={"Cache-Control": "no-store"})
