"""allowedDomains and EGRESS_ONLY_HOSTS: a fenced task reaches no host outside its list (other loopback hosts, other
ports, other names; redirects, a page's own requests, typed URLs) in a fresh cloud browser, in a kept session and
when pages are read over HTTP; the canary hears nothing. A pattern that is not a host pattern is a 400."""
import time

import pytest
import requests

from app.egress.policy import EgressRefused, OutsideFence, Policy, host_pattern
from tests.browser_pages import Canary, RecordingServer
from tests.conftest import submit, wait_until
from tests.processes import web_and_worker
from workers.agent import pages as page_reader

BAD_PATTERNS = ["https://example.com", "example.com/path", "*", "*.", "exa*mple.com", "*.127.0.0.1", "example.com:0",
                "example.com:http", "example.com:70000", "ex ample.com", "user@example.com", "127.1", ""]


@pytest.mark.parametrize("pattern", BAD_PATTERNS)
def test_a_pattern_that_is_not_a_host_pattern_is_a_400(client, api_key, pattern):
    reply = submit(client, api_key, {"prompt": "answer hi", "executionMode": "cloud", "allowedDomains": [pattern]})
    assert reply.status_code == 400, (pattern, reply.get_json())
    assert reply.get_json()["error"] and "allowedDomains" in reply.get_json()["message"]


def test_host_patterns_and_an_empty_list(client, api_key):
    good = submit(client, api_key, {"prompt": "answer hi", "executionMode": "cloud",
                                    "allowedDomains": ["example.com", "*.Example.org", "127.0.0.1:8123", "[::1]:80"]})
    assert good.status_code == 202, good.get_json()
    for body in ({"allowedDomains": []}, {"allowedDomains": "example.com"}):
        reply = submit(client, api_key, {"prompt": "answer hi", "executionMode": "cloud", **body})
        assert reply.status_code == 400, (body, reply.get_json())


def test_patterns_match_their_host_its_subdomains_and_their_port():
    exact, sub, port = host_pattern("example.com"), host_pattern("*.example.com"), host_pattern("example.com:8443")
    assert exact.matches("example.com", 443) and not exact.matches("www.example.com", 443)
    assert sub.matches("example.com", 80) and sub.matches("a.b.example.com.", 80)
    assert not sub.matches("badexample.com", 80) and not exact.matches("example.com.evil.test", 80)
    assert port.matches("example.com", 8443) and not port.matches("example.com", 443)
    policy = Policy(allow_private=True).narrowed(["127.0.0.1:8123"])
    assert policy.check_host("127.0.0.1", 8123) == ["127.0.0.1"]
    for host, other_port in (("127.0.0.1", 8124), ("127.0.0.2", 8123), ("localhost", 8123), ("::1", 8123)):
        with pytest.raises(OutsideFence):
            policy.check_host(host, other_port)


def test_egress_only_hosts_fences_the_whole_instance_even_where_private_urls_are_allowed():
    policy = Policy.from_config({"ALLOW_PRIVATE_URLS": True, "EGRESS_ONLY_HOSTS": "127.0.0.1, *.internal.test"})
    assert policy.check_url("http://127.0.0.1:9/x").host == "127.0.0.1"
    with pytest.raises(OutsideFence, match="EGRESS_ONLY_HOSTS"):
        policy.check_url("http://localhost:9/x")
    # a task narrows it further; it never widens it
    with pytest.raises(OutsideFence, match="EGRESS_ONLY_HOSTS"):
        policy.narrowed(["localhost"]).check_url("http://localhost:9/x")
    with pytest.raises(EgressRefused):
        Policy.from_config({"EGRESS_ONLY_HOSTS": "https://example.com"})


@pytest.fixture
def sites():
    canary = Canary()
    others = {"other port": f"http://127.0.0.1:{canary.port}", "other host": f"http://127.0.0.3:{canary.port}",
              "other name": f"http://localhost:{canary.port}"}
    page = RecordingServer({
        "/ok": "<html><head><title>fenced page</title></head><body>inside</body></html>",
        "/redirect": (302, {"Location": others["other host"] + "/redirected"}, ""),
        "/reach-out": "".join(f'<iframe src="{url}/frame"></iframe><img src="{url}/i.png">' for url in others.values())
                      + "<script>fetch('%s/fetch').finally(() => document.body.insertAdjacentHTML('beforeend', "
                        "'<p>all settled</p>'));</script>" % others["other port"],
    })
    yield page, canary, others
    page.close()
    canary.close()


def test_pages_read_over_http_follow_no_redirect_out_of_the_fence(sites):
    page, canary, _ = sites
    fenced = Policy(allow_private=True).narrowed([f"127.0.0.1:{page.port}"])
    assert "inside" in page_reader.fetch(page.url("/ok"), policy=fenced, timeout=5).text()
    with pytest.raises(page_reader.PageError, match="not in the task's allowedDomains"):
        page_reader.fetch(page.url("/redirect"), policy=fenced, timeout=5)
    assert canary.connections == []
    page_reader.fetch(page.url("/redirect"), policy=Policy(allow_private=True), timeout=5)  # unfenced: it goes
    assert canary.connections


@pytest.fixture(scope="module")
def service(app):
    with web_and_worker("fence") as (web, _):
        yield web


def _api(service, key, method, path, **kwargs):
    reply = requests.request(method, f"{service.base}/fast/v2{path}", headers={"x-api-key": key}, timeout=120,
                             **kwargs)
    assert reply.status_code < 300, reply.text
    return reply.json()


def _run(service, key, body):
    request_id = _api(service, key, "POST", "/remote-dispatch", json=body)["requestId"]
    return wait_until(lambda: (lambda b: b if b["completedAt"] else None)(
        _api(service, key, "GET", f"/remote-dispatch/responses/{request_id}")), "the task", timeout=120)


def _refused(body):
    return " ".join(r for entry in body["response"]["actionTrace"] for r in entry.get("refused", []))


def test_a_fenced_browser_reaches_no_other_host_fresh_or_in_a_kept_session(service, api_key, sites):
    page, canary, others = sites
    fence = [f"127.0.0.1:{page.port}"]
    steps = ["/Operator", f"go to {page.url('/ok')}", f"go to {page.url('/reach-out')}", 'wait for "all settled"',
             f"go to {others['other name']}/typed", f"go to {page.url('/redirect')}"]
    redirect = ["/Operator", f"go to {page.url('/redirect')}"]
    fresh = [_run(service, api_key, {"prompt": "\n".join(prompt), "executionMode": "cloud_browser",
                                     "allowedDomains": fence}) for prompt in (steps, redirect)]
    session = _api(service, api_key, "POST", "/cloud-browser/create-and-initialize-cloud-browser-session",
                   json={"require_extension": False})
    try:
        kept = [_run(service, api_key, {"prompt": "\n".join(prompt), "cloudBrowserSessionId": session["session_id"],
                                        "allowedDomains": fence}) for prompt in (steps, redirect)]
        time.sleep(1)  # a request a page makes late (Chromium's favicon fetch) counts too
        assert canary.connections == []
        for body, redirected in (fresh, kept):
            # the typed URL is refused (the task ends there), and every request of the page was refused on its way
            assert body["status"] == "error", body
            assert "not in the task's allowedDomains" in body["response"]["text"], body["response"]["text"]
            for url in others.values():
                assert url.split("//")[1] in _refused(body), (url, _refused(body))
            assert redirected["status"] == "error" and f"127.0.0.3:{canary.port}" in _refused(redirected)
        # The fence is the task's: the session's next task, without one, follows the same redirect.
        _run(service, api_key, {"prompt": "\n".join(redirect), "cloudBrowserSessionId": session["session_id"]})
        assert {host for host, _ in canary.connections} == {"127.0.0.3"}
    finally:
        _api(service, api_key, "POST", "/cloud-browser/stop-cloud-browser-session",
             json={"session_id": session["session_id"]})
