"""The proxy.py plugin that makes the browser's egress proxy connect only to addresses app.egress checked.

Loaded by `python -m proxy --plugins app.egress.plugin.EgressPlugin` (see app/egress/proxy.py),
with the policy's settings in RD_EGRESS_POLICY (JSON), the refusal log's path in RD_EGRESS_LOG, the
running task's allowedDomains file in RD_EGRESS_FENCE, and the caller's proxy (app/egress/upstream.py) in the
encrypted file RD_EGRESS_UPSTREAM, whose key is RD_EGRESS_KEY.
"""
import json
import os
import socket
import ssl
import time
from dataclasses import replace

from proxy.core.base import TcpUpstreamConnectionHandler
from proxy.http.exception import HttpRequestRejected
from proxy.http.parser import HttpParser, httpParserTypes
from proxy.http.proxy import HttpProxyBasePlugin
from proxy.http.responses import PROXY_TUNNEL_ESTABLISHED_RESPONSE_PKT

from app.egress import endpoints, upstream
from app.egress.policy import HostPattern, OutsideFence, Policy  # noqa: E402  (at start-up, not on the browser's first request)

# Read once, when proxy.py loads the plugin (before it listens; its acceptor inherits it).
_POLICY = Policy.from_config(json.loads(os.environ.get("RD_EGRESS_POLICY") or "{}"))
if _POLICY.allow_private or _POLICY.allow_hosts:  # local addresses may be asked for: whose is each port, now
    endpoints.learn(_POLICY.service)  # (a pooled browser's proxy starts long before its task's first request)


_fenced = {"stamp": None, "policy": _POLICY}
_chained = {"stamp": None, "proxy": None}
UNREADABLE = {"server": "(settings that cannot be read)"}  # nothing goes out then: not through our address either
ANSWER_HEADERS = {b"Content-Type": b"text/plain; charset=utf-8", b"Connection": b"close"}


def _stamp(path):
    """What changes when the file at `path` is replaced; None when there is none."""
    try:
        info = os.stat(path) if path else None
    except FileNotFoundError:
        info = None
    return info and (info.st_ino, info.st_mtime_ns, info.st_size)


def _upstream():
    """The caller's proxy in RD_EGRESS_UPSTREAM's file (re-read when it changes), or None: connect directly."""
    path, key = os.environ.get("RD_EGRESS_UPSTREAM"), os.environ.get("RD_EGRESS_KEY")
    stamp = _stamp(path)
    if stamp != _chained["stamp"]:
        proxy = None
        if stamp:
            try:
                with open(path, "rb") as f:
                    proxy = upstream.unseal_file(key, f.read()) if key else None
            except OSError:
                proxy = None
            proxy = proxy or UNREADABLE
        _chained.update(stamp=stamp, proxy=proxy)
    return _chained["proxy"]


def _policy():
    """The policy, narrowed to the running task's allowedDomains when RD_EGRESS_FENCE's file holds them
    (re-read when it changes; a file that cannot be read fences everything off)."""
    path = os.environ.get("RD_EGRESS_FENCE")
    stamp = _stamp(path)
    if stamp != _fenced["stamp"]:
        policy = _POLICY
        if stamp:
            try:
                with open(path) as f:
                    policy = _POLICY.narrowed(json.load(f))
            except (OSError, ValueError):
                policy = replace(_POLICY, task_hosts=(HostPattern("", 0),))  # matches nothing
        _fenced.update(stamp=stamp, policy=policy)
    return _fenced["policy"]


def _record(entry):
    path = os.environ.get("RD_EGRESS_LOG")
    if not path:
        return
    # One short write with O_APPEND per refusal: lines from concurrent connections never interleave.
    line = (json.dumps(entry, sort_keys=True) + "\n").encode()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


def _unresolvable(host):
    """A name that does not resolve was refused too (nothing to connect to) but is no policy decision: the
    browser's own calls home do that where there is no DNS, and the trace need not show them."""
    try:
        socket.getaddrinfo(host, None)
    except (OSError, UnicodeError):
        return True
    return False


def _text(value):
    return value.decode("latin-1") if isinstance(value, (bytes, bytearray)) else (value or "")


class EgressPlugin(TcpUpstreamConnectionHandler, HttpProxyBasePlugin):
    """Checks each CONNECT / proxied HTTP target with the egress policy, refuses with 403, pins the address; with a
    caller's proxy set, reaches the checked destination through it (app/egress/upstream.py) over a connection of
    its own (`self.upstream`, proxy.py's own then stays unused)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._checked = None  # (host, port, address) of the request being connected
        self._proxy = None  # the caller's proxy this connection goes through
        self._is_tunnel = False  # and it is a CONNECT tunnel
        self._pipeline = None  # a later request on a plain-http connection through it, being read
        self._answer_due = None  # the method of the plain-http request whose answer the next upstream bytes begin
        self._failed = False  # that answer was a 407: what follows of it is dropped

    def before_upstream_connection(self, request):
        self._checked = None
        host, port = self._target(request)
        try:
            addresses = _policy().check_host(host, port)
        except ValueError as exc:  # app.egress.EgressRefused (an UnsafeUrl, a ValueError)
            # A fence refuses before any lookup: its refusal is the policy's even for a name that does not resolve.
            self._refuse(request, host, port, str(exc), fenced=isinstance(exc, OutsideFence))
        self._checked = (host, port, addresses[0])
        if not request.is_https_tunnel:
            # proxy.py sends later requests on this client connection to the same upstream, whatever host
            # they name: ask the server to close after this response, so the browser opens a new proxy
            # connection (checked again) for its next request. handle_client_request refuses the others.
            request.del_headers([b"connection", b"keep-alive"])
            request.add_header(b"Connection", b"close")
        proxy = _upstream()
        if proxy is None:
            return request
        self._chain(request, proxy, host, port)
        return None  # connected through the caller's proxy: proxy.py connects nothing

    def handle_client_request(self, request):
        if request.is_https_tunnel or self._checked is None:
            return request
        host, port = self._target(request)
        if (host, port) != self._checked[:2]:
            self._refuse(request, host, port,
                         f"a request for {host}:{port} on a connection to {self._checked[0]}:{self._checked[1]}")
        if self.upstream is None:
            return request
        self._forward(request)
        return None

    def handle_client_data(self, raw):
        """Only through the caller's proxy (proxy.py has no connection then): a tunnel's bytes go as they are; on
        a plain-http connection each later request is read and checked as the first was."""
        if self.upstream is None:
            return raw
        if self._checked is None or self._proxy is None:
            return None
        if self._is_tunnel:
            self.upstream.queue(raw)
            return None
        self._pipeline = self._pipeline or HttpParser(httpParserTypes.REQUEST_PARSER)
        self._pipeline.parse(raw)
        if self._pipeline.is_complete:
            request, self._pipeline = self._pipeline, None
            self.handle_client_request(request)
        return None

    def handle_upstream_data(self, raw):
        """The caller's proxy's bytes, to the browser; its 407 to a plain-http request becomes our 502 that says
        so (and ends the task, see _chain_failed)."""
        if self._answer_due:
            method, self._answer_due = self._answer_due, None
            try:
                upstream.check_response(raw, self._proxy)
            except upstream.UpstreamFailed as exc:
                self._failed = True
                self._chain_failed(self._checked[0], self._checked[1], method, str(exc))
                self.client.queue(_bad_gateway(str(exc)).response(None))
        if not self._failed:
            self.client.queue(raw)

    def on_upstream_connection_close(self):
        if self.upstream is not None and not self.upstream.closed:
            self.upstream.close()
        self.upstream = None

    def resolve_dns(self, host, port):
        # proxy.py would resolve the name again when this returns None: a second answer (DNS rebinding) could
        # then point elsewhere. Connect to the address the policy checked, never to anything else.
        checked = self._checked
        if checked is None or checked[0] != _text(host).strip("[]") or checked[1] != int(port):
            raise HttpRequestRejected(403, b"Forbidden", body=b"target was not checked")
        return checked[2], None

    def _chain(self, request, proxy, host, port):
        """Connect to host:port (it passed every fence) through the caller's proxy, whose own address passes the
        instance's policy (not the task's fence: that is for destinations). Its failure ends the task."""
        self._proxy, self._is_tunnel = proxy, request.is_https_tunnel
        method = "CONNECT" if request.is_https_tunnel else _text(request.method)
        try:
            rest = self._open(proxy, host, port, request.is_https_tunnel)
        except (upstream.UpstreamFailed, upstream.DestinationFailed) as exc:
            self.on_upstream_connection_close()
            if isinstance(exc, upstream.UpstreamFailed):  # else that page fails only: the proxy works
                self._chain_failed(host, port, method, str(exc))
            raise _bad_gateway(str(exc)) from None
        if request.is_https_tunnel:
            self.client.queue(PROXY_TUNNEL_ESTABLISHED_RESPONSE_PKT)
            if rest:
                self.client.queue(memoryview(rest))

    def _open(self, proxy, host, port, tunnel):
        """The connection to the caller's proxy, its handshake done; returns what came after a CONNECT answer."""
        if proxy is UNREADABLE:
            raise upstream.UpstreamFailed("the task's proxy settings cannot be read")
        scheme, proxy_host, proxy_port = upstream.parse_server(proxy["server"])
        try:
            address = _POLICY.check_host(proxy_host, proxy_port)[0]
        except ValueError as exc:
            raise upstream.UpstreamFailed(f"{upstream.describe(proxy)} is refused by the egress policy: {exc}") \
                from None
        self.initialize_upstream(address, proxy_port)
        try:
            self.upstream.connect()
            if scheme == "https":
                self.upstream.wrap(proxy_host)
        except ssl.SSLError as exc:
            raise upstream.UpstreamFailed(f"{upstream.describe(proxy)} failed its TLS handshake: "
                                          f"{exc.reason or exc}") from None
        except OSError as exc:
            raise upstream.UpstreamFailed(f"{upstream.describe(proxy)} cannot be reached: "
                                          f"{exc.strerror or exc}") from None
        sock = self.upstream.connection
        sock.settimeout(upstream.HANDSHAKE_TIMEOUT)
        rest = b""
        if scheme == "socks5":
            upstream.socks5_connect(sock, proxy, host, port)
        elif tunnel:
            rest = upstream.http_connect(sock, proxy, host, port)
        sock.setblocking(False)
        return rest

    def _forward(self, request):
        """A plain-http request through the caller's proxy: in absolute form with its credentials (HTTP), or as a
        server gets it (SOCKS5, a tunnel to the server already)."""
        request.del_headers([b"proxy-authorization", b"proxy-connection"])
        if self._proxy["server"].startswith("socks5:"):
            data = request.build()
        else:
            if authorization := upstream.basic(self._proxy):
                request.add_header(b"Proxy-Authorization", authorization)
            data = request.build(for_proxy=True)
            self._answer_due = _text(request.method)
        self.upstream.queue(memoryview(data))

    def _chain_failed(self, host, port, method, reason):
        """The caller's proxy failed: the worker ends the task `error` with `reason` (EgressProxy.failure)."""
        _record({"time": time.time(), "method": method, "host": host, "port": port, "reason": reason,
                 "kind": "upstream"})

    def _target(self, request):
        host, port = _text(request.host).strip("[]"), request.port
        if not host or not port:
            raise HttpRequestRejected(400, b"Bad Request", body=b"a proxy request names its host and port")
        return host, int(port)

    def _refuse(self, request, host, port, reason, fenced=False):
        method = "CONNECT" if request.is_https_tunnel else _text(request.method)
        _record({"time": time.time(), "method": method, "host": host, "port": port, "reason": reason,
                 "kind": "unresolved" if not fenced and _unresolvable(host) else "policy"})
        body = f"Refused by Remote Dispatch's egress policy: {reason}\n"
        raise HttpRequestRejected(403, b"Forbidden", headers={b"Content-Type": b"text/plain; charset=utf-8"},
                                  body=body.encode())


def _bad_gateway(text):
    """The 502 the browser gets from us when the caller's proxy did not carry its request."""
    return HttpRequestRejected(502, b"Bad Gateway", headers=ANSWER_HEADERS,
                               body=f"Remote Dispatch's egress: {text}\n".encode())
