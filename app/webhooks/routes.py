"""Routes of /fast/v2/remote-dispatch/responses/{requestId}/webhooks."""
from flask import g
from flask.views import MethodView

from ..api import NOT_JSON, RATE_LIMITED, TOO_LARGE
from ..auth import require_api_key
from ..ratelimits import requests_limit
from ..parsing import Blueprint
from . import service
from .schemas import DeliveryLogSchema, DeliverySchema, RedeliverSchema

blp = Blueprint("webhooks", __name__, url_prefix="/fast/v2/remote-dispatch/responses",
                description="The webhook deliveries of a task: their log, and redelivery.")
blp.before_request(require_api_key)


@blp.route("/<string:request_id>/webhooks")
class DeliveryLog(MethodView):
    @requests_limit
    @blp.response(200, DeliveryLogSchema)
    @blp.alt_response(401, schema="Error", description="Invalid API key")
    @blp.alt_response(404, schema="Error", description="Unknown request, or another key's")
    @blp.alt_response(429, schema="Error", description=RATE_LIMITED)
    def get(self, request_id):
        """List a task's webhook deliveries and their attempts"""
        return service.delivery_log(g.api_key.id, request_id)


@blp.route("/<string:request_id>/webhooks/redeliver")
class Redeliver(MethodView):
    @requests_limit
    @blp.arguments(RedeliverSchema, required=False)
    @blp.response(202, DeliverySchema)
    @blp.alt_response(400, schema="Error", description="Invalid request")
    @blp.alt_response(401, schema="Error", description="Invalid API key")
    @blp.alt_response(404, schema="Error", description="Unknown request or webhook, or another key's")
    @blp.alt_response(409, schema="Error", description="An attempt is in flight")
    @blp.alt_response(429, schema="Error", description=RATE_LIMITED)
    @blp.alt_response(413, schema="Error", description=TOO_LARGE)
    @blp.alt_response(415, schema="Error", description=NOT_JSON)
    def post(self, data, request_id):
        """Send a webhook again

        A new attempt of the same webhook (same webhook-id and body) with a fresh retry schedule.
        """
        return service.redeliver(g.api_key.id, request_id, data.get("webhookId"))
