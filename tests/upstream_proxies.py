"""A caller's own proxy, on loopback, for tests: an HTTP proxy that demands Basic credentials (CONNECT and
absolute-form requests) and a SOCKS5 proxy that demands a username and password (RFC 1928/1929). Each logs every
request it forwards, with the credentials it saw, and every one it refused."""
import base64
import ipaddress
import socket
import struct
import threading


class _Proxy:
    """A threaded TCP server on 127.0.0.1; `log` holds one dict per request: target, credentials, forwarded."""

    scheme = ""

    def __init__(self, username, password, tls=None):
        self.username, self.password, self.tls = username, password, tls  # tls: a server SSLContext (https://)
        self.log = []
        self._lock = threading.Lock()
        self._sock = socket.create_server(("127.0.0.1", 0))
        self.port = self._sock.getsockname()[1]
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def server(self):
        return f"{self.scheme}://127.0.0.1:{self.port}"

    def forwarded(self):
        return [entry for entry in self.log if entry["forwarded"]]

    def close(self):
        self._closed = True
        self._sock.close()

    def _note(self, **entry):
        with self._lock:
            self.log.append(entry)

    def _accept(self):
        while not self._closed:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve_safely, args=(conn,), daemon=True).start()

    def _serve_safely(self, conn):
        try:
            if self.tls is not None:
                conn = self.tls.wrap_socket(conn, server_side=True)
            with conn:
                self._serve(conn)
        except OSError:
            conn.close()


class BasicAuthProxy(_Proxy):
    """`http://127.0.0.1:<port>` (`https://` with `tls`): Proxy-Authorization Basic username:password or 407."""

    @property
    def scheme(self):
        return "https" if self.tls else "http"

    def _serve(self, conn):
        head = _read_head(conn)
        if head is None:
            return
        head, rest = head
        lines = head.decode("latin-1").split("\r\n")
        method, target, _ = lines[0].split(" ", 2)
        headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:] if line)}
        seen = headers.get("proxy-authorization")
        expected = "Basic " + base64.b64encode(f"{self.username}:{self.password}".encode()).decode()
        if seen != expected:
            self._note(method=method, target=target, authorization=seen, forwarded=False)
            conn.sendall(b"HTTP/1.1 407 Proxy Authentication Required\r\nProxy-Authenticate: Basic realm=\"test\"\r\n"
                         b"Content-Length: 0\r\nConnection: close\r\n\r\n")
            return
        self._note(method=method, target=target, authorization=seen, forwarded=True)
        if method == "CONNECT":
            host, _, port = target.rpartition(":")
            upstream = socket.create_connection((host.strip("[]"), int(port)), timeout=10)
            conn.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
        else:  # absolute form: to the server, in origin form, without our header
            authority, _, path = target.partition("://")[2].partition("/")
            host, _, port = authority.rpartition(":") if ":" in authority else (authority, "", "80")
            upstream = socket.create_connection((host.strip("[]"), int(port)), timeout=10)
            kept = [line for line in lines[1:] if line and not line.lower().startswith("proxy-")]
            upstream.sendall("\r\n".join([f"{method} /{path} HTTP/1.1", *kept, "", ""]).encode("latin-1"))
        with upstream:
            if rest:
                upstream.sendall(rest)
            _relay(conn, upstream)


class Socks5Proxy(_Proxy):
    """`socks5://127.0.0.1:<port>`: username/password authentication only (RFC 1929)."""

    scheme = "socks5"

    def _serve(self, conn):
        version, count = _exactly(conn, 2)
        methods = _exactly(conn, count)
        if version != 5 or 2 not in methods:
            conn.sendall(b"\x05\xff")
            self._note(target=None, username=None, forwarded=False)
            return
        conn.sendall(b"\x05\x02")
        _, length = _exactly(conn, 2)
        username = _exactly(conn, length).decode()
        password = _exactly(conn, _exactly(conn, 1)[0]).decode()
        good = (username, password) == (self.username, self.password)
        conn.sendall(b"\x01\x00" if good else b"\x01\x01")
        if not good:
            self._note(target=None, username=username, forwarded=False)
            return
        _, command, _, kind = _exactly(conn, 4)
        if kind == 3:
            host = _exactly(conn, _exactly(conn, 1)[0]).decode()
        else:
            host = str(ipaddress.ip_address(_exactly(conn, 4 if kind == 1 else 16)))
        port = struct.unpack("!H", _exactly(conn, 2))[0]
        self._note(target=f"{host}:{port}", username=username, forwarded=True)
        upstream = socket.create_connection((host, port), timeout=10)
        conn.sendall(b"\x05\x00\x00\x01" + bytes(4) + bytes(2))
        with upstream:
            _relay(conn, upstream)


def fetch_through(port, url, tunnel):
    """GET `url` (http://host:port/path) through the proxy at 127.0.0.1:`port`, on a connection of its own: in
    absolute form, or inside a CONNECT tunnel. Returns the whole answer as text (the proxy's, if it refused)."""
    host_port, path = url.split("/")[2], "/" + url.split("/", 3)[3]
    answer = b""
    with socket.create_connection(("127.0.0.1", port), timeout=20) as sock:
        if tunnel:
            sock.sendall(f"CONNECT {host_port} HTTP/1.1\r\nHost: {host_port}\r\n\r\n".encode())
            head, rest = _read_head(sock) or (b"", b"")
            if not head.startswith(b"HTTP/1.1 200"):
                answer, path = head + b"\r\n\r\n" + rest, None  # refused: its answer is what there is to read
        if path is not None:
            target = path if tunnel else url
            sock.sendall(f"GET {target} HTTP/1.1\r\nHost: {host_port}\r\nConnection: close\r\n\r\n".encode())
        while chunk := sock.recv(65536):
            answer += chunk
    return answer.decode("latin-1")


def _read_head(conn):
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(4096)
        if not chunk:
            return None
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    return head, rest


def _exactly(conn, count):
    data = b""
    while len(data) < count:
        chunk = conn.recv(count - len(data))
        if not chunk:
            raise OSError("closed")
        data += chunk
    return data


def _relay(a, b):
    """Both directions until either side closes."""
    def pump(source, sink):
        try:
            while chunk := source.recv(65536):
                sink.sendall(chunk)
        except OSError:
            pass
        for sock in (source, sink):
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    other = threading.Thread(target=pump, args=(b, a), daemon=True)
    other.start()
    pump(a, b)
    other.join(30)
