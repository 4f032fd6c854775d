"""Every error response is `{error, message}` (plus extra fields some errors carry)."""
import logging

from flask import g, has_request_context, jsonify
from sqlalchemy.exc import OperationalError, InterfaceError
from werkzeug.exceptions import HTTPException

log = logging.getLogger(__name__)

ERROR_NAMES = {
    400: "Invalid Request",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not Found",
    405: "Method Not Allowed",
    408: "Request Timeout",
    409: "Conflict",
    413: "Payload Too Large",
    415: "Unsupported Media Type",
    422: "Unprocessable Entity",
    429: "Too Many Requests",
    500: "Internal Server Error",
    503: "Service Unavailable",
}


class ApiError(Exception):
    """An error a caller can act on; `extra` fields are added to the body."""

    def __init__(self, status, error, message, headers=None, **extra):
        super().__init__(message)
        self.status, self.error, self.message = status, error, message
        self.headers, self.extra = headers or {}, extra


def invalid(message):
    return ApiError(400, "Invalid Request", message)


def error_response(status, error, message, headers=None, **extra):
    response = jsonify({"error": error, "message": message, **extra})
    response.status_code = status
    response.headers.update(headers or {})
    if has_request_context() and "Retry-After" in response.headers:
        g.retry_after = response.headers["Retry-After"]  # the rate limiter would replace it (app.ratelimits)
    return response


def _reason_phrase(message):
    text = " ".join(str(message or "").split())
    return "".join(c for c in text if 32 <= ord(c) < 127)[:200]


def handle_api_error(exc):
    response = error_response(exc.status, exc.error, exc.message, exc.headers, **exc.extra)
    # For "which key / which resource / what state" errors the message is also the reason phrase:
    # clients that only raise on the status line (the official SDK's raise_for_status) then say why,
    # e.g. "404, message='No cloud browser session ... for this API key.'".
    reason = _reason_phrase(exc.message) if exc.status in (401, 403, 404, 409) else ""
    if reason:
        response.status = f"{exc.status} {reason}"
    return response


def handle_http_exception(exc):
    data = getattr(exc, "data", None) or {}
    messages = data.get("messages") or data.get("errors")
    headers = data.get("headers") or dict(exc.get_headers() or [])
    headers.pop("Content-Type", None)
    if messages:
        return _validation_error(messages, headers)
    message = data.get("message") or exc.description or exc.name
    return error_response(exc.code, ERROR_NAMES.get(exc.code, exc.name), message, headers)


def _validation_error(messages, headers):
    """webargs reports `{location: {field: [problems]}}`; callers get one readable sentence."""
    fields = {}
    for location, problems in messages.items():
        if isinstance(problems, dict):
            fields.update(problems)
        else:
            fields[location if location != "json" else "body"] = problems
    if set(fields) == {"callbackHeaders"}:
        return error_response(422, "Invalid Callback Headers", _describe(fields), headers)
    return error_response(400, "Invalid Request", _describe(fields), headers)


def _describe(fields):
    parts = []
    for name, problems in sorted(fields.items()):
        parts.append(f"{name}: {_flatten(problems)}")
    return " ".join(part if part.endswith((".", "?")) else part + "." for part in parts)


def _flatten(problems):
    if isinstance(problems, str):
        return problems
    if isinstance(problems, dict):
        return "; ".join(f"{key}: {_flatten(value)}" for key, value in problems.items())
    return " ".join(_flatten(p) for p in problems)


def handle_database_down(exc):
    log.warning("database unavailable: %s", exc.__class__.__name__)
    return error_response(503, "Service Unavailable",
                          "The database is unavailable; retry in a few seconds.",
                          {"Retry-After": "5"})


def handle_unexpected(exc):
    log.exception("unhandled error")
    return error_response(500, "Internal Server Error", "An unexpected error occurred.")


def register(app):
    app.register_error_handler(ApiError, handle_api_error)
    app.register_error_handler(HTTPException, handle_http_exception)
    app.register_error_handler(OperationalError, handle_database_down)
    app.register_error_handler(InterfaceError, handle_database_down)
    app.register_error_handler(Exception, handle_unexpected)
