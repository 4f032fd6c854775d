"""The live view's own CDP connection to one browser: attach to a page, screencast it, dispatch input into it."""
import json
import socket
import threading
from urllib.parse import urlsplit

import websocket

from ..sandbox import unix_http

CONNECT_TIMEOUT = 5
CALL_TIMEOUT = 5
HEAD_LIMIT = 64 * 1024


class CdpUnavailable(Exception):
    """The browser's DevTools endpoint cannot be reached (gone, or not on this host)."""


def _unix_socket(path):
    try:
        return unix_http.open_socket(path, CONNECT_TIMEOUT)
    except OSError as exc:
        raise CdpUnavailable(f"the browser's DevTools socket does not answer ({exc.strerror or exc})") from None


def _stream_socket(url):
    try:
        return socket.create_connection((url.hostname, url.port), CONNECT_TIMEOUT)
    except OSError as exc:
        raise CdpUnavailable(f"the browser's machine does not answer ({exc.strerror or exc})") from None


def _browser_path(connect, headers):
    """The browser-level WebSocket path, read from /json/version (Chromium accepts Host: localhost only).
    `connect()`: a socket to its DevTools; `headers`: lines the request carries (a stream endpoint's token)."""
    sock = connect()
    try:
        sock.sendall("GET /json/version HTTP/1.1\r\nHost: localhost\r\n{}\r\n".format(
            "".join(line + "\r\n" for line in headers)).encode())
        data = b""
        while b"\r\n\r\n" not in data and len(data) < HEAD_LIMIT:
            chunk = sock.recv(4096)
            if not chunk:
                break
            data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        length = next((int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                       if line.lower().startswith(b"content-length:")), None)
        if length is None or length > HEAD_LIMIT:
            raise CdpUnavailable("the browser's DevTools endpoint gave no version document")
        while len(body) < length:
            chunk = sock.recv(4096)
            if not chunk:
                break
            body += chunk
        if head.split(b" ", 2)[1:2] != [b"200"]:
            raise CdpUnavailable("the browser's DevTools endpoint refused: " + body.decode("utf-8", "replace")[:200])
        return urlsplit(json.loads(body)["webSocketDebuggerUrl"]).path
    except (OSError, ValueError, KeyError) as exc:
        raise CdpUnavailable(f"the browser's DevTools endpoint did not answer ({exc})") from None
    finally:
        sock.close()


class Cdp:
    """A browser-level CDP connection (flattened sessions). `endpoint`: "unix:<path>" (a BrowserBox's DevTools
    socket on this machine), a ws:// URL (a Grid node's se:cdp), or with `token` the http:// URL of the stream
    endpoint of the machine holding the browser (workers/browser/host_endpoint.py), which the token names it to.
    Events go to `on_event(method, params, session)` on the reader thread; `call` waits for its reply, `send` does
    not."""

    def __init__(self, endpoint, on_event, token=None):
        self.on_event = on_event
        self._lock = threading.Lock()
        self._next = 0
        self._waiting = {}
        self.closed = threading.Event()
        try:
            if endpoint.startswith("unix:"):
                self.ws = self._through(lambda: _unix_socket(endpoint[len("unix:"):]), [])
            elif token:
                url = urlsplit(endpoint)
                self.ws = self._through(lambda: _stream_socket(url), [f"Authorization: Bearer {token}"])
            else:
                self.ws = websocket.create_connection(endpoint, timeout=CONNECT_TIMEOUT, suppress_origin=True)
        except (OSError, websocket.WebSocketException) as exc:
            raise CdpUnavailable(f"the browser's DevTools endpoint refused the connection ({exc})") from None
        self.ws.settimeout(None)
        self._reader = threading.Thread(target=self._read, name="live-cdp", daemon=True)
        self._reader.start()

    @staticmethod
    def _through(connect, headers):
        """The browser's WebSocket over sockets from `connect()` (its discovery document, then the socket itself)."""
        return websocket.create_connection("ws://localhost" + _browser_path(connect, headers), socket=connect(),
                                           header=headers, timeout=CONNECT_TIMEOUT, suppress_origin=True)

    def send(self, method, params=None, session=None, waiter=None):
        """Send one command (`waiter`: (event, dict) that its reply fills); returns its id."""
        with self._lock:
            self._next += 1
            message = {"id": self._next, "method": method, "params": params or {}}
            if session:
                message["sessionId"] = session
            if waiter:
                self._waiting[self._next] = waiter
            try:
                self.ws.send(json.dumps(message))
            except (OSError, websocket.WebSocketException):
                self.closed.set()
                raise CdpUnavailable("the browser is gone") from None
            return self._next

    def call(self, method, params=None, session=None, timeout=CALL_TIMEOUT):
        """The command's result, or CdpUnavailable (no answer within `timeout` seconds, or an error reply)."""
        return self.result(method, self.reply(method, params, session, timeout))

    def reply(self, method, params=None, session=None, timeout=CALL_TIMEOUT):
        """The command's whole reply ({"result"} or {"error"}), None when none came within `timeout` seconds;
        CdpUnavailable when the connection is gone."""
        event, box = threading.Event(), {}
        number = self.send(method, params, session, waiter=(event, box))
        if not event.wait(timeout):
            self._waiting.pop(number, None)
            return None
        if not box:
            raise CdpUnavailable("the browser is gone")
        return box

    @staticmethod
    def result(method, reply):
        if reply is None:
            raise CdpUnavailable(f"the browser did not answer {method}")
        if "error" in reply:
            raise CdpUnavailable(f"{method}: {reply['error'].get('message', 'refused')}")
        return reply.get("result") or {}

    def _read(self):
        try:
            while True:
                message = json.loads(self.ws.recv())
                if "id" in message:
                    waiter = self._waiting.pop(message["id"], None)
                    if waiter:
                        waiter[1].update(message)
                        waiter[0].set()
                elif "method" in message:
                    self.on_event(message["method"], message.get("params") or {}, message.get("sessionId"))
        except (OSError, ValueError, websocket.WebSocketException):
            pass
        finally:
            self.closed.set()
            for event, _box in list(self._waiting.values()):
                event.set()

    def close(self):
        self.closed.set()
        try:
            self.ws.close()
        except (OSError, websocket.WebSocketException):
            pass
