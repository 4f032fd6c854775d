"""A raw DevTools connection to a box's own endpoint (its Unix socket: below the relay), for tests and benchmarks."""
import json

import websocket

from app.sandbox import unix_http


def devtools_json(debugger_address, path="/json/version"):
    return json.loads(unix_http.request("GET", unix_http.unix_url(unix_http.socket_path(debugger_address)) + path)[1])


def devtools_websocket(debugger_address, path=None, timeout=20):
    """A WebSocket to `path` (default: the browser endpoint) of the DevTools whose address is `unix:<socket>`."""
    if path is None:
        path = "/devtools/" + devtools_json(debugger_address)["webSocketDebuggerUrl"].split("/devtools/", 1)[1]
    sock = unix_http.open_socket(unix_http.socket_path(debugger_address), timeout)
    return websocket.create_connection(f"ws://localhost{path}", socket=sock, timeout=timeout, suppress_origin=True)
