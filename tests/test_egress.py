"""The one outbound path: bypass forms never reach a loopback canary; a "public" stand-in on 127.0.0.2 stays reachable.

ALLOW_PRIVATE_URLS is true for the suite (tests/conftest.py); every test here builds its own Policy
without it. The "public host" is a server on 127.0.0.2 that EGRESS_TREAT_AS_PUBLIC marks as public, so
no test ever sends traffic off loopback.
"""
import socket
import ssl
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

import pytest
import requests
import trustme

from app.egress import client as egress_http
from app.egress.policy import EgressRefused, Policy, UnsafeUrl


class RecordingServer:
    """Answers every request with 200 (or a redirect for /redirect?to=...) and records it."""

    def __init__(self, host="127.0.0.1", tls_context=None):
        self.requests = []  # (method, path, Host header)
        self._server = ThreadingHTTPServer((host, 0), self._handler())
        if tls_context:
            self._server.socket = tls_context.wrap_socket(self._server.socket, server_side=True)
        self.host, self.port = host, self._server.server_address[1]
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def url(self, path="/", host=None):
        scheme = "https" if isinstance(self._server.socket, ssl.SSLSocket) else "http"
        return f"{scheme}://{host or self.host}:{self.port}{path}"

    def close(self):
        self._server.shutdown()
        self._server.server_close()

    def _handler(self):
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _answer(self):
                server.requests.append((self.command, self.path, self.headers.get("Host")))
                parts = urlsplit(self.path)
                if parts.path == "/redirect":
                    self.send_response(302)
                    self.send_header("Location", parse_qs(parts.query)["to"][0])
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                length = int(self.headers.get("Content-Length") or 0)
                received = self.rfile.read(length) if length else b""
                data = b"<html><title>canary</title><body>reached " + self.path.encode() + b" " + received + b"</body></html>"
                self.send_response(200)
                self.send_header("Content-Type", "text/html; charset=utf-8")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_PUT = do_HEAD = _answer

        return Handler


@pytest.fixture
def canary():
    server = RecordingServer("127.0.0.1")
    yield server
    server.close()


@pytest.fixture
def public():
    server = RecordingServer("127.0.0.2")
    yield server
    server.close()


@pytest.fixture
def policy():
    return Policy(public_addresses=frozenset({"127.0.0.2"}))


def bypass_forms(c, p):
    """Every way we know to write "the loopback canary" so that some parser reads a public host."""
    public = f"127.0.0.2:{p}"
    return [
        # backslash: WHATWG reads it as '/', urlsplit as part of the authority (the issue's attack)
        f"http://127.0.0.1:{c}\\@{public}/../healthz",
        f"http://{public}\\@127.0.0.1:{c}/",
        f"http://127.0.0.1:{c}\\{public}/",
        # userinfo, fragment and query tricks
        f"http://{public}@127.0.0.1:{c}/",
        f"http://user:pass@127.0.0.1:{c}/",
        f"http://127.0.0.1:{c}#@{public}/",
        f"http://127.0.0.1:{c}?@{public}/",
        f"http://127.0.0.1:{c}/#@{public}/",
        # short, octal, hex, integer and encoded IPv4 forms
        f"http://127.1:{c}/",
        f"http://0177.0.0.1:{c}/",
        f"http://0x7f.0.0.1:{c}/",
        f"http://0x7f000001:{c}/",
        f"http://2130706433:{c}/",
        f"http://127.0.1:{c}/",
        f"http://%31%32%37.0.0.1:{c}/",
        f"http://127.0.0.1%00.{public}/",
        f"http://１２７.０.０.１:{c}/",  # full-width digits, mapped by IDNA
        f"http://0.0.0.0:{c}/",
        f"http://0:{c}/",
        # IPv4-mapped, IPv4-compatible and other IPv6 spellings of loopback
        f"http://[::ffff:127.0.0.1]:{c}/",
        f"http://[::ffff:7f00:1]:{c}/",
        f"http://[0:0:0:0:0:ffff:127.0.0.1]:{c}/",
        f"http://[::127.0.0.1]:{c}/",
        f"http://[::7f00:1]:{c}/",
        f"http://[::1]:{c}/",
        f"http://[64:ff9b::127.0.0.1]:{c}/",
        # names that resolve to loopback
        f"http://localhost:{c}/",
        f"http://LocalHost.:{c}/",
        f"http://localhost.localdomain:{c}/",
        # control characters and whitespace the client would strip or split on
        f"http://127.0.0.1:{c}\t@{public}/",
        f"http://{public}\n@127.0.0.1:{c}/",
        f"http://127.0.0.1:{c} @{public}/",
        # redirects from the public host to the canary, in the same forms
        f"http://{public}/redirect?to=http://127.0.0.1:{c}/",
        f"http://{public}/redirect?to=http://localhost:{c}/",
        f"http://{public}/redirect?to=http://[::ffff:127.0.0.1]:{c}/",
        f"http://{public}/redirect?to=http://127.1:{c}/",
        f"http://{public}/redirect?to=//127.0.0.1:{c}/",
        f"http://{public}/redirect?to=http://127.0.0.1:{c}%5C@{public}/",
    ]


def test_bypass_forms_never_reach_the_canary(canary, public, policy):
    refused = []
    for url in bypass_forms(canary.port, public.port):
        with pytest.raises(EgressRefused) as caught:
            egress_http.fetch(policy, "GET", url, timeout=5)
        refused.append((url, str(caught.value)))
    assert canary.requests == [], refused
    # The redirect forms did reach the public host: the refusal came from re-checking the Location.
    assert sum(path.startswith("/redirect") for _, path, _ in public.requests) == 6


def test_the_issues_exact_attack_is_refused_as_a_backslash(canary, public, policy):
    url = f"http://127.0.0.1:{canary.port}\\@127.0.0.2:{public.port}/../healthz"
    with pytest.raises(EgressRefused, match="backslash"):
        policy.check_url(url)
    assert canary.requests == [] and public.requests == []


def test_the_public_stand_in_is_reachable(public, policy):
    response = egress_http.fetch(policy, "GET", public.url("/page?q=1"), timeout=5)
    assert response.status_code == 200 and b"reached /page?q=1" in response.content
    assert public.requests == [("GET", "/page?q=1", f"127.0.0.2:{public.port}")]


def test_redirects_between_public_addresses_are_followed(public, policy):
    response = egress_http.fetch(policy, "GET", public.url(f"/redirect?to={public.url('/next')}"), timeout=5)
    assert response.status_code == 200 and response.url == public.url("/next")


def test_the_canary_answers_when_private_urls_are_allowed(canary):
    """The control: the canary is a working server, so zero requests above means refused."""
    response = egress_http.fetch(Policy(allow_private=True), "GET", canary.url("/x"), timeout=5)
    assert b"reached /x" in response.content and len(canary.requests) == 1


def test_allow_hosts_admits_only_the_listed_port(canary):
    other = RecordingServer("127.0.0.1")
    try:
        policy = Policy.from_config({"EGRESS_ALLOW_HOSTS": f"127.0.0.1:{canary.port}"})
        assert egress_http.fetch(policy, "GET", canary.url("/ok"), timeout=5).status_code == 200
        with pytest.raises(EgressRefused, match="non-public"):
            egress_http.fetch(policy, "GET", other.url("/no"), timeout=5)
        assert other.requests == []
    finally:
        other.close()


def test_policy_from_config_reads_the_settings():
    policy = Policy.from_config({"ALLOW_PRIVATE_URLS": False, "EGRESS_ALLOW_HOSTS": ("Pages.Local:8080", "[::1]"),
                                 "EGRESS_TREAT_AS_PUBLIC": "127.0.0.2, 127.0.0.3"})
    assert policy == Policy(False, frozenset({("pages.local", 8080), ("::1", None)}),
                            frozenset({"127.0.0.2", "127.0.0.3"}))


def test_refusals_are_unsafe_url_errors(policy):
    with pytest.raises(UnsafeUrl):
        policy.check_url("http://127.0.0.1/")


@pytest.mark.parametrize("url, reason", [
    ("http://[::1", "invalid IPv6"),
    ("http://[fe80::1%25eth0]/", "invalid IPv6"),
    ("http://a:b:c/", "needs [brackets]"),
    ("http://127.0.0.2:99999/", "invalid port"),
    ("http://127.0.0.2:8o/", "invalid port"),
    ("javascript:alert(1)", "not an absolute URL"),
    ("ftp://127.0.0.2/", "scheme must be http or https"),
    ("http:///path", "no host"),
    ("http://exa mple.com/", "whitespace"),
    ("http://ex\x00ample.com/", "control character"),
    ("http://-*-/", "invalid host name"),
    ("http://metadata.google.internal/", "metadata"),
    ("http://169.254.169.254/latest/meta-data", "non-public address (169.254.169.254)"),
    ("http://10.0.0.1/", "non-public address"),
    ("http://[2002:7f00:1::]/", "non-public"),  # 6to4 of 127.0.0.1
    ("http://no-such-host.invalid/", "cannot resolve"),
])
def test_refusal_reasons(policy, url, reason):
    with pytest.raises(EgressRefused) as caught:
        policy.check_url(url)
    assert reason in str(caught.value)


@pytest.mark.parametrize("url, normalised", [
    ("HTTP://127.0.0.2:80/a?b=c#frag", "http://127.0.0.2/a?b=c"),
    ("http://127.0.0.2:/", "http://127.0.0.2/"),
    ("https://127.0.0.2:8443", "https://127.0.0.2:8443/"),
    ("  http://127.0.0.2/x  ", "http://127.0.0.2/x"),
])
def test_urls_are_normalised(policy, url, normalised):
    assert policy.check_url(url).url == normalised


def test_check_host_for_proxies(policy):
    assert policy.check_host("127.0.0.2", 443) == ["127.0.0.2"]
    for host in ("127.0.0.1", "localhost", "::1", "[::ffff:127.0.0.1]", "127.1", "0x7f.1"):
        with pytest.raises(EgressRefused):
            policy.check_host(host, 443)
    with pytest.raises(EgressRefused, match="port"):
        policy.check_host("127.0.0.2", 0)


class RebindingDns:
    """A resolver for one made-up name: public (127.0.0.2) on its first answer, loopback after —
    DNS rebinding, simulated in-process because tests cannot add DNS records."""

    def __init__(self, monkeypatch, name):
        self.name, self.answers, real = name, [], socket.getaddrinfo

        def getaddrinfo(host, port, *args, **kwargs):
            if host != name:
                return real(host, port, *args, **kwargs)
            address = "127.0.0.2" if not self.answers else "127.0.0.1"
            self.answers.append(address)
            return real(address, port, *args, **kwargs)

        monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)


def test_the_connection_goes_to_the_checked_address(monkeypatch, canary, public, policy):
    dns = RebindingDns(monkeypatch, "rebind.test")
    response = egress_http.fetch(policy, "GET", f"http://rebind.test:{public.port}/pinned", timeout=5)
    assert response.status_code == 200
    assert dns.answers == ["127.0.0.2"]  # resolved once
    assert public.requests == [("GET", "/pinned", f"rebind.test:{public.port}")]  # Host stays the name


def test_a_rebound_name_is_refused_on_the_next_request(monkeypatch, canary, public, policy):
    dns = RebindingDns(monkeypatch, "rebind.test")
    with egress_http.EgressSession(policy) as session:
        assert session.get(f"http://rebind.test:{public.port}/one", timeout=5).status_code == 200
        with pytest.raises(EgressRefused, match="non-public"):
            session.get(f"http://rebind.test:{canary.port}/two", timeout=5)
    assert dns.answers == ["127.0.0.2", "127.0.0.1"] and canary.requests == []


@pytest.fixture
def tls_public():
    ca = trustme.CA()
    cert = ca.issue_cert("rebind.test")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    cert.configure_cert(context)
    seen = []
    context.sni_callback = lambda sock, name, ctx: seen.append(name)
    server = RecordingServer("127.0.0.2", tls_context=context)
    with ca.cert_pem.tempfile() as ca_file:
        yield server, ca_file, seen
    server.close()


def test_https_pins_the_address_and_verifies_the_name(monkeypatch, tls_public, policy):
    server, ca_file, sni = tls_public
    RebindingDns(monkeypatch, "rebind.test")
    response = egress_http.fetch(policy, "POST", f"https://rebind.test:{server.port}/hook", data=b"body",
                            timeout=5, verify=ca_file)
    assert response.status_code == 200 and b"reached /hook body" in response.content
    assert sni == ["rebind.test"]
    assert server.requests == [("POST", "/hook", f"rebind.test:{server.port}")]


def test_https_refuses_a_certificate_for_another_name(tls_public, policy):
    server, ca_file, _ = tls_public
    with pytest.raises(requests.exceptions.SSLError):
        egress_http.fetch(policy, "GET", server.url("/"), timeout=5, verify=ca_file)  # the cert names rebind.test
    assert server.requests == []


def test_max_bytes_truncates_the_body(public, policy):
    response = egress_http.fetch(policy, "GET", public.url("/" + "x" * 100), timeout=5, max_bytes=19)
    assert response.content == b"<html><title>canary" and response.truncated


def test_unreachable_addresses_raise_connection_errors(policy):
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.2", 0))
        port = sock.getsockname()[1]
    with pytest.raises(requests.ConnectionError, match="cannot connect to 127.0.0.2"):
        egress_http.fetch(policy, "GET", f"http://127.0.0.2:{port}/", timeout=5)


# A real task in cloud mode, on a worker that runs without ALLOW_PRIVATE_URLS.

@pytest.fixture(scope="module")
def strict_worker(app):
    from tests.processes import WorkerProcess

    proc = WorkerProcess(name="egress", env={"ALLOW_PRIVATE_URLS": "false", "EGRESS_TREAT_AS_PUBLIC": "127.0.0.2"})
    yield proc
    proc.stop()


def test_the_issues_attack_in_a_real_task_is_refused(client, api_key, strict_worker, canary, public):
    from tests.agent_support import run

    attack = f"http://127.0.0.1:{canary.port}\\@127.0.0.2:{public.port}/../healthz"
    _, body = run(client, api_key, {"prompt": f"/Operator go to {attack}"})
    assert body["status"] == "error", body
    assert body["response"]["text"].startswith("Refused to open the page: URL contains a backslash"), body
    trace = body["response"]["actionTrace"]
    assert any("Refused to open the page" in str(step) for step in trace), trace
    assert canary.requests == [] and public.requests == []


def test_a_real_task_reads_the_public_stand_in_and_not_a_redirect_to_loopback(
        client, api_key, strict_worker, canary, public):
    from tests.agent_support import run

    _, body = run(client, api_key, {"prompt": f"/Operator go to {public.url('/page')}\nextract title"})
    assert body["status"] == "success" and body["response"]["text"] == "canary", body
    _, body = run(client, api_key, {"prompt": f"/Operator go to {public.url('/redirect?to=' + canary.url('/'))}"})
    assert body["status"] == "error" and "non-public address (127.0.0.1)" in body["response"]["text"], body
    assert canary.requests == []


@pytest.mark.parametrize("url, message", [
    ("http://[::1", "invalid IPv6 address"),
    ("data:text/html,<h1>x</h1>\ngo to http://[::1", "not a valid URL"),  # joined to the open page's URL
    ("data:text/html;base64,@@@@", "base64 content is invalid"),
    ("data:text/html", "no ','"),
])
def test_bad_urls_are_page_errors_not_internal_errors(client, api_key, strict_worker, url, message):
    from tests.agent_support import run

    _, body = run(client, api_key, {"prompt": f"/Operator go to {url}"})
    assert body["status"] == "error" and message in body["response"]["text"], body["response"]
    assert "internal error" not in body["response"]["text"].lower() and "Traceback" not in str(body)


# The httpx2 transport MCP clients use: every connection checked and pinned.

def _async_get(policy, url):
    import asyncio

    import httpx2

    async def get():
        async with httpx2.AsyncClient(transport=egress_http.async_transport(policy), trust_env=False) as client:
            return await client.get(url, timeout=5)

    return asyncio.run(get())


def test_the_async_transport_pins_the_checked_address(monkeypatch, canary, public, policy):
    dns = RebindingDns(monkeypatch, "rebind.test")
    response = _async_get(policy, f"http://rebind.test:{public.port}/mcp")
    assert response.status_code == 200 and dns.answers == ["127.0.0.2"]
    assert public.requests == [("GET", "/mcp", f"rebind.test:{public.port}")]
    for url in (f"http://rebind.test:{canary.port}/", canary.url("/"), f"http://localhost:{canary.port}/"):
        with pytest.raises(EgressRefused):
            _async_get(policy, url)
    assert canary.requests == []


# Submit-time checks use the same parser, also when private URLs are allowed (as in this suite).

@pytest.mark.parametrize("field, url, reason", [
    ("callbackUrl", "https://127.0.0.1:9\\@127.0.0.2/hook", "backslash"),
    ("callbackUrl", "https://[::ffff:127.0.0.1]/hook", "embeds an IPv4 address"),
    ("callbackUrl", "https://0x7f.1/hook", "non-canonical IPv4"),
    ("callbackUrl", "https://[::1/hook", "must be an https:// URL"),
    ("mcpServers", "http://127.0.0.1:9\\@127.0.0.2/mcp", "must not carry credentials"),  # urlsplit sees a user
    ("mcpServers", "http://127.1/mcp", "non-canonical IPv4"),
])
def test_submit_refuses_ambiguous_outbound_urls(client, api_key, field, url, reason):
    from tests.conftest import submit

    value = [{"url": url, "authentication": {"type": "none"}}] if field == "mcpServers" else url
    response = submit(client, api_key, {"prompt": "answer hi", "executionMode": "cloud", field: value})
    assert response.status_code == 400, response.get_json()
    assert response.get_json()["error"] == "Invalid Request" and reason in response.get_json()["message"]


def test_submit_checks_addresses_with_the_egress_settings(app, client, api_key, monkeypatch):
    from tests.conftest import submit

    monkeypatch.setitem(app.config, "ALLOW_PRIVATE_URLS", False)
    monkeypatch.setitem(app.config, "EGRESS_TREAT_AS_PUBLIC", ("127.0.0.2",))
    ok = submit(client, api_key, {"prompt": "answer hi", "executionMode": "cloud",
                                  "callbackUrl": "https://127.0.0.2:8443/hook"})
    assert ok.status_code == 202, ok.get_json()
    refused = submit(client, api_key, {"prompt": "answer hi", "executionMode": "cloud",
                                       "callbackUrl": "https://localhost:8443/hook"})
    assert refused.status_code == 400 and "non-public address" in refused.get_json()["message"]
