"""`remote-dispatch mcp`: the MCP server over stdio, for a client that launches a command (Claude Desktop, Cursor).
It holds no database or broker of its own: every tool calls the REST API of REMOTE_DISPATCH_URL with
REMOTE_DISPATCH_API_KEY. One JSON-RPC message per line; each request is answered on a thread of its own, so a
long task does not hold up a ping or another call."""
import json
import sys
import threading

from . import protocol
from .rest import OverHttp
from .tools import Tools


def serve(base_url, api_key, stdin=None, stdout=None):
    stdin, stdout = stdin or sys.stdin, stdout or sys.stdout
    tools = Tools(OverHttp(base_url, api_key))
    lock = threading.Lock()

    def send(message):
        line = json.dumps(message)  # ASCII: whatever encoding the client gave our stdout
        with lock:
            stdout.write(line + "\n")
            stdout.flush()

    def handle(message):
        response = protocol.answer(message, tools, send=send)
        if response is not None:
            send(response)

    for line in stdin:
        if not line.strip():
            continue
        try:
            body = json.loads(line)
        except ValueError:
            send(protocol.error_response(None, -32700, "Parse error: each line must be one JSON-RPC message."))
            continue
        message, refused = protocol.parse(body)
        if refused:
            send(refused)
        elif getattr(message, "method", None) == "tools/call":
            threading.Thread(target=handle, args=(message,), daemon=True, name="mcp-tool-call").start()
        else:
            handle(message)
