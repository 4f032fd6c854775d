"""The caller's own proxy (a task's or a kept session's `proxy`): behind the egress proxy, never instead of it.

Chromium still talks only to the egress proxy (app/egress/proxy.py). Its plugin (app/egress/plugin.py) checks each
destination against every fence first, and only then reaches it through the caller's proxy: an HTTP CONNECT tunnel
(https and wss) or a plain-http request in absolute form, both with `Proxy-Authorization: Basic`, or a SOCKS5
tunnel (RFC 1928, username/password per RFC 1929). An https:// proxy is spoken to over TLS, its certificate
verified. The proxy's own address passes the egress policy as any outbound address does.

The settings reach the egress proxy in a file of its directory, encrypted with a key derived from ENCRYPTION_KEY
and that directory (`key_for`): the proxy process gets that key only, and nothing of the credentials is on disk in
plain text. A pooled browser's proxy, started before its task, gets its task's proxy the same way.
"""
import base64
import hashlib
import hmac
import ipaddress
import json
import re
import socket
import struct

from cryptography.fernet import Fernet, InvalidToken

from .policy import EgressRefused, bracketed, host_pattern

SCHEMES = ("http", "https", "socks5")
MAX_CREDENTIAL_CHARS = 255  # RFC 1929's limit, for every scheme alike
MAX_HEAD_BYTES = 16384
HANDSHAKE_TIMEOUT = 10
_SERVER = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*)://([^/?#]*)(.*)", re.S)
# RFC 1928 §6 replies.
SOCKS_REPLIES = {1: "general failure", 2: "connection not allowed by its rules", 3: "network unreachable",
                 4: "host unreachable", 5: "connection refused", 6: "TTL expired", 7: "command not supported",
                 8: "address type not supported"}


class InvalidProxy(ValueError):
    """The `proxy` settings are malformed (the message names the field)."""


class UpstreamFailed(Exception):
    """The caller's proxy cannot carry the task: it refused the credentials, cannot be reached, or speaks no proxy
    protocol. The task ends `error` with this message."""


class DestinationFailed(Exception):
    """The caller's proxy works but did not reach this destination (its answer says why): that page fails only."""


def parse_server(text):
    """(scheme, host, port) of `proxy.server`: `http://host:port`, `https://host:port` or `socks5://host:port`,
    the port given, no path, no credentials. Raises InvalidProxy."""
    match = _SERVER.fullmatch(text.strip()) if isinstance(text, str) else None
    if not match:
        raise InvalidProxy("proxy.server must be a URL such as http://host:port, https://host:port or "
                           "socks5://host:port.")
    scheme, authority, rest = match[1].lower(), match[2], match[3]
    if scheme not in SCHEMES:
        raise InvalidProxy(f"proxy.server's scheme must be http, https or socks5, not {scheme!r}.")
    if "@" in authority:
        raise InvalidProxy("proxy.server must not carry credentials: send them as proxy.username and "
                           "proxy.password.")
    if rest not in ("", "/"):
        raise InvalidProxy("proxy.server must not have a path, query or fragment (scheme://host:port only).")
    try:
        pattern = host_pattern(authority)
    except EgressRefused as exc:
        raise InvalidProxy(f"proxy.server has an invalid host or port ({exc}).") from None
    if pattern.subdomains:
        raise InvalidProxy("proxy.server must name one host, not a '*.' pattern.")
    if pattern.port is None:
        raise InvalidProxy(f"proxy.server must name its port ({scheme}://host:port).")
    return scheme, pattern.host, pattern.port


def settings(proxy):
    """The stored form of a validated `proxy` field: {"server", "username", "password"}, server normalised."""
    scheme, host, port = parse_server(proxy["server"])
    return {"server": f"{scheme}://{bracketed(host)}:{port}", "username": proxy.get("username"),
            "password": proxy.get("password")}


def key_for(config, directory):
    """The Fernet key of the upstream file of the egress proxy in `directory`; None without ENCRYPTION_KEY."""
    secret = config.get("ENCRYPTION_KEY")
    if not secret:
        return None
    digest = hmac.new(str(secret).encode(), b"egress-upstream\0" + str(directory).encode(), hashlib.sha256).digest()
    return base64.urlsafe_b64encode(digest).decode()


def seal_file(key, proxy):
    return Fernet(key.encode()).encrypt(json.dumps(proxy).encode())


def unseal_file(key, data):
    """The settings in an upstream file, or None if they cannot be read (then nothing is forwarded at all)."""
    try:
        return json.loads(Fernet(key.encode()).decrypt(data))
    except (InvalidToken, ValueError, TypeError):
        return None


def basic(proxy):
    """The Proxy-Authorization value, or None without a username."""
    if not proxy.get("username"):
        return None
    pair = f"{proxy['username']}:{proxy.get('password') or ''}".encode()
    return b"Basic " + base64.b64encode(pair)


def describe(proxy):
    """The proxy as messages name it: its server only, never its credentials."""
    return f"the task's proxy {proxy['server']}"


def http_connect(sock, proxy, host, port):
    """Open a CONNECT tunnel to host:port through the HTTP(S) proxy on `sock`; returns the bytes that came after
    the proxy's answer (the destination's, if it spoke first). Raises UpstreamFailed or DestinationFailed."""
    target = f"{bracketed(host)}:{port}".encode()
    head = b"CONNECT " + target + b" HTTP/1.1\r\nHost: " + target + b"\r\n"
    if authorization := basic(proxy):
        head += b"Proxy-Authorization: " + authorization + b"\r\n"
    sock.sendall(head + b"\r\n")
    answer, _, rest = _read_head(sock, proxy).partition(b"\r\n\r\n")
    status_line = answer.split(b"\r\n", 1)[0].decode("latin-1")
    status = _status(status_line, proxy)
    if status == 407:
        raise UpstreamFailed(f"{describe(proxy)} refused the credentials (407 Proxy Authentication Required)")
    if status != 200:
        raise DestinationFailed(f"{describe(proxy)} answered {status_line[9:]!r} to CONNECT {target.decode()}")
    return rest


def check_response(first_chunk, proxy):
    """Raises UpstreamFailed if the proxy's answer to a plain-http request (its first bytes) is a 407."""
    line = bytes(first_chunk[:64]).split(b"\r\n", 1)[0]
    if re.match(rb"HTTP/1\.[01] 407\b", line):
        raise UpstreamFailed(f"{describe(proxy)} refused the credentials (407 Proxy Authentication Required)")


def socks5_connect(sock, proxy, host, port):
    """Open a SOCKS5 tunnel to host:port on `sock` (RFC 1928; username/password, RFC 1929, when given).
    The destination goes by name, as with CONNECT: the proxy resolves it. Raises UpstreamFailed/DestinationFailed."""
    username = (proxy.get("username") or "").encode()
    sock.sendall(b"\x05\x02\x00\x02" if username else b"\x05\x01\x00")
    version, method = _read_exactly(sock, 2, proxy)
    if version != 5:
        raise UpstreamFailed(f"{describe(proxy)} does not speak SOCKS5")
    if method == 0xFF or (method == 2 and not username) or method not in (0, 2):
        raise UpstreamFailed(f"{describe(proxy)} accepts none of the authentication methods offered "
                             f"({'username/password' if username else 'no credentials'})")
    if method == 2:
        password = (proxy.get("password") or "").encode()
        sock.sendall(bytes([1, len(username)]) + username + bytes([len(password)]) + password)
        if _read_exactly(sock, 2, proxy)[1] != 0:
            raise UpstreamFailed(f"{describe(proxy)} refused the credentials (SOCKS5 username/password)")
    try:
        ip = ipaddress.ip_address(host)
        address = (b"\x01" if ip.version == 4 else b"\x04") + ip.packed
    except ValueError:
        address = b"\x03" + bytes([len(host)]) + host.encode("ascii")
    sock.sendall(b"\x05\x01\x00" + address + struct.pack("!H", port))
    version, reply, _, kind = _read_exactly(sock, 4, proxy)
    if version != 5:
        raise UpstreamFailed(f"{describe(proxy)} does not speak SOCKS5")
    if reply != 0:
        raise DestinationFailed(f"{describe(proxy)} did not reach {bracketed(host)}:{port}: "
                                f"{SOCKS_REPLIES.get(reply, f'reply {reply}')}")
    length = {1: 4, 4: 16}.get(kind) or _read_exactly(sock, 1, proxy)[0]
    _read_exactly(sock, length + 2, proxy)  # the address it bound: of no use here


def _status(status_line, proxy):
    match = re.match(r"HTTP/1\.[01] (\d{3})\b", status_line)
    if not match:
        raise UpstreamFailed(f"{describe(proxy)} does not speak HTTP proxy (it answered {status_line[:60]!r})")
    return int(match[1])


def _read_head(sock, proxy):
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = _recv(sock, proxy)
        data += chunk
        if len(data) > MAX_HEAD_BYTES:
            raise UpstreamFailed(f"{describe(proxy)} sent an answer too long to be a proxy's")
    return data


def _read_exactly(sock, count, proxy):
    data = b""
    while len(data) < count:
        data += _recv(sock, proxy, count - len(data))
    return data


def _recv(sock, proxy, size=4096):
    try:
        chunk = sock.recv(size)
    except socket.timeout:
        raise UpstreamFailed(f"{describe(proxy)} did not answer within {HANDSHAKE_TIMEOUT} seconds") from None
    except OSError as exc:
        raise UpstreamFailed(f"{describe(proxy)} cannot be reached: {exc.strerror or exc}") from None
    if not chunk:
        raise UpstreamFailed(f"{describe(proxy)} closed the connection during its handshake")
    return chunk

