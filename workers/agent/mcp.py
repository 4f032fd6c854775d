"""MCP tool servers (the official `mcp` package): one session per server for the whole task, their
tools offered to the planner as `<label>__<tool>`, each call and its (truncated) result traced.

Credentials (bearer token, custom headers) are unsealed only here, sent only to their server, and
registered with the task's redaction so they never reach traces, logs or the model.
"""
import asyncio
import json
import logging
import re
import threading
from dataclasses import dataclass

import httpx2

from app.egress import client as egress_http, policy as egress

from .actions import Observation, Tool

log = logging.getLogger(__name__)
# httpx2 logs every request line at INFO (SSE session ids in URLs); one line per step is ours to log.
logging.getLogger("httpx2").setLevel(logging.WARNING)
TOOL_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
SEPARATOR = "__"
MAX_RESULT_CHARS = 20000  # what the planner gets back from one call


class McpFailure(ValueError):
    """A server cannot be used (unreachable, refused the credentials, timed out): the task ends as error."""


def check_outbound(url, config):
    """The MCP URL against app.egress's policy before connecting; every connection the client then
    makes is checked again and pinned by egress_http.async_transport."""
    try:
        egress.Policy.from_config(config).check_url(url)
    except egress.EgressRefused as exc:
        return str(exc)
    return None


def credentials_headers(auth):
    auth = auth or {}
    if auth.get("type") == "bearer-token":
        return {"Authorization": f"Bearer {auth['bearerToken']}"}
    if auth.get("type") == "custom-headers":
        return {h["key"]: h["value"] for h in auth.get("customHeaders") or []}
    return {}


def credential_values(credentials):
    """Every secret string among the servers' credentials (for redaction)."""
    values = []
    for auth in credentials or []:
        if auth.get("bearerToken"):
            values += [auth["bearerToken"], f"Bearer {auth['bearerToken']}"]
        values += [h["value"] for h in auth.get("customHeaders") or [] if h.get("value")]
    return [v for v in values if len(v) >= 4]


@dataclass
class McpTool:
    offered: str  # the name the planner sees
    server: "Server"
    name: str  # the server's own name
    description: str
    schema: dict


class Server:
    def __init__(self, index, options, auth):
        self.index = index
        self.url = options["url"]
        self.label = options.get("label") or options.get("namespace") or f"mcp{index + 1}"
        self.namespace = options.get("namespace") or re.sub(r"[^A-Za-z0-9_-]+", "_", self.label)
        self.description = options.get("description")
        self.selected = options.get("selectedTools")
        self.headers = credentials_headers(auth)
        self.client = None
        self.statuses = []  # HTTP statuses seen (to explain an opaque failure)
        self._closing = None

    def describe(self):
        return f"MCP server '{self.label}' ({self.url})"


class McpServers:
    """The task's MCP sessions, held open on a private event loop thread and closed at the end."""

    def __init__(self, servers, credentials, config):
        credentials = credentials or []
        self.servers = [Server(i, s, credentials[i] if i < len(credentials) else None)
                        for i, s in enumerate(servers)]
        self.timeout = float(config["MCP_TIMEOUT_SECONDS"])
        self.trace_chars = int(config["MCP_TRACE_RESULT_CHARS"])
        self.config = config
        self.tools_by_name = {}
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="mcp-sessions", daemon=True)
        self._thread.start()

    # Connecting and listing.

    def connect(self):
        """Open one session per server and list its tools; McpFailure names the first server that fails."""
        try:
            for server in self.servers:
                refusal = check_outbound(server.url, self.config)
                if refusal:
                    raise McpFailure(f"{server.describe()} is not allowed: {refusal}")
                tools = self._run(self._open(server), self.timeout + 5, server, "connecting")
                self._offer(server, tools)
        except BaseException:
            self.close()
            raise
        return self

    def _offer(self, server, tools):
        names = {t.name for t in tools}
        if server.selected is not None:
            missing = [name for name in server.selected if name not in names]
            if missing:
                raise McpFailure(f"{server.describe()} has no tool named "
                                 + ", ".join(repr(m) for m in missing) + " (selectedTools).")
            tools = [t for t in tools if t.name in server.selected]
        for tool in tools:
            offered = _tool_name(server.namespace, tool.name, self.tools_by_name)
            description = (tool.description or tool.name).strip()
            prefix = f"[{server.label}" + (f": {server.description}" if server.description else "") + "] "
            self.tools_by_name[offered] = McpTool(offered, server, tool.name, (prefix + description)[:1000],
                                                  _object_schema(tool.input_schema))

    async def _open(self, server):
        """Hold the server's session in a task of its own (anyio scopes stay in one task) until closing."""
        ready = self._loop.create_future()
        server._closing = asyncio.Event()
        asyncio.ensure_future(self._hold(server, ready))
        return await ready

    async def _hold(self, server, ready):
        # The `mcp` client (and its protocol types) takes a third of a second of CPU to import: a task that names
        # MCP servers pays it, not every worker's start.
        from mcp import Client

        first_error = None
        for transport in ("streamable-http", "sse"):
            try:
                async with Client(self._transport(server, transport), read_timeout_seconds=self.timeout,
                                  mode="legacy" if transport == "sse" else "auto") as client:
                    tools, cursor = [], None
                    while True:
                        page = await client.list_tools(cursor=cursor)
                        tools += page.tools
                        cursor = page.next_cursor
                        if not cursor:
                            break
                    server.client = client
                    ready.set_result(tools)
                    await server._closing.wait()
                    return
            except BaseException as exc:  # noqa: BLE001 (exception groups from the transport's task group)
                if ready.done():
                    log.info("%s session ended: %s", server.label, _leaf(exc).__class__.__name__)
                    return
                first_error = first_error or exc
                # An older server speaks SSE only: it answers the Streamable HTTP POST with 4xx (not 401/403).
                if transport == "sse" or not _maybe_legacy(server.statuses, exc):
                    break
        if not ready.done():
            ready.set_exception(McpFailure(_explain(server, first_error, timeout=self.timeout)))

    def _transport(self, server, kind):
        from mcp.client.sse import sse_client
        from mcp.client.streamable_http import streamable_http_client

        def record(response):
            server.statuses.append(response.status_code)

        async def hook(response):
            record(response)

        def factory(headers=None, timeout=None, auth=None):
            return httpx2.AsyncClient(headers=headers, timeout=timeout, auth=auth, event_hooks={"response": [hook]},
                                      transport=egress_http.async_transport(policy), trust_env=False)

        policy = egress.Policy.from_config(self.config)

        if kind == "sse":
            return sse_client(server.url, headers=server.headers, timeout=self.timeout,
                              sse_read_timeout=max(self.timeout, 300), httpx_client_factory=factory)
        client = factory(headers=server.headers, timeout=httpx2.Timeout(self.timeout, read=max(self.timeout, 300)))
        return streamable_http_client(server.url, http_client=client)

    # Calling.

    def tools(self):
        return [Tool(t.offered, t.description, t.schema) for t in self.tools_by_name.values()]

    def find(self, label, tool):
        """The offered tool for `<label>.<tool>` (the built-in step), or None."""
        for candidate in self.tools_by_name.values():
            server = candidate.server
            if candidate.name == tool and label.lower() in (server.label.lower(), server.namespace.lower()):
                return candidate
        return None

    def labels(self):
        return [server.label for server in self.servers]

    def call(self, tool, arguments):
        """Run a tool; returns an Observation carrying a truncated copy of the result for the trace.

        A tool that reports an error is a failed step (the model may recover); a server that stops
        answering ends the task (McpFailure)."""
        server = tool.server
        result = self._run(server.client.call_tool(tool.name, arguments or {}), self.timeout + 5, server,
                           f"calling {tool.name}")
        text = _result_text(result)
        if result.is_error:
            text = f"{server.label}.{tool.name} failed: {text}"
        return Observation(text[:MAX_RESULT_CHARS], failed=bool(result.is_error),
                           trace_result=_truncate(text, self.trace_chars))

    def _run(self, coroutine, timeout, server, doing):
        future = asyncio.run_coroutine_threadsafe(coroutine, self._loop)
        try:
            return future.result(timeout)
        except McpFailure:
            raise
        except TimeoutError:
            future.cancel()
            raise McpFailure(f"{server.describe()} did not answer within {self.timeout:g} s ({doing}).") from None
        except BaseException as exc:  # noqa: BLE001
            raise McpFailure(_explain(server, exc, doing, self.timeout)) from None

    def close(self):
        """Close every session (idempotent, never raises)."""
        if not self._thread.is_alive():
            return
        for server in self.servers:
            if server._closing is not None:
                self._loop.call_soon_threadsafe(server._closing.set)

        async def drain():
            pending = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            if pending:
                await asyncio.wait(pending, timeout=5)

        try:
            asyncio.run_coroutine_threadsafe(drain(), self._loop).result(10)
        except BaseException:  # noqa: BLE001
            log.warning("MCP sessions did not close cleanly")
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)
        if not self._thread.is_alive():
            self._loop.close()


def _tool_name(namespace, tool, taken):
    base = re.sub(r"[^a-zA-Z0-9_-]+", "_", f"{namespace}{SEPARATOR}{tool}")[:64]
    name, n = base, 2
    while name in taken:
        suffix = f"_{n}"
        name, n = base[:64 - len(suffix)] + suffix, n + 1
    assert TOOL_NAME.match(name)
    return name


def _object_schema(schema):
    schema = dict(schema or {})
    schema.setdefault("type", "object")
    schema.setdefault("properties", {})
    return schema


def _result_text(result):
    parts = []
    for block in result.content or []:
        kind = getattr(block, "type", "")
        if kind == "text":
            parts.append(block.text)
        elif kind == "resource" and getattr(block.resource, "text", None):
            parts.append(block.resource.text)
        else:
            parts.append(f"[{kind} content{' ' + block.mime_type if getattr(block, 'mime_type', None) else ''}]")
    if not parts and result.structured_content is not None:
        parts.append(json.dumps(result.structured_content, ensure_ascii=False, default=str))
    return "\n".join(parts)


def _truncate(text, limit):
    return text if len(text) <= limit else text[:limit] + f"… ({len(text)} characters)"


def _leaf(exc):
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


def _maybe_legacy(statuses, exc):
    refused = [s for s in statuses if s in (401, 403)]
    return not refused and any(400 <= s < 500 for s in statuses) and not isinstance(
        _leaf(exc), (httpx2.ConnectError, httpx2.TimeoutException, TimeoutError))


def _explain(server, exc, doing="connecting", timeout=None):
    leaf = _leaf(exc)
    refused = [s for s in server.statuses if s in (401, 403)]
    if refused:
        return (f"{server.describe()} refused the credentials (HTTP {refused[-1]}); check its "
                "authentication.")
    if isinstance(leaf, httpx2.ConnectError):
        return f"{server.describe()} could not be reached."
    if isinstance(leaf, (httpx2.TimeoutException, TimeoutError)) or "timed out" in str(leaf).lower():
        return f"{server.describe()} did not answer within {timeout:g} s ({doing})."
    errors = [s for s in server.statuses if s >= 400]
    if errors:
        return f"{server.describe()} answered HTTP {errors[-1]} ({doing}); is this the URL of an MCP server?"
    message = str(leaf) or leaf.__class__.__name__
    return f"{server.describe()} failed ({doing}): {message[:300]}"


def open_servers(task, config, credentials):
    """The task's connected MCP servers, or None when it has none; McpFailure names a server that fails."""
    servers = (task.options or {}).get("mcpServers") or []
    if not servers:
        return None
    return McpServers(servers, credentials, config).connect()
