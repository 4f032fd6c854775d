"""This machine's stream endpoint: the one way another machine's web process reaches a browser held here.

A thread of the tasks worker's main process (workers/celery.py) serves BROWSER_HOST_BIND. A request must carry
`Authorization: Bearer <token>` minted by app/browser_hosts.py for this machine and one browser: a task's (its row's
live state says where its DevTools socket is, written by the worker running it here) or a kept session's (its row's
debugger_address, on this host). The caller picks no address and no socket: only that browser's DevTools socket is
ever opened, and only for its discovery documents (/json/version, /json/list) and its /devtools/ WebSockets. After
the check the bytes pass through unread, both ways: the CDP policy of a caller's commands is the web tier's
(app/sessions/cdp_web.py), so this hop adds one copy and nothing else.

A thread of its own (Heartbeat: nothing else runs on it, so no request or stream can hold it up) writes its URL
(BROWSER_HOST_URL) with this machine's heartbeat into session_hosts every sixth of SESSION_HOST_LOST_SECONDS.
"""
import asyncio
import logging
import socket
from urllib.parse import urlsplit

from sqlalchemy import select

from app import browser_hosts
from app.background import Background
from app.extensions import db
from app.models import CloudSession, Task
from app.sandbox import unix_http
from app.sessions.cdp_proxy import read_head, refuse

log = logging.getLogger(__name__)
HEAD_LIMIT = 16 * 1024
RUNNING = ("pending", "input-required")
DISCOVERY = ("/json/version", "/json/list", "/json")
PASSED_HEADERS = ("upgrade", "connection", "sec-websocket-key", "sec-websocket-version")  # no extensions: no
# compression, so frames pass as the browser writes them


class HostEndpoint(Background):
    name = "browser-host-endpoint"

    def __init__(self, app):
        super().__init__()
        self.app, self.config = app, app.config
        self.host = browser_hosts.this_host()
        self.url = self.listener = self.heartbeat = None

    def start(self):
        """Listen and register before the worker's first task can publish a browser: a viewer never finds a running
        task's machine without an endpoint (the thread then serves it and keeps the registration fresh)."""
        bind_host, _, port = self.config["BROWSER_HOST_BIND"].rpartition(":")
        bind_host = bind_host.strip("[]")
        self.listener = socket.create_server((bind_host or "0.0.0.0", int(port)),
                                             family=socket.AF_INET6 if ":" in bind_host else socket.AF_INET)
        self.url = self.config["BROWSER_HOST_URL"] or default_url(self.config, bind_host,
                                                                   self.listener.getsockname()[1])
        log.info("browser stream endpoint for %s at %s", self.host, self.url)
        _in_app(self.app, browser_hosts.register, self.host, self.url)
        self.heartbeat = Heartbeat(self.app, self.host, self.url).start()
        return super().start()

    def stop(self):
        super().stop()
        if self.heartbeat is not None:
            self.heartbeat.stop()

    def _run(self):
        asyncio.run(self._serve())

    async def _serve(self):
        server = await asyncio.start_server(self._handle, sock=self.listener, limit=HEAD_LIMIT)
        async with server:
            while not self.stopping.is_set():
                await asyncio.sleep(0.25)

    async def _handle(self, reader, writer):
        request = await read_head(reader, writer)
        if request is None:
            return
        method, path, named = request
        scheme, _, token = named.get("authorization", "").partition(" ")
        target = browser_hosts.verify(self.config, token.strip(), self.host) if scheme.lower() == "bearer" else None
        if target is None:
            return await refuse(writer, 401, "Unauthorized", "a valid stream token for this machine is required")
        if method != "GET" or not (path in DISCOVERY or path.startswith("/devtools/")) or ".." in path or "%" in path \
                or "?" in path:
            return await refuse(writer, 404, "Not Found", "only a browser's DevTools endpoints are served here")
        socket_path = await asyncio.to_thread(_in_app, self.app, self._socket_of, target)
        if socket_path is None:
            return await refuse(writer, 404, "Not Found", "that browser is not running on this machine")
        try:
            sock = unix_http.open_socket(socket_path, timeout=5)
            sock.setblocking(False)
            up_reader, up_writer = await asyncio.open_unix_connection(sock=sock)
        except OSError:
            return await refuse(writer, 502, "Bad Gateway", "the browser is gone")
        passed = "".join(f"{name}: {named[name]}\r\n" for name in PASSED_HEADERS if name in named)
        up_writer.write(f"GET {path} HTTP/1.1\r\nHost: localhost\r\n{passed}\r\n".encode())
        await _pipe_both(reader, writer, up_reader, up_writer)

    def _socket_of(self, target):
        """The DevTools socket of the browser `target` names, if it is held on this machine now; else None."""
        kind, _, ident = target.partition(":")
        try:
            if kind == "t":
                row = db.session.execute(select(Task.status, Task.live).where(Task.id == ident)).first()
                live = (row.live or {}) if row is not None and row.status in RUNNING else {}
                endpoint = live.get("endpoint") if live.get("host") == self.host else None
            elif kind == "s":
                row = db.session.execute(select(CloudSession.status, CloudSession.host, CloudSession.debugger_address)
                                         .where(CloudSession.id == ident)).first()
                endpoint = row.debugger_address if row is not None and row.status == "active" \
                    and row.host == self.host else None
            else:
                endpoint = None
        finally:
            db.session.rollback()
        return unix_http.socket_path(endpoint) if endpoint and endpoint.startswith("unix:") else None


class Heartbeat(Background):
    """This machine is alive: its registration renewed every browser_hosts.heartbeat_seconds, on a thread that does
    nothing else (a Celery task would wait behind long work; the endpoint's loop behind a slow request), with a
    connection of its own. Its last act says the endpoint stopped cleanly (a restart is expected)."""

    name = "browser-host-heartbeat"

    def __init__(self, app, host, url):
        super().__init__()
        self.app, self.host, self.url = app, host, url
        self.seconds = browser_hosts.heartbeat_seconds(app.config)

    def _run(self):
        while not self.stopping.wait(self.seconds):
            _in_app(self.app, browser_hosts.register, self.host, self.url)
        _in_app(self.app, browser_hosts.unregister, self.host, self.url)


def _in_app(app, work, *args):
    try:
        with app.app_context():
            return work(*args)
    except Exception:  # the database is down, say: the next turn tries again
        log.warning("browser stream endpoint: %s failed", work.__name__, exc_info=True)
        return None


def default_url(config, bind_host, port):
    """http://<address>:<port>: the bind address, or for a wildcard bind the address this machine reaches the
    database by (the one network every machine of a deployment shares), else its name's."""
    address = bind_host
    if bind_host in ("", "0.0.0.0", "::"):
        address = _outward_address(config) or socket.gethostbyname(socket.gethostname())
    return f"http://{f'[{address}]' if ':' in address else address}:{port}"


def _outward_address(config):
    for url in (config["SQLALCHEMY_DATABASE_URI"], config.get("CELERY", {}).get("broker_url") or ""):
        try:
            parts = urlsplit(url)
            if parts.hostname:
                with socket.socket(socket.AF_INET6 if ":" in parts.hostname else socket.AF_INET,
                                   socket.SOCK_DGRAM) as probe:
                    probe.connect((parts.hostname, parts.port or 1))  # no packet is sent: the route is chosen
                    return probe.getsockname()[0]
        except (OSError, ValueError):
            continue
    return None


async def _pipe_both(reader, writer, up_reader, up_writer):
    tasks = [asyncio.ensure_future(_pipe(reader, up_writer)), asyncio.ensure_future(_pipe(up_reader, writer))]
    await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    writer.close()
    up_writer.close()


async def _pipe(source, sink):
    try:
        while data := await source.read(256 * 1024):
            sink.write(data)
            await sink.drain()
    except ConnectionError:
        pass
