"""HTTP to a browser box's chromedriver and DevTools over their Unix sockets (`http+unix://` URLs), and to a Grid."""
import base64
import http.client
import json
import os
import socket
from urllib.parse import quote, unquote, urlsplit

SCHEME = "http+unix"
UNIX_PATH_MAX = 107  # bytes of a Unix socket's path (sun_path is 108, NUL included)


def unix_url(path):
    """The base URL of an HTTP server on the Unix socket `path`: http+unix://<path, percent-encoded>."""
    return f"{SCHEME}://{quote(str(path), safe='')}"


def socket_path(url):
    """The socket path of an http+unix:// URL (or of a `unix:<path>` DevTools address); None for any other."""
    if url.startswith("unix:"):
        return url[len("unix:"):]
    if url.startswith(SCHEME + "://"):
        return unquote(urlsplit(url).netloc)
    return None


def connect(sock, path):
    """`sock.connect(path)` for a socket path of any length. A box's folder lies under VAR_DIR, which can be deeper
    than a Unix socket's address holds: a longer path is reached through a descriptor of its folder
    (/proc/self/fd/N/<name>), open only while connecting."""
    path = os.fspath(path)
    if len(os.fsencode(path)) <= UNIX_PATH_MAX:
        sock.connect(path)
        return
    folder = os.open(os.path.dirname(path), os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        sock.connect(f"/proc/self/fd/{folder}/{os.path.basename(path)}")
    finally:
        os.close(folder)


def open_socket(path, timeout=None):
    """A stream socket connected to the Unix socket `path` (any length); raises OSError."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.settimeout(timeout)
        connect(sock, path)
    except OSError:
        sock.close()
        raise
    return sock


class UnixHTTPConnection(http.client.HTTPConnection):
    """http.client's connection, to a Unix socket instead of a TCP port (Host: localhost)."""

    def __init__(self, path, timeout=socket._GLOBAL_DEFAULT_TIMEOUT):
        super().__init__("localhost", timeout=timeout)
        self.socket_path = path

    def connect(self):
        self.sock = open_socket(self.socket_path,
                                None if self.timeout is socket._GLOBAL_DEFAULT_TIMEOUT else self.timeout)


def request(method, url, body=None, timeout=15):
    """One HTTP request with a JSON body to a WebDriver or DevTools endpoint: http+unix:// (a box of ours),
    http(s):// (a Grid; `user:password@` in it is sent as Basic auth). (status, raw body); raises OSError or
    http.client.HTTPException."""
    parts = urlsplit(url)
    headers = {"Accept": "application/json"}
    if parts.scheme == SCHEME:
        connection = UnixHTTPConnection(unquote(parts.netloc), timeout=timeout)
    else:
        connection_class = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
        connection = connection_class(parts.hostname, parts.port, timeout=timeout)
        if parts.username is not None:
            credentials = f"{unquote(parts.username)}:{unquote(parts.password or '')}"
            headers["Authorization"] = "Basic " + base64.b64encode(credentials.encode()).decode()
    payload = None if body is None else json.dumps(body).encode()
    if payload is not None:
        headers["Content-Type"] = "application/json; charset=utf-8"
    try:
        connection.request(method, (parts.path or "/") + (f"?{parts.query}" if parts.query else ""),
                           body=payload, headers=headers)
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


def driver_status(url):
    """True once the chromedriver at `url` says it is ready; network errors mean "not yet" (False)."""
    try:
        _status, raw = request("GET", url + "/status", timeout=2)
        return bool(json.loads(raw)["value"].get("ready"))
    except (OSError, ValueError, KeyError, TypeError, AttributeError, http.client.HTTPException):
        return False
