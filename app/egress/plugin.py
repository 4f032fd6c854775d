"""The proxy.py plugin that makes the browser's egress proxy connect only to addresses app.egress checked.

Loaded by `python -m proxy --plugins app.egress.plugin.EgressPlugin` (see app/egress/proxy.py),
with the policy's settings in RD_EGRESS_POLICY (JSON), the refusal log's path in RD_EGRESS_LOG and the
running task's allowedDomains file in RD_EGRESS_FENCE.
"""
import json
import os
import socket
import time
from dataclasses import replace

from proxy.http.exception import HttpRequestRejected
from proxy.http.proxy import HttpProxyBasePlugin

from app.egress import endpoints
from app.egress.policy import HostPattern, OutsideFence, Policy  # noqa: E402  (at start-up, not on the browser's first request)

# Read once, when proxy.py loads the plugin (before it listens; its acceptor inherits it).
_POLICY = Policy.from_config(json.loads(os.environ.get("RD_EGRESS_POLICY") or "{}"))
if _POLICY.allow_private or _POLICY.allow_hosts:  # local addresses may be asked for: whose is each port, now
    endpoints.learn(_POLICY.service)  # (a pooled browser's proxy starts long before its task's first request)


_fenced = {"stamp": None, "policy": _POLICY}


def _policy():
    """The policy, narrowed to the running task's allowedDomains when RD_EGRESS_FENCE's file holds them
    (re-read when it changes; a file that cannot be read fences everything off)."""
    path = os.environ.get("RD_EGRESS_FENCE")
    try:
        info = os.stat(path) if path else None
    except FileNotFoundError:
        info = None
    stamp = info and (info.st_ino, info.st_mtime_ns, info.st_size)
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


class EgressPlugin(HttpProxyBasePlugin):
    """Checks each CONNECT / proxied HTTP target with the egress policy, refuses with 403, pins the address."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._checked = None  # (host, port, address) of the request being connected

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
        return request

    def handle_client_request(self, request):
        if request.is_https_tunnel or self._checked is None:
            return request
        host, port = self._target(request)
        if (host, port) != self._checked[:2]:
            self._refuse(request, host, port,
                         f"a request for {host}:{port} on a connection to {self._checked[0]}:{self._checked[1]}")
        return request

    def resolve_dns(self, host, port):
        # proxy.py would resolve the name again when this returns None: a second answer (DNS rebinding) could
        # then point elsewhere. Connect to the address the policy checked, never to anything else.
        checked = self._checked
        if checked is None or checked[0] != _text(host).strip("[]") or checked[1] != int(port):
            raise HttpRequestRejected(403, b"Forbidden", body=b"target was not checked")
        return checked[2], None

    def _target(self, request):
        host, port = _text(request.host).strip("[]"), request.port
        if not host or not port:
            raise HttpRequestRejected(400, b"Bad Request", body=b"a proxy request names its host and port")
        return host, int(port)

    def _refuse(self, request, host, port, reason, fenced=False):
        method = "CONNECT" if request.is_https_tunnel else _text(request.method)
        _record({"time": time.time(), "method": method, "host": host, "port": port, "reason": reason,
                 "kind": "unresolved" if not fenced and _unresolvable(host) else "policy"})
        body = f"Refused by Remote Dispatch's egress policy: {reason}\n".encode()
        raise HttpRequestRejected(403, b"Forbidden", headers={b"Content-Type": b"text/plain; charset=utf-8"},
                                  body=body)
