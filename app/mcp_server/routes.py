"""POST /mcp: MCP's Streamable HTTP transport (stateless), a JSON response, or an SSE stream when a tool call asks
for progress. The caller's key comes in `x-api-key` or `Authorization: Bearer`."""
import json
import queue
import threading

from flask import Blueprint, Response, current_app, request

from ..auth import authenticate
from ..errors import ApiError
from ..extensions import db
from . import protocol
from .rest import InProcess
from .tools import Tools

blp = Blueprint("mcp", __name__)
KEEPALIVE_SECONDS = 15  # an SSE comment while a tool runs quietly, so proxies keep the stream open
_OPENAPI = {}  # run_task's schema, derived from this process's own OpenAPI document once


def caller_key():
    raw = request.headers.get("x-api-key", "")
    scheme, _, token = request.headers.get("Authorization", "").partition(" ")
    if not raw and scheme.lower() == "bearer":
        raw = token.strip()
    authenticate(raw, "send it in the x-api-key header or as Authorization: Bearer <key>")
    db.session.rollback()  # the key's row is read; the tools' own requests use their own connections
    return raw


@blp.route("/mcp", methods=["POST"])
def post():
    """One JSON-RPC message: a request is answered in the response, a notification or response gets 202."""
    tools = Tools(InProcess(current_app._get_current_object(), caller_key(), request.remote_addr or "127.0.0.1"),
                  _OPENAPI)
    if not request.is_json:
        raise ApiError(415, "Unsupported Media Type", "Send the JSON-RPC message with Content-Type: application/json.")
    message, refused = protocol.parse(request.get_json(silent=True))
    if refused:
        return Response(json.dumps(refused), 400, mimetype="application/json")
    if protocol.wants_progress(message) is None or "text/event-stream" not in request.headers.get("Accept", ""):
        response = protocol.answer(message, tools)
        if response is None:
            return Response(status=202)
        return Response(json.dumps(response), mimetype="application/json")
    return Response(_stream(message, tools), mimetype="text/event-stream",
                    headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})


@blp.route("/mcp", methods=["GET", "DELETE"])
def no_stream():
    """Stateless: no session to open a stream on, or to end."""
    raise ApiError(405, "Method Not Allowed", "This MCP endpoint is stateless: POST each JSON-RPC message.",
                   {"Allow": "POST"})


def _stream(message, tools):
    """The tool call runs in a thread of its own; its progress notifications, then its response, are SSE events."""
    events = queue.Queue()

    def run():
        try:
            events.put(protocol.answer(message, tools, send=events.put))
        except BaseException:
            events.put(protocol.error_response(message.id, -32603, "An unexpected error occurred."))
            raise

    threading.Thread(target=run, daemon=True, name="mcp-tool-call").start()
    while True:
        try:
            event = events.get(timeout=KEEPALIVE_SECONDS)
        except queue.Empty:
            yield ": keepalive\n\n"
            continue
        yield f"event: message\ndata: {json.dumps(event)}\n\n"
        if "method" not in event:
            return
