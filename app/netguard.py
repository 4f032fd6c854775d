"""The outbound-URL guard: callbacks, MCP servers and page fetches may only reach public hosts."""
import ipaddress
import socket
from urllib.parse import urlsplit

# Cloud metadata endpoints are link-local or private already; listed for clarity of intent.
METADATA_HOSTS = {"metadata.google.internal", "metadata", "instance-data"}


class UnsafeUrl(ValueError):
    """The URL is malformed, or it resolves to an address a caller must not reach through us."""


def check_url(url, *, allow_private=False, schemes=("http", "https")):
    """Resolve `url`'s host and return its addresses; raise UnsafeUrl unless all are public.

    Call it at the moment of use (not only when the URL is accepted): a name can resolve
    differently later (DNS rebinding).
    """
    parts = urlsplit(url)
    if parts.scheme not in schemes:
        raise UnsafeUrl(f"URL scheme must be {' or '.join(schemes)}: {url!r}")
    host = parts.hostname
    if not host:
        raise UnsafeUrl(f"URL has no host: {url!r}")
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        raise UnsafeUrl(f"URL has an invalid port: {url!r}") from None
    try:
        infos = socket.getaddrinfo(host, port, proto=socket.IPPROTO_TCP)
    except (socket.gaierror, UnicodeError) as exc:
        raise UnsafeUrl(f"cannot resolve host {host!r}: {exc}") from None
    addresses = sorted({info[4][0].split("%")[0] for info in infos})
    if allow_private:
        return addresses
    if host.lower().rstrip(".") in METADATA_HOSTS:
        raise UnsafeUrl(f"host {host!r} is a cloud metadata endpoint")
    for address in addresses:
        ip = ipaddress.ip_address(address)
        if getattr(ip, "ipv4_mapped", None):
            ip = ip.ipv4_mapped
        if not ip.is_global or ip.is_multicast:
            raise UnsafeUrl(f"host {host!r} resolves to a non-public address ({address})")
    return addresses
