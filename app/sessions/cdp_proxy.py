"""The authenticating CDP relay of a session's DevTools: served by every web process (app/sessions/cdp_web.py).

CDP is full control of the browser, so its DevTools stay on a Unix socket of the machine holding it, reached only
through that machine's stream endpoint (workers/browser/host_endpoint.py), and callers come through here. A request
is served only with `Authorization: Bearer <token>` of this session (its SHA-256 given): WebSocket upgrades to
DevTools paths, and the /json/version and /json/list discovery documents with their URLs pointing here. Over the
WebSocket, every command the caller sends is parsed, checked by app/sessions/cdp_policy.py (refused with a CDP error,
or rewritten) and re-serialised, so the browser reads exactly what was checked; what the browser sends back is passed
through frame by frame, unparsed (it carries the screenshots). The session's row (app/sessions/cdp_session.py) says
whether the credential holds: a stop on any machine refuses new connections and closes open ones within a second.
A new connection the relay cannot carry says which hop failed: the machine holding the browser does not answer (503:
cut off, or its worker frozen; the browser may still run there, and the session may come back), or that machine
answers and says the browser is gone (502).
"""
import asyncio
import base64
import hashlib
import hmac
import json
import re
import secrets

from wsproto.connection import Connection, ConnectionType
from wsproto.events import BytesMessage, CloseConnection, Ping, Pong, TextMessage

from ..sandbox import unix_http
from .cdp_policy import TARGET_COMMANDS, Policy, Refused, dumps, error_reply, loads, target_refusal
from .cdp_side_panel import SidePanel
from .cdp_targets import Targets

HEAD_LIMIT = 16 * 1024
MESSAGE_LIMIT = 64 * 1024 * 1024  # one command (a big Runtime.evaluate or setDocumentContent fits)
WS_GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
JSON_PATHS = {"/json/version": "version", "/json/list": "list", "/json": "list"}
HOST_HEADER = re.compile(r"^[A-Za-z0-9.\-]+(:\d{1,5})?$|^\[[0-9A-Fa-f:.]+\](:\d{1,5})?$")
DATA_OPCODES = (0x0, 0x1, 0x2)
TEXT_OPCODE = 0x1
LAST_PAGE = ("it would close the session's last tab, and the session's tasks would have no window left: open another "
             "tab first (Target.createTarget), or stop the session (stop-cloud-browser-session)")
STREAM_REPLY_LIMIT = 4096  # a reply naming a stream handle is small: only frames up to this size are read
STREAM_HANDLE = re.compile(rb'"(?:stream|uuid)"\s*:\s*"([^"\\]{1,200})"')
CONNECT_SECONDS = 5  # a machine cut off the network drops our packets: no answer is an answer after this long
ANSWER_SECONDS = 10
GONE = "the browser is gone"
UNANSWERED = ("the machine holding this session's browser does not answer (it may be cut off the network, or its "
              "worker stopped): the browser may still be running there, and the session may come back; try again "
              "in a few seconds (a machine silent for SESSION_HOST_LOST_SECONDS ends its sessions as error)")
RETRY_SECONDS = 5


class Unanswered(ConnectionError):
    """The machine holding the browser (its stream endpoint, or a Grid) did not answer at all: unlike an answer
    saying the browser is gone, this says nothing of the browser, which may still run."""


class Proxy:
    """The checks and the relay of one session's CDP. `target`: its DevTools, "unix:<socket>" on this machine or
    host:port (a Grid's; with `stream_token`, the stream endpoint of the machine holding it, which that token opens,
    workers/browser/host_endpoint.py). `public`: (base, browser path) of the URLs callers are given (the web tier's
    route, app/sessions/cdp_web.py): every browser-level path reaches the browser's own, whatever its id.
    `side_panel`: (the session's window id, a coroutine function cancelling its tasks), for the Narada side panel
    each connection shows Playwright (app/sessions/cdp_side_panel.py); None shows none."""

    def __init__(self, target, token_sha256, prefix, downloads=None, row=None, stream_token=None, public=None,
                 side_panel=None):
        self.socket = target[len("unix:"):] if target.startswith("unix:") else None
        if self.socket:
            self.host, self.port = "localhost", None
        else:
            self.host, _, port = target.rpartition(":")
            self.port = int(port)
        self.token_sha256, self.prefix = token_sha256, prefix
        self.stream_header = f"Authorization: Bearer {stream_token}\r\n" if stream_token else ""
        self.public, self.side_panel = public, side_panel
        self.policy = Policy(downloads)
        self.targets = Targets(self._open_browser_endpoint)
        # The session's row (None: no database, as in unit tests): whether the credential still holds, and where
        # callers' use is written. `relays`: the open ones, closed the moment the row says the session ended.
        self.row, self.relays = row, set()
        self.browser_path = None if prefix == "/devtools/" else prefix  # a Grid's one endpoint is the browser's

    async def handle(self, reader, writer):
        request = await read_head(reader, writer)
        if request is not None:
            await self.serve(reader, writer, *request)

    async def serve(self, reader, writer, method, path, named):
        """One request whose head is read (`named`: its headers, lower-case names)."""
        if method != "GET":
            return await refuse(writer, 405, "Method Not Allowed", "only GET is served here")
        if not self._authorized(named.get("authorization", "")):
            return await refuse(writer, 401, "Unauthorized", "a valid session credential is required")
        if self.row is not None:
            # The database, not this process, says whether the session lives: a stop made on another machine
            # (or while this one was unreachable) revokes the credential from that moment.
            active = await self.row.active()
            if active is None:
                return await refuse(writer, 503, "Service Unavailable", "the session's state cannot be read now")
            if not active:
                return await refuse(writer, 401, "Unauthorized", "this session has ended: its credential is revoked")
        if named.get("upgrade", "").lower() != "websocket":
            return await self._discovery(writer, path, named.get("host", ""))
        if not path.startswith(self.prefix) or ".." in path or "%" in path:
            return await refuse(writer, 404, "Not Found", "no such DevTools endpoint")
        key = named.get("sec-websocket-key", "")
        if named.get("sec-websocket-version") != "13" or len(key) != 24:
            return await refuse(writer, 400, "Bad Request", "a WebSocket version 13 handshake is required")
        try:
            if self.public is not None and path.startswith("/devtools/browser/"):
                path = await self._browser_ws_path() or path  # the browser's own id is never handed out
            upstream = await self._open_upstream(path)
        except Unanswered:
            return await refuse_unanswered(writer)
        if upstream is None:
            return await refuse(writer, 502, "Bad Gateway", GONE)
        accept = base64.b64encode(hashlib.sha1((key + WS_GUID).encode()).digest()).decode()
        writer.write(f"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                     f"Sec-WebSocket-Accept: {accept}\r\n\r\n".encode())
        relay = Relay(self, reader, writer, *upstream)
        self.relays.add(relay)
        try:
            await relay.run()
        finally:
            self.relays.discard(relay)

    def _authorized(self, header):
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not token:
            return False
        expected = self.token_sha256
        return bool(expected) and hmac.compare_digest(hashlib.sha256(token.strip().encode()).hexdigest(), expected)

    async def _open_upstream(self, path):
        """A WebSocket to the browser, without extensions (no compression: frames pass through as they are); None
        when the machine holding it answers without one (the browser is gone); raises Unanswered."""
        try:
            reader, writer = await self._connect(limit=HEAD_LIMIT)
        except ValueError:
            return None
        nonce = base64.b64encode(secrets.token_bytes(16)).decode()
        writer.write(f"GET {path} HTTP/1.1\r\nHost: {self._host_header}\r\n{self.stream_header}Upgrade: websocket\r\n"
                     f"Connection: Upgrade\r\nSec-WebSocket-Key: {nonce}\r\nSec-WebSocket-Version: 13\r\n\r\n"
                     .encode())
        try:
            head = await self._answer(reader.readuntil(b"\r\n\r\n"), writer)
        except asyncio.LimitOverrunError:
            head = b""
        if head.split(b" ", 2)[1:2] != [b"101"]:
            writer.close()
            return None
        return reader, writer

    async def _answer(self, reading, writer):
        """What `reading` reads of the holder's answer; Unanswered (the connection closed) when none comes."""
        try:
            return await asyncio.wait_for(reading, ANSWER_SECONDS)
        except (OSError, asyncio.IncompleteReadError, asyncio.TimeoutError) as exc:
            writer.close()
            raise Unanswered(f"no answer: {type(exc).__name__}") from None

    def used(self):
        """A caller sent a command: the session is in use (written to its row, app/sessions/cdp_session.py)."""
        if self.row is not None:
            self.row.used()

    async def watch(self):
        """While callers are connected, re-read the session's row every second: once it says ended, every open
        relay is closed and this relay exits (its browser is being stopped)."""
        while True:
            await asyncio.sleep(self.row.CHECK_SECONDS)
            if self.relays and await self.row.active() is False:
                for relay in list(self.relays):
                    relay.revoked()
                return

    async def _open_browser_endpoint(self):
        """A WebSocket to the browser-level endpoint, for the relay's own questions (app/sessions/cdp_targets.py)."""
        path = await self._browser_ws_path()
        return await self._open_upstream(path) if path else None

    async def _browser_ws_path(self):
        """The browser-level WebSocket path (from /json/version), or None when the browser does not say it; raises
        Unanswered."""
        if self.browser_path is None:
            try:
                version = await self._upstream_json("/json/version")
                self.browser_path = "/devtools/" + version["webSocketDebuggerUrl"].split("/devtools/", 1)[1]
            except (ValueError, KeyError, TypeError, IndexError):
                return None
        return self.browser_path

    async def _discovery(self, writer, path, host):
        """/json/version and /json/list as the browser answers them, every URL pointing at this relay
        (Playwright's connect_over_cdp and Puppeteer read them when given an http:// endpoint)."""
        kind = JSON_PATHS.get(path.split("?", 1)[0].rstrip("/") or "/")
        if kind is None or self.prefix != "/devtools/":  # a Grid's CDP endpoint has no discovery documents
            return await refuse(writer, 404, "Not Found", "only /json/version, /json/list and WebSocket "
                                                           "upgrades are served here")
        try:
            document = await self._upstream_json("/json/version" if kind == "version" else "/json/list")
        except Unanswered:
            return await refuse_unanswered(writer)
        except ValueError:
            return await refuse(writer, 502, "Bad Gateway", GONE)
        here = host if HOST_HEADER.fullmatch(host) else "%s:%s" % writer.get_extra_info("sockname")[:2]
        if isinstance(document, list):  # Chromium's own targets (WebUI, extensions) are not listed
            document = [entry for entry in document if isinstance(entry, dict) and target_refusal(entry) is None]
        for entry in (document if isinstance(document, list) else [document]):
            for name in ("devtoolsFrontendUrl", "devtoolsFrontendUrlCompat"):
                entry.pop(name, None)  # devtools: pages are not served
            ws = entry.get("webSocketDebuggerUrl")
            if isinstance(ws, str) and "/devtools/" in ws:
                entry["webSocketDebuggerUrl"] = self._public_url(ws.split("/devtools/", 1)[1], here)
        body = json.dumps(document).encode()
        writer.write(f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n"
                     f"Connection: close\r\n\r\n".encode() + body)
        await _close(writer)

    def _public_url(self, devtools_path, here):
        """What a caller is given for the browser's ws://.../devtools/<devtools_path>."""
        if self.public is None:
            return f"ws://{here}/devtools/{devtools_path}"
        base, browser = self.public
        return base + (browser if devtools_path.startswith("browser/") else "/devtools/" + devtools_path)

    async def _connect(self, **kwargs):
        """A connection to the browser's DevTools: its box's Unix socket (nothing to reach over TCP), or the holding
        machine's endpoint (or a Grid's), which raises Unanswered when that machine does not take it."""
        if self.socket:  # a local socket connects at once, or fails: its browser is gone
            try:
                sock = unix_http.open_socket(self.socket, timeout=5)
            except OSError as exc:
                raise ValueError(GONE) from exc
            sock.setblocking(False)
            return await asyncio.open_unix_connection(sock=sock, **kwargs)
        try:
            return await asyncio.wait_for(asyncio.open_connection(self.host, self.port, **kwargs), CONNECT_SECONDS)
        except (OSError, asyncio.TimeoutError) as exc:
            raise Unanswered(f"no connection: {type(exc).__name__}") from None

    @property
    def _host_header(self):
        # DevTools answers only a Host that is an IP address or localhost (DNS rebinding protection).
        return "localhost" if self.socket else f"{self.host}:{self.port}"

    async def _upstream_json(self, path):
        """A discovery document of the browser; ValueError when the holding machine answers without one (the
        browser is gone), Unanswered when it does not answer."""
        reader, writer = await self._connect()
        try:
            writer.write(f"GET {path} HTTP/1.1\r\nHost: {self._host_header}\r\n{self.stream_header}\r\n".encode())
            try:
                head = await self._answer(reader.readuntil(b"\r\n\r\n"), writer)
            except asyncio.LimitOverrunError:
                raise ValueError("the answer's head is too long") from None
            length = re.search(rb"(?im)^content-length:\s*(\d+)", head)
            if head.split(b" ", 2)[1:2] != [b"200"] or not length:
                raise ValueError("the browser did not answer")
            # Chromium keeps the connection open whatever we ask: read exactly the body.
            body = await self._answer(reader.readexactly(int(length.group(1))), writer)
        finally:
            writer.close()
        return json.loads(body)


class Relay:
    """One caller's WebSocket to one browser endpoint: commands checked on the way in, frames passed out."""

    def __init__(self, proxy, reader, writer, up_reader, up_writer):
        self.proxy, self.policy, self.targets = proxy, proxy.policy, proxy.targets
        self.reader, self.writer, self.up_reader, self.up_writer = reader, writer, up_reader, up_writer
        self.caller = Connection(ConnectionType.SERVER)  # parses the caller's (masked) frames, frames our replies
        self.browser = Connection(ConnectionType.CLIENT)  # frames (and masks) what we send the browser
        self.at_boundary = True  # the browser→caller stream is between messages: a reply of ours may go in
        self.pending = []  # our replies waiting for such a boundary
        self.panel = SidePanel(*proxy.side_panel) if proxy.side_panel else None

    async def run(self):
        tasks = [asyncio.ensure_future(self._from_caller()), asyncio.ensure_future(self._from_browser())]
        self.tasks = tasks
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self.writer.close()
        self.up_writer.close()

    def revoked(self):
        """The session ended: the caller is told so (close code 1008, policy) and both sides are cut."""
        try:
            self._close_caller(1008, "the cloud browser session has ended")
            self._flush()
        except Exception:  # a half-closed connection: cutting it is all that is left
            pass
        for task in getattr(self, "tasks", ()):
            task.cancel()

    async def _from_caller(self):
        parts, size = [], 0
        try:
            while data := await self.reader.read(65536):
                self.caller.receive_data(data)
                for event in self.caller.events():
                    if isinstance(event, TextMessage):
                        parts.append(event.data)
                        size += len(event.data)
                        if size > MESSAGE_LIMIT:
                            return self._close_caller(1009, "CDP message too big")
                        if event.message_finished:
                            await self._command("".join(parts))
                            parts, size = [], 0
                    elif isinstance(event, BytesMessage):
                        # Chromium would read a binary frame as CBOR, which this relay does not check.
                        return self._close_caller(1003, "binary CDP messages are refused by Remote Dispatch")
                    elif isinstance(event, (Ping, Pong)):
                        self.up_writer.write(self.browser.send(event))  # the browser's pong comes back as it is
                    elif isinstance(event, CloseConnection):
                        self.up_writer.write(self.browser.send(CloseConnection(code=event.code, reason=event.reason)))
                        await self.up_writer.drain()
                        await asyncio.sleep(1)  # let the browser's closing frame through
                        return
                await self.up_writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            return
        except Exception:  # a protocol error of the caller's (wsproto raises on bad framing)
            return

    async def _command(self, text):
        self.proxy.used()
        try:
            message = loads(text)
        except ValueError:
            return self._reply(error_reply(None, "it is not valid JSON"))
        try:
            forwarded = self.policy.check(message)
            await self._check_target(forwarded)
        except Refused as exc:
            return self._reply(error_reply(message, str(exc)))
        if self.panel is not None and self._for_panel(forwarded):
            for answer in await self.panel.answer(forwarded):
                self._reply(answer)
            return
        try:
            self.up_writer.write(self.browser.send(TextMessage(data=dumps(forwarded))))
        except ValueError as exc:
            self._reply(error_reply(message, str(exc)))

    def _for_panel(self, message):
        """Whether `message` is the side panel's to answer (its session never reaches the browser); the panel is
        announced before the command that makes Playwright take the pages it was told of."""
        if message.get("sessionId") == self.panel.session_id and self.panel.announced:
            return True
        if self.panel.announce_before(message):
            self._reply(self.panel.attached_event())
        return False

    async def _check_target(self, message):
        """A command naming a target goes only to a page's (the browser is asked what the target is); the session's
        last page is never closed."""
        if message["method"] == "Page.close":
            return await self._not_the_last_page()
        target_id = (message.get("params") or {}).get("targetId") if message["method"] in TARGET_COMMANDS else None
        if target_id is None:
            return
        if not isinstance(target_id, str):
            raise Refused("\"targetId\" must be a string")
        info = await self.targets.info(target_id)
        refusal = target_refusal(info)
        if refusal:
            raise Refused(refusal)
        if message["method"] == "Target.closeTarget" and info.get("type") in ("page", "tab"):
            await self._not_the_last_page()

    async def _not_the_last_page(self):
        """A kept session lives in its pages: with none left, its tasks have no window to act in."""
        pages = await self.targets.pages()
        if pages is None or len(pages) <= 1:
            raise Refused(LAST_PAGE)

    def _reply(self, message):
        self._to_caller(self.caller.send(TextMessage(data=json.dumps(message))))

    def _close_caller(self, code, reason):
        self._to_caller(self.caller.send(CloseConnection(code=code, reason=reason)))

    def _to_caller(self, frame):
        if self.at_boundary:
            self.writer.write(frame)
        else:
            self.pending.append(frame)

    async def _from_browser(self):
        """Frames pass through untouched; only their headers are read, to know where our replies may go."""
        head = bytearray()  # a frame header split across reads
        remaining = 0  # payload bytes of the current frame still to come
        in_message = False  # a data frame without FIN was seen: its continuation frames follow
        small = None  # the payload so far of a small text frame, read for the stream handles it names
        try:
            while data := await self.up_reader.read(1 << 18):
                start, i, n = 0, 0, len(data)
                while i < n:
                    if remaining:
                        step = min(remaining, n - i)
                        if small is not None:
                            small += data[i:i + step]
                        remaining -= step
                        i += step
                    else:
                        head.append(data[i])
                        i += 1
                        if len(head) == _header_size(head):
                            fin, opcode, remaining = _parse_header(head)
                            head.clear()
                            if opcode in DATA_OPCODES:
                                in_message = not fin
                            small = bytearray() if fin and opcode == TEXT_OPCODE and remaining <= STREAM_REPLY_LIMIT \
                                else None
                    if small is not None and not remaining and not head:
                        self._streams_named(small)
                        small = None
                    self.at_boundary = not remaining and not head and not in_message
                    if self.at_boundary and self.pending:
                        self.writer.write(data[start:i])
                        start = i
                        self._flush()
                self.writer.write(data[start:])
                await self.writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass

    def _streams_named(self, payload):
        """A reply naming a stream (Page.printToPDF, Fetch.takeResponseBodyAsStream, IO.resolveBlob): it may be read."""
        if b'"stream"' in payload or b'"uuid"' in payload:
            for handle in STREAM_HANDLE.findall(payload):
                self.policy.stream_given(handle.decode("latin-1"))

    def _flush(self):
        for frame in self.pending:
            self.writer.write(frame)
        self.pending.clear()


def _header_size(head):
    if len(head) < 2:
        return None
    length = head[1] & 0x7F
    return 2 + (2 if length == 126 else 8 if length == 127 else 0) + (4 if head[1] & 0x80 else 0)


def _parse_header(head):
    fin, opcode, length = bool(head[0] & 0x80), head[0] & 0x0F, head[1] & 0x7F
    if length == 126:
        length = int.from_bytes(head[2:4], "big")
    elif length == 127:
        length = int.from_bytes(head[2:10], "big")
    return fin, opcode, length


async def read_head(reader, writer):
    """(method, path, headers with lower-case names) of a request; None (the connection closed) if none came."""
    try:
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
    except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, asyncio.TimeoutError, ConnectionError):
        writer.close()
        return None
    lines = head.decode("latin-1").split("\r\n")
    method, _, rest = lines[0].partition(" ")
    named = {}
    for line in lines[1:]:
        name, colon, value = line.partition(":")
        if colon:
            named[name.strip().lower()] = value.strip()
    return method, rest.rpartition(" ")[0], named


async def refuse(writer, status, reason, message, headers=""):
    """An HTTP error answer with the service's {error, message} body, and the connection closed."""
    body = json.dumps({"error": reason, "message": message}).encode()
    writer.write(f"HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n"
                 f"{headers}Connection: close\r\n\r\n".encode() + body)
    await _close(writer)


def refuse_unanswered(writer):
    return refuse(writer, 503, "Service Unavailable", UNANSWERED, f"Retry-After: {RETRY_SECONDS}\r\n")


async def _close(writer):
    try:
        await writer.drain()
    except ConnectionError:
        pass
    finally:
        writer.close()
