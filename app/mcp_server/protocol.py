"""MCP's JSON-RPC messages (mcp-types) answered for one caller, the same for Streamable HTTP and stdio.

Stateless: the handshake's `initialize` is answered, and every later request stands on its own (no session id),
so any web process answers any message. `server/discover` (the 2026 era's probe) is answered as unknown: clients
then use the `initialize` handshake."""
import logging

import mcp_types as types
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, LATEST_HANDSHAKE_VERSION
from pydantic import ValidationError

from .rest import ToolError

log = logging.getLogger(__name__)

INSTRUCTIONS = (
    "Remote Dispatch runs automation tasks: run_task for a prompt (a /Operator prompt drives a browser), "
    "session_* tools for a browser you drive yourself step by step, list_files/read_file for what tasks "
    "downloaded, replay_script to run a recorded script again.")


def server_version():
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("remote-dispatch")
    except PackageNotFoundError:
        return "2"


def parse(body):
    """A JSON-RPC message (mcp-types), or the error response to send for it."""
    try:
        return types.jsonrpc_message_adapter.validate_python(body, by_name=False), None
    except ValidationError as exc:
        request_id = body.get("id") if isinstance(body, dict) and isinstance(body.get("id"), (str, int)) else None
        return None, error_response(request_id, types.INVALID_REQUEST, f"Not a JSON-RPC 2.0 message: {exc.errors()[0]['msg']}")


def error_response(request_id, code, message):
    return {"jsonrpc": "2.0", "id": request_id, "error": {"code": code, "message": message}}


def wants_progress(message):
    """The progress token of a tools/call request, or None."""
    params = message.params or {}
    return (params.get("_meta") or {}).get("progressToken") if message.method == "tools/call" else None


def progress_notification(token, count, text):
    params = types.ProgressNotificationParams(progress_token=token, progress=count, message=text)
    return {"jsonrpc": "2.0", "method": "notifications/progress", "params": _dump(params)}


def answer(message, tools, send=None):
    """The response to a request (a dict to send), or None for a notification or a response.

    `send(notification)` carries progress notifications while a tool runs (None: the caller asked for none)."""
    if not isinstance(message, types.JSONRPCRequest):
        return None
    params = message.params or {}
    try:
        if message.method == "initialize":
            asked = params.get("protocolVersion")
            result = types.InitializeResult(
                protocol_version=asked if asked in HANDSHAKE_PROTOCOL_VERSIONS else LATEST_HANDSHAKE_VERSION,
                capabilities=types.ServerCapabilities(tools=types.ToolsCapability(list_changed=False)),
                server_info=types.Implementation(name="remote-dispatch", version=server_version()),
                instructions=INSTRUCTIONS)
        elif message.method == "ping":
            return {"jsonrpc": "2.0", "id": message.id, "result": {}}
        elif message.method == "tools/list":
            result = types.ListToolsResult(tools=tools.listed())
        elif message.method == "tools/call":
            call = types.CallToolRequestParams.model_validate(params)
            if call.name not in tools.definitions():
                return error_response(message.id, types.INVALID_PARAMS,
                                      f"Unknown tool {call.name!r}: tools/list names them.")
            token = wants_progress(message)
            progress = (lambda n, text: send(progress_notification(token, n, text))) if token is not None and send else None
            result = tools.call(call.name, call.arguments, progress)
        else:
            return error_response(message.id, types.METHOD_NOT_FOUND, f"Method {message.method!r} is not supported.")
    except ValidationError as exc:
        return error_response(message.id, types.INVALID_PARAMS, f"Invalid params: {exc.errors()[0]['msg']}")
    except ToolError as exc:  # tools/list could not read the instance's OpenAPI document
        return error_response(message.id, types.INTERNAL_ERROR, f"{exc.body['error']}: {exc.body['message']}")
    except Exception:  # the service itself failed (a bug): a JSON-RPC error
        log.exception("MCP %s failed", message.method)
        return error_response(message.id, types.INTERNAL_ERROR, "An unexpected error occurred.")
    return {"jsonrpc": "2.0", "id": message.id, "result": _dump(result)}


def _dump(model):
    return model.model_dump(by_alias=True, mode="json", exclude_none=True)
