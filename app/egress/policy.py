"""The one outbound HTTP path: a URL parsed once, checked, resolved once, pinned to the checked address.

This module checks; app/egress/client.py connects (a requests session and an httpx2 transport pinned to the
checked addresses). The web process only checks, so it never imports an HTTP client library."""
import ipaddress
import re
import socket
from dataclasses import dataclass, replace

import idna

from . import endpoints

DEFAULT_PORTS = {"http": 80, "https": 443}
MAX_URL_CHARS = 8192
MAX_REDIRECTS = 10
# scheme://authority path ?query #fragment — the authority ends at the first / ? or #, as in every
# HTTP client; backslashes are refused before this runs, so WHATWG's "\ is /" cannot disagree with it.
_URL = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*)://([^/?#]*)([^?#]*)(\?[^#]*)?(#.*)?", re.S)
_NAME = re.compile(r"[a-z0-9_-]+(?:\.[a-z0-9_-]+)*\.?")
# A last label that a browser or inet_aton would read as a number makes the whole host an IPv4 address.
_NUMERIC = re.compile(r"(?:0x[0-9a-f]*|[0-9]+)")
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
# Cloud metadata endpoints are link-local or private already; listed for clarity of intent.
METADATA_HOSTS = {"metadata.google.internal", "metadata", "instance-data"}


class UnsafeUrl(ValueError):
    """The URL is malformed, or it resolves to an address a caller must not reach through us."""


class EgressRefused(UnsafeUrl):
    """Message says what was refused and why, without secrets."""


class ServiceEndpoint(EgressRefused):
    """The address and port are the service's own (a dependency, or a port its processes listen on)."""


class OutsideFence(EgressRefused):
    """The host is not one EGRESS_ONLY_HOSTS or the task's allowedDomains name."""


class Unresolvable(EgressRefused):
    """The host name has no address (now, from here)."""


@dataclass(frozen=True)
class Target:
    url: str  # normalised URL
    scheme: str
    host: str  # lowercase name or canonical IP (IPv6 without brackets)
    port: int
    addresses: tuple  # checked addresses; connect only to these
    path: str = "/"  # path and query, as sent in the request line

    @property
    def host_header(self):
        host = bracketed(self.host)
        return host if self.port == DEFAULT_PORTS.get(self.scheme) else f"{host}:{self.port}"


@dataclass(frozen=True)
class Policy:
    allow_private: bool = False  # ALLOW_PRIVATE_URLS (dev/tests): everything allowed
    allow_hosts: frozenset = frozenset()  # EGRESS_ALLOW_HOSTS: "host:port" or "host", allowed even if private
    public_addresses: frozenset = frozenset()  # EGRESS_TREAT_AS_PUBLIC (TEST ONLY): addresses taken as public
    # Fences: host patterns (HostPattern) a host must match, whatever else allows it. Each non-empty one applies.
    only_hosts: tuple = ()  # EGRESS_ONLY_HOSTS, instance-wide
    task_hosts: tuple = ()  # a task's allowedDomains (narrowed)
    # (host, port, whole) of the service's dependencies (app/egress/endpoints.py): never reached, whatever allows it.
    service: tuple = ()

    @classmethod
    def from_config(cls, config):
        """A Flask config or dict: ALLOW_PRIVATE_URLS, EGRESS_ALLOW_HOSTS, EGRESS_TREAT_AS_PUBLIC,
        EGRESS_ONLY_HOSTS, and the dependencies' URLs (or SERVICE_ENDPOINTS, [host, port, whole] triples, as the
        browser egress proxy gets them: without credentials)."""
        configured = config.get("SERVICE_ENDPOINTS")
        return cls(service=(tuple((str(h), int(p), bool(w)) for h, p, w in configured) if configured is not None
                            else endpoints.dependencies(config)),
                   allow_private=bool(config.get("ALLOW_PRIVATE_URLS")),
                   allow_hosts=frozenset(_allow_entry(e) for e in _entries(config.get("EGRESS_ALLOW_HOSTS"))),
                   public_addresses=frozenset(str(ipaddress.ip_address(e))
                                              for e in _entries(config.get("EGRESS_TREAT_AS_PUBLIC"))),
                   only_hosts=tuple(host_pattern(e) for e in _entries(config.get("EGRESS_ONLY_HOSTS"))))

    def narrowed(self, patterns):
        """This policy fenced to a task's allowedDomains (host patterns); none: unchanged."""
        if not patterns:
            return self
        return replace(self, task_hosts=tuple(host_pattern(p) for p in patterns))

    def check_url(self, url, schemes=("http", "https")):
        """Parse `url` once (refusing forms parsers disagree on), resolve its host once, check every
        address; the returned Target is what to connect to. Raises EgressRefused."""
        scheme, host, port, path = _parse_url(url, schemes)
        addresses = self._check(host, port)
        return Target(_compose(scheme, host, port, path), scheme, host, port, tuple(addresses), path)

    def check_host(self, host, port):
        """For proxies (CONNECT host:port): the checked addresses to connect to. Raises EgressRefused."""
        if not isinstance(port, int) or not 0 < port < 65536:
            raise EgressRefused(f"invalid port {port!r}")
        host = str(host)
        if ":" in host and not host.startswith("["):
            host = f"[{host}]"
        _refuse_ambiguous_characters(host)
        return self._check(_parse_host(host), port)

    def _check(self, host, port):
        for fence, name in ((self.only_hosts, "EGRESS_ONLY_HOSTS"), (self.task_hosts, "the task's allowedDomains")):
            if fence and not any(pattern.matches(host, port) for pattern in fence):
                raise OutsideFence(f"host {bracketed(host)}:{port} is not in {name}")
        if self.allow_private or (host, port) in self.allow_hosts or (host, None) in self.allow_hosts:
            addresses = _resolve(host, port)
        else:
            if host.rstrip(".") in METADATA_HOSTS:
                raise EgressRefused(f"host {host!r} is a cloud metadata endpoint")
            addresses = _resolve(host, port)
            for address in addresses:
                if address not in self.public_addresses and not _is_public(ipaddress.ip_address(address)):
                    raise EgressRefused(f"host {host!r} resolves to a non-public address ({address}); in development, "
                                        "ALLOW_PRIVATE_URLS=true or EGRESS_ALLOW_HOSTS=host:port allows it")
        for address in addresses:  # whatever allowed it: the service's own endpoints are never a destination
            why = endpoints.refusal(address, port, self.service)
            if why:
                raise ServiceEndpoint(f"{bracketed(host)}:{port} is this service's own endpoint ({why}): no page, "
                                      "task, MCP server or webhook may reach it, whatever ALLOW_PRIVATE_URLS or "
                                      "EGRESS_ALLOW_HOSTS say")
        return addresses


@dataclass(frozen=True)
class HostPattern:
    """`example.com` (that host), `*.example.com` (it and its subdomains), either with `:port` (that port only)."""
    host: str
    port: int = None
    subdomains: bool = False

    def matches(self, host, port):
        host = host.rstrip(".")
        return ((host == self.host or (self.subdomains and host.endswith("." + self.host)))
                and self.port in (None, port))


def host_pattern(text):
    """A HostPattern from `host`, `*.host`, `host:port`, `[v6]:port`; EgressRefused says what is wrong."""
    if not isinstance(text, str) or not text.strip():
        raise EgressRefused("a host pattern must be a non-empty string")
    text = text.strip()
    if "://" in text or any(c in text for c in "/?#@"):
        raise EgressRefused(f"{text[:100]!r} is not a host pattern (a host such as example.com or "
                            "*.example.com, optionally with :port; no scheme or path)")
    _refuse_ambiguous_characters(text)
    subdomains = text.startswith("*.")
    if subdomains:
        text = text[2:]
    if "*" in text:
        raise EgressRefused("a host pattern may only start with '*.' (no other wildcard)")
    port_text = (text.rpartition("]:")[2] if "]:" in text else "") if text.startswith("[") else (
        text.partition(":")[2] if text.count(":") == 1 else "")
    if port_text and not (port_text.isascii() and port_text.isdigit() and 0 < int(port_text) < 65536):
        raise EgressRefused(f"{text[:100]!r} has an invalid port")
    host, port = _allow_entry(text)
    host = host.rstrip(".")
    if subdomains and (not re.search("[a-z]", host.rsplit(".", 1)[-1]) or ":" in host):
        raise EgressRefused("'*.' goes before a domain name, not an address")
    if not host:
        raise EgressRefused("a host pattern needs a host")
    return HostPattern(host, port, subdomains)


def check_navigation(config, url):
    """A URL a browser window is sent to (client-mode tasks, the SDK's go_to_url): http(s) only, and
    under config's policy (no private or metadata address unless allowed). Raises EgressRefused."""
    return Policy.from_config(config).check_url(url)


def normalise(url, schemes=("http", "https")):
    """The normalised URL, or EgressRefused for a form parsers could disagree on; no DNS lookup
    (the syntax check at submit time, when private URLs are allowed)."""
    return _compose(*_parse_url(url, schemes))


def _compose(scheme, host, port, path):
    return f"{scheme}://{bracketed(host)}" + ("" if port == DEFAULT_PORTS[scheme] else f":{port}") + path


def _entries(value):
    if not value:
        return ()
    if isinstance(value, str):
        value = value.split(",")
    return tuple(e.strip() for e in value if e and e.strip())


def _allow_entry(entry):
    """"host", "host:port", "[v6]:port" or a bare IPv6 address → (normalised host, port or None)."""
    if entry.startswith("["):
        host, _, port = entry[1:].partition("]")
        host, port = f"[{host}]", port.removeprefix(":")
    elif entry.count(":") == 1:
        host, port = entry.split(":")
    elif entry.count(":") > 1:
        host, port = f"[{entry}]", ""
    else:
        host, port = entry, ""
    return (_parse_host(host), int(port) if port else None)


def _refuse_ambiguous_characters(text):
    if "\\" in text:
        raise EgressRefused("URL contains a backslash (parsers disagree on what it means)")
    if any(ord(c) < 0x21 or ord(c) == 0x7f for c in text):
        raise EgressRefused("URL contains a control character or whitespace")


def _parse_url(url, schemes):
    if not isinstance(url, str):
        raise EgressRefused("URL must be a string")
    url = url.strip(" \t\r\n\f\v")
    if len(url) > MAX_URL_CHARS:
        raise EgressRefused(f"URL is longer than {MAX_URL_CHARS} characters")
    _refuse_ambiguous_characters(url)
    match = _URL.fullmatch(url)
    if not match:
        raise EgressRefused(f"not an absolute URL (scheme must be {' or '.join(schemes)})")
    scheme, authority, path, query = match[1].lower(), match[2], match[3], match[4] or ""
    if scheme not in schemes or scheme not in DEFAULT_PORTS:
        raise EgressRefused(f"URL scheme must be {' or '.join(schemes)}, not {scheme!r}")
    if "@" in authority:
        raise EgressRefused("URL must not carry user information (user:password@)")
    if authority.startswith("["):
        end = authority.find("]")
        if end < 0:
            raise EgressRefused("URL has an invalid IPv6 address")
        host_text, rest = authority[:end + 1], authority[end + 1:]
        if rest and not rest.startswith(":"):
            raise EgressRefused("URL has an invalid port")
        port_text = rest[1:] if rest else ""
    elif authority.count(":") > 1:
        raise EgressRefused("URL has an invalid host (an IPv6 address needs [brackets])")
    else:
        host_text, _, port_text = authority.partition(":")
    port = DEFAULT_PORTS[scheme]
    if port_text:  # "host:" means the default port, as browsers read it
        if not port_text.isascii() or not port_text.isdigit() or not 0 < int(port_text) < 65536:
            raise EgressRefused("URL has an invalid port")
        port = int(port_text)
    if not host_text:
        raise EgressRefused("URL has no host")
    return scheme, _parse_host(host_text), port, (path or "/") + query


def _parse_host(text):
    """The canonical host: a lowercase ASCII name or an IP address in its one canonical form."""
    if text.startswith("[") or text.endswith("]"):
        if not (text.startswith("[") and text.endswith("]")) or "%" in text:
            raise EgressRefused("URL has an invalid IPv6 address")
        try:
            ip = ipaddress.IPv6Address(text[1:-1])
        except ValueError:
            raise EgressRefused("URL has an invalid IPv6 address") from None
        if ip.ipv4_mapped or (int(ip) >> 32 == 0 and int(ip) > 1):
            raise EgressRefused(f"IPv6 address {ip} embeds an IPv4 address; use the IPv4 form")
        return str(ip)
    if "%" in text:
        raise EgressRefused("URL host must not be percent-encoded")
    if not text.isascii():
        try:
            text = idna.encode(text, uts46=True).decode("ascii")
        except (idna.IDNAError, UnicodeError):
            raise EgressRefused("URL has an invalid international host name") from None
    host = text.lower()
    if not _NAME.fullmatch(host):
        raise EgressRefused("URL has an invalid host name")
    if _NUMERIC.fullmatch(host.rstrip(".").rsplit(".", 1)[-1]):
        try:
            return str(ipaddress.IPv4Address(host))
        except ValueError:
            raise EgressRefused("URL host is a non-canonical IPv4 address (use a.b.c.d)") from None
    return host


def _resolve(host, port):
    try:
        return [str(ipaddress.ip_address(host))]
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError, OSError) as exc:
        reason = getattr(exc, "strerror", None) or exc
        raise Unresolvable(f"cannot resolve host {host!r}: {reason}") from None
    addresses = list(dict.fromkeys(str(ipaddress.ip_address(info[4][0].split("%")[0])) for info in infos))
    if not addresses:
        raise Unresolvable(f"cannot resolve host {host!r}")
    return addresses


def _is_public(ip):
    if ip.version == 6:
        if ip.ipv4_mapped:
            return _is_public(ip.ipv4_mapped)
        if int(ip) >> 32 == 0 or ip.teredo:  # ::, ::1, IPv4-compatible ::a.b.c.d; Teredo tunnels
            return False
        if ip.sixtofour:
            return _is_public(ip.sixtofour)
        if ip in _NAT64:
            return _is_public(ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF))
    return ip.is_global and not ip.is_multicast


def bracketed(host):
    return f"[{host}]" if ":" in host else host
