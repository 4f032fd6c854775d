"""Liveness and readiness probes."""
from flask import Blueprint, current_app, redirect
from sqlalchemy import text

from .errors import error_response
from .extensions import db

blp = Blueprint("health", __name__)


@blp.get("/")
def root():
    """People who open the service's address land on the console (the API reference is at /docs)."""
    return redirect("/console/", 302)


@blp.get("/healthz")
def healthz():
    """The process is up."""
    return {"status": "ok"}


@blp.get("/readyz")
def readyz():
    """The database and the broker are reachable."""
    problems = []
    try:
        db.session.execute(text("SELECT 1"))
    except Exception as exc:
        db.session.rollback()
        problems.append(f"database: {exc.__class__.__name__}")
    try:
        with current_app.extensions["broker"].connection() as conn:
            conn.ensure_connection(max_retries=1, timeout=2)
    except Exception as exc:
        problems.append(f"broker: {exc.__class__.__name__}")
    if problems:
        return error_response(503, "Service Unavailable", "Not ready: " + "; ".join(problems))
    return {"status": "ready"}
