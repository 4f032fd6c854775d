"""Real MCP servers on loopback (the `mcp` package's MCPServer under uvicorn), for the MCP tests.

Run as `python -m tests.mcp_server`: prints {"weather": port, "crm": port, "legacy": port} on one
line, then serves until killed.
- weather: Streamable HTTP at /mcp, behind `Authorization: Bearer <WEATHER_TOKEN>`; tools
  `forecast(city)` and `alerts(region)`.
- crm: Streamable HTTP at /mcp, behind the custom header `X-Crm-Key: <CRM_KEY>`; tools
  `lookup_customer(email)` and `slow_report()` (answers after a minute: the timeout case).
- legacy: the older SSE transport at /sse, no authentication; tools `echo(text)`, `count_characters(text)`.
Every request's headers are appended to the file named by MCP_HEADERS_LOG (to prove what was sent).
"""
import asyncio
import json
import os
import socket
import sys

import uvicorn
from mcp.server.mcpserver import MCPServer

WEATHER_TOKEN = "wx-token-7f3a9c"
CRM_KEY = "crm-key-51be22"


def weather_server():
    server = MCPServer("weather")

    @server.tool()
    def forecast(city: str) -> str:
        """Tomorrow's weather forecast for a city."""
        return f"Forecast for {city}: sunny, 21 C"

    @server.tool()
    def alerts(region: str) -> str:
        """Weather alerts for a region."""
        return f"No alerts for {region}"

    return server


def crm_server():
    server = MCPServer("crm")

    @server.tool()
    def lookup_customer(email: str) -> str:
        """Find a customer by email."""
        return json.dumps({"email": email, "name": "Ada Lovelace", "plan": "gold"})

    @server.tool()
    async def slow_report() -> str:
        """A report that takes a minute."""
        await asyncio.sleep(60)
        return "late"

    return server


def legacy_server():
    server = MCPServer("legacy")

    @server.tool()
    def echo(text: str) -> str:
        """Echo the text back."""
        return f"echo: {text}"

    @server.tool()
    def count_characters(text: str) -> str:
        """How many characters the text has (shows what a tool received without echoing it)."""
        return f"{len(text)} characters"

    return server


def guarded(app, header, expected):
    """ASGI middleware: 401 unless `header` has the expected value; logs every request's headers."""
    async def guard(scope, receive, send):
        if scope["type"] == "http":
            headers = {k.decode().lower(): v.decode() for k, v in scope["headers"]}
            log = os.environ.get("MCP_HEADERS_LOG")
            if log:
                with open(log, "a") as out:
                    out.write(json.dumps(headers) + "\n")
            if header and headers.get(header) != expected:
                body = b'{"error": "unauthorized"}'
                await send({"type": "http.response.start", "status": 401,
                            "headers": [(b"content-type", b"application/json"),
                                        (b"content-length", str(len(body)).encode())]})
                await send({"type": "http.response.body", "body": body})
                return
        await app(scope, receive, send)
    return guard


def _socket():
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    return sock


async def main():
    apps = {
        "weather": guarded(weather_server().streamable_http_app(), "authorization", f"Bearer {WEATHER_TOKEN}"),
        "crm": guarded(crm_server().streamable_http_app(), "x-crm-key", CRM_KEY),
        "legacy": guarded(legacy_server().sse_app(), None, None),
    }
    servers, ports = [], {}
    for name, asgi in apps.items():
        sock = _socket()
        ports[name] = sock.getsockname()[1]
        config = uvicorn.Config(asgi, log_level="warning", lifespan="on")
        servers.append(uvicorn.Server(config).serve(sockets=[sock]))
    print(json.dumps(ports), flush=True)
    await asyncio.gather(*servers)


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))


class McpServers:
    """The servers above in a subprocess, for a test module."""

    def __init__(self):
        import tempfile

        from tests.processes import ManagedProcess

        self.headers_log = tempfile.mktemp(prefix="mcp-headers-")
        self.process = ManagedProcess([sys.executable, "-m", "tests.mcp_server"], "mcp-servers",
                                      {"MCP_HEADERS_LOG": self.headers_log})
        self.process.wait_until(lambda: self.process.output().lstrip().startswith("{"), timeout=30)
        self.ports = json.loads(self.process.output().strip().splitlines()[0])

    def url(self, name):
        return f"http://127.0.0.1:{self.ports[name]}/" + ("sse" if name == "legacy" else "mcp")

    def received_headers(self):
        try:
            with open(self.headers_log) as log:
                return [json.loads(line) for line in log]
        except FileNotFoundError:
            return []

    def stop(self):
        self.process.stop()
