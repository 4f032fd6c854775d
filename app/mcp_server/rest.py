"""How the MCP tools reach the REST API: in this web process (the WSGI app called with the caller's key), or over
HTTP from `remote-dispatch mcp` (any instance, the key from the environment)."""
import contextlib
import contextvars
import json
from dataclasses import dataclass, field

import requests
from werkzeug.test import EnvironBuilder, run_wsgi_app

from ..errors import ApiError


class ToolError(Exception):
    """A call the service refused: its `{error, message}` body becomes the tool's error text."""

    def __init__(self, error, message, **extra):
        super().__init__(message)
        self.body = {"error": error, "message": message, **extra}


@dataclass
class Reply:
    status: int
    data: bytes
    content_type: str = ""
    headers: dict = field(default_factory=dict)

    def json(self):
        return json.loads(self.data or b"null")

    def checked(self):
        """The JSON body of a 2xx; a ToolError with the service's own error body otherwise."""
        if self.status < 400:
            return self
        try:
            body = self.json()
        except ValueError:
            body = None
        if not isinstance(body, dict) or "error" not in body:
            body = {"error": f"HTTP {self.status}", "message": self.data.decode(errors="replace")[:500]}
        extra = {k: v for k, v in body.items() if k not in ("error", "message")}
        if self.status == 429 and self.headers.get("Retry-After"):
            extra["retryAfterSeconds"] = self.headers["Retry-After"]
        raise ToolError(body["error"], body.get("message") or "", status=self.status, **extra)


class InProcess:
    """The REST API of this web process, called through its WSGI app (every before_request hook, the rate limiter,
    the schemas, the error handlers), in an empty context so no Flask state of the /mcp request leaks into it."""

    def __init__(self, app, api_key, remote_addr="127.0.0.1"):
        self.app, self.api_key, self.remote_addr = app, api_key, remote_addr

    @contextlib.contextmanager
    def waiting(self):
        """A place among this process's waiting requests (those of `wait: true` too), or a 503 tool error: a tool
        that waits holds a gunicorn thread as they do."""
        try:
            with self.app.extensions["task_waiters"].slot():
                yield
        except ApiError as exc:
            if exc.status != 503:
                raise
            raise ToolError(exc.error, exc.message, status=503, retryAfterSeconds=exc.headers.get("Retry-After"))

    def call(self, method, path, body=None, query=None):
        environ = EnvironBuilder(path=path, method=method, json=body, query_string=query,
                                 headers={"x-api-key": self.api_key},
                                 environ_base={"REMOTE_ADDR": self.remote_addr}).get_environ()
        return contextvars.Context().run(self._run, environ)

    def _run(self, environ):
        app_iter, status, headers = run_wsgi_app(self.app, environ, buffered=True)
        try:
            data = b"".join(app_iter)
        finally:
            getattr(app_iter, "close", lambda: None)()
        return Reply(int(status.split()[0]), data, headers.get("Content-Type", ""), dict(headers))


class OverHttp:
    """The REST API of an instance at `base_url` (REMOTE_DISPATCH_URL), with the caller's key."""

    def __init__(self, base_url, api_key, timeout=330):
        self.base = base_url.rstrip("/")
        self.http = requests.Session()
        self.http.headers.update({"x-api-key": api_key, "User-Agent": "remote-dispatch-mcp"})
        self.timeout = timeout  # above the service's own wait limits: it answers first

    def waiting(self):
        return contextlib.nullcontext()  # the wait is this process's; the service sees polls

    def call(self, method, path, body=None, query=None):
        try:
            response = self.http.request(method, self.base + path, json=body, params=query,
                                         timeout=(10, self.timeout))
        except requests.RequestException as exc:
            raise ToolError("Service Unreachable", f"{self.base} could not be reached: {exc.__class__.__name__}: "
                            f"{exc}. Check REMOTE_DISPATCH_URL.") from None
        return Reply(response.status_code, response.content, response.headers.get("Content-Type", ""),
                     dict(response.headers))
