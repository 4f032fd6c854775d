"""Outbound HTTP through an egress Policy (app/egress/policy.py): every connection goes to an address the policy
checked, for the host the URL names (TLS still verifies that name). Workers only: the web process checks
URLs but sends nothing, and importing requests would cost it about 6 MiB."""
import certifi
import requests
import urllib3
from requests.adapters import HTTPAdapter

from .policy import MAX_REDIRECTS, EgressRefused, bracketed


def fetch(policy, method, url, *, timeout, max_bytes=None, headers=None, data=None,
          follow_redirects=True, verify=True, schemes=("http", "https")):
    """One request through `policy`; the body is read (at most `max_bytes`, then `response.truncated`)
    and the connection released. Raises EgressRefused, or requests' exceptions."""
    target = policy.check_url(url, schemes)
    with EgressSession(policy, tuple(schemes)) as session:
        session.get_adapter(target.url).prechecked[target.url] = target  # resolved once, not twice
        response = session.request(method, target.url, timeout=timeout, headers=headers, data=data,
                                   allow_redirects=follow_redirects, verify=verify, stream=True)
        try:
            if max_bytes is None:
                response.content  # noqa: B018 (reads the body)
                response.truncated = False
            else:
                body = response.raw.read(max_bytes + 1, decode_content=True) if max_bytes else b""
                response.truncated = len(body) > max_bytes
                response._content, response._content_consumed = body[:max_bytes], True
        finally:
            response.close()
    return response



class EgressSession(requests.Session):
    """A requests.Session whose connections go only to addresses `policy` checked (pinned; TLS still verifies
    the name); each redirect is checked again. No environment proxies."""

    def __init__(self, policy, schemes=("http", "https")):
        super().__init__()
        self.trust_env = False  # HTTP(S)_PROXY from the environment would bypass the pinning
        self.max_redirects = MAX_REDIRECTS
        self.schemes = schemes
        adapter = _PinnedAdapter(policy, schemes)
        for scheme in ("http://", "https://"):
            self.mount(scheme, adapter)

    def get_adapter(self, url):
        scheme = url.partition(":")[0].lower()
        if scheme not in self.schemes:
            raise EgressRefused(f"URL scheme must be {' or '.join(self.schemes)}, not {scheme!r}")
        return super().get_adapter(url)


class _PinnedAdapter(HTTPAdapter):
    """Sends each request to the addresses its URL's check returned, with Host/SNI kept as the name."""

    def __init__(self, policy, schemes):
        super().__init__(max_retries=0)
        self.policy, self.schemes, self.pools = policy, schemes, {}
        self.prechecked = {}  # URL → Target its caller checked just now

    def send(self, request, stream=False, timeout=None, verify=True, cert=None, proxies=None):
        target = self.prechecked.pop(request.url, None) or self.policy.check_url(request.url, self.schemes)
        headers = {name: value for name, value in request.headers.items() if name.lower() != "host"}
        headers["Host"] = target.host_header
        chunked = request.body is not None and "Content-Length" not in request.headers
        if isinstance(timeout, tuple):
            timeout = urllib3.Timeout(connect=timeout[0], read=timeout[1])
        else:
            timeout = urllib3.Timeout(connect=timeout, read=timeout)
        failure = None
        for address in target.addresses:
            pool = self._pool(target, address, verify, cert)
            try:
                response = pool.urlopen(request.method, target.path, body=request.body, headers=headers,
                                        redirect=False, assert_same_host=False, preload_content=False,
                                        decode_content=False, retries=False, timeout=timeout, chunked=chunked)
            except urllib3.exceptions.NewConnectionError as exc:
                failure = requests.ConnectionError(f"cannot connect to {bracketed(address)}:{target.port}: "
                                                   f"{exc.__cause__ or exc}", request=request)
                continue  # another address of the host may answer
            except urllib3.exceptions.ConnectTimeoutError:
                failure = requests.ConnectTimeout(
                    f"timed out connecting to {bracketed(address)}:{target.port}", request=request)
                continue
            except urllib3.exceptions.ReadTimeoutError as exc:
                raise requests.ReadTimeout(exc, request=request) from None
            except urllib3.exceptions.SSLError as exc:
                raise requests.exceptions.SSLError(exc, request=request) from None
            except (urllib3.exceptions.HTTPError, OSError) as exc:
                raise requests.ConnectionError(exc, request=request) from None
            return self.build_response(request, response)
        raise failure

    def _pool(self, target, address, verify, cert):
        key = (target.scheme, address, target.port, target.host, str(verify), str(cert))
        pool = self.pools.get(key)
        if pool is None:
            if target.scheme == "https":
                tls = {"cert_reqs": "CERT_REQUIRED",
                       "ca_certs": verify if isinstance(verify, str) else certifi.where(),
                       "assert_hostname": target.host} if verify else {"cert_reqs": "CERT_NONE",
                                                                       "assert_hostname": False}
                if cert:
                    tls.update(cert_file=cert[0], key_file=cert[1]) if isinstance(cert, tuple) \
                        else tls.update(cert_file=cert)
                pool = urllib3.HTTPSConnectionPool(bracketed(address), target.port, maxsize=1,
                                                   server_hostname=target.host, **tls)
            else:
                pool = urllib3.HTTPConnectionPool(bracketed(address), target.port, maxsize=1)
            self.pools[key] = pool
        return pool

    def close(self):
        for pool in self.pools.values():
            pool.close()
        self.pools.clear()
        super().close()


def async_transport(policy, **kwargs):
    """An httpx2 AsyncHTTPTransport (for clients such as MCP's) whose every TCP connection goes
    to addresses `policy.check_host` returned for the host the request names; TLS still verifies
    that name. No environment proxies."""
    import httpx2

    transport = httpx2.AsyncHTTPTransport(trust_env=False, **kwargs)
    # httpx2 offers no public hook for its connection pool's network backend; fail loudly if that changes.
    if not hasattr(transport._pool, "_network_backend"):
        raise RuntimeError("httpx2's connection pool changed: cannot pin its connections")
    transport._pool._network_backend = _checked_backend(policy)
    return transport


def _checked_backend(policy):
    import anyio
    import httpcore2

    class CheckedBackend(httpcore2.AsyncNetworkBackend):
        def __init__(self):
            self.inner = httpcore2.AnyIOBackend()

        async def connect_tcp(self, host, port, timeout=None, local_address=None, socket_options=None):
            # check_host resolves (blocking): not on the event loop
            addresses = await anyio.to_thread.run_sync(policy.check_host, host, port)
            failure = None
            for address in addresses:
                try:
                    return await self.inner.connect_tcp(address, port, timeout=timeout,
                                                        local_address=local_address,
                                                        socket_options=socket_options)
                except httpcore2.ConnectError as exc:
                    failure = exc  # another address of the host may answer
            raise failure

        async def connect_unix_socket(self, path, timeout=None, socket_options=None):
            raise EgressRefused("unix sockets are not an outbound destination")

        async def sleep(self, seconds):
            await self.inner.sleep(seconds)

    return CheckedBackend()
