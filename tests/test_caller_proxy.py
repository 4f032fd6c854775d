"""A caller's own proxy (`proxy` on submit and on kept-session create): the browser's traffic leaves through it,
behind our egress proxy, whose fences apply to each destination first; its credentials go to it only. Against real
Chromium, loopback pages, and loopback proxies that demand credentials and log what they forward
(tests/upstream_proxies.py)."""
import base64
import json
import os
import secrets
import socket
import ssl
import tempfile

import pytest
import requests
from cryptography.fernet import Fernet
from sqlalchemy import text

from app.egress.proxy import EgressProxy
from app.extensions import db
from app.sessions import browsers
from tests.browser_pages import Canary, RecordingServer
from tests.conftest import submit, wait_for_status, wait_until
from tests.grid import selenium_grid  # noqa: F401 (fixture)
from tests.processes import WorkerProcess, web_and_worker
from tests.upstream_proxies import BasicAuthProxy, Socks5Proxy, fetch_through

PAGE = "<html><head><title>through the proxy</title></head><body>hello via proxy</body></html>"


def _proxy(server, username="alice", password=None):
    return {"server": server, "username": username, "password": password}


BAD_PROXIES = [
    ({"server": "ftp://127.0.0.1:21"}, "scheme"),
    ({"server": "http://127.0.0.1"}, "port"),
    ({"server": "http://127.0.0.1:3128/path"}, "path"),
    ({"server": "http://alice:hunter2@127.0.0.1:3128"}, "credentials"),
    ({"server": "http://127.0.0.1:99999"}, "port"),
    ({"server": "127.0.0.1:3128"}, "http://host:port"),
    ({"server": "http://127.0.0.1:3128", "username": "a:b", "password": "x"}, "username"),
    ({"server": "http://127.0.0.1:3128", "password": "x"}, "username"),
    ({"username": "alice"}, "server"),
]


@pytest.mark.parametrize("proxy,said", BAD_PROXIES)
def test_a_malformed_proxy_is_a_400_naming_the_field(client, api_key, proxy, said):
    reply = submit(client, api_key, {"prompt": "/Operator\ngo to https://example.com", "executionMode": "cloud_browser",
                                     "proxy": proxy})
    assert reply.status_code == 400, (proxy, reply.get_json())
    body = reply.get_json()
    assert body["error"] and "proxy" in body["message"] and said in body["message"], body
    assert "hunter2" not in json.dumps(body)
    created = client.post("/fast/v2/cloud-browser/create-and-initialize-cloud-browser-session",
                          json={"proxy": proxy}, headers={"x-api-key": api_key})
    assert created.status_code == 400 and "proxy" in created.get_json()["message"], created.get_json()


@pytest.mark.parametrize("body,said", [
    ({"executionMode": "client", "browserWindowId": "w1"}, "'client'"),
    ({"executionMode": "cloud"}, "'cloud'"),
    ({"executionMode": "cloud_browser", "cloudBrowserSessionId": "cbs_x"}, "session"),
    ({"executionMode": "cloud_browser", "prompt": "answer hi"}, "general agent"),
])
def test_a_proxy_where_it_does_not_apply_is_a_400_naming_the_field(client, api_key, body, said):
    reply = submit(client, api_key, {"prompt": "/Operator\ngo to https://example.com", **body,
                                     "proxy": _proxy("http://203.0.113.9:3128", password="pw")})
    assert reply.status_code == 400, reply.get_json()
    assert "proxy" in reply.get_json()["message"] and said in reply.get_json()["message"], reply.get_json()


@pytest.mark.parametrize("server", ["http://127.0.0.1:3128", "socks5://10.1.2.3:1080", "https://localhost:3129",
                                    "http://[::1]:3128", "http://169.254.169.254:80"])
def test_a_proxy_on_a_private_address_is_refused_on_a_default_instance(app, client, api_key, monkeypatch, server):
    monkeypatch.setitem(app.config, "ALLOW_PRIVATE_URLS", False)
    reply = submit(client, api_key, {"prompt": "/Operator\ngo to https://example.com", "executionMode": "cloud_browser",
                                     "proxy": _proxy(server, password="pw")})
    assert reply.status_code == 400, (server, reply.get_json())
    assert "proxy" in reply.get_json()["message"] and "non-public" in reply.get_json()["message"], reply.get_json()
    created = client.post("/fast/v2/cloud-browser/create-and-initialize-cloud-browser-session",
                          json={"proxy": _proxy(server, password="pw")}, headers={"x-api-key": api_key})
    assert created.status_code == 400 and "non-public" in created.get_json()["message"], created.get_json()


# The egress proxy itself, without a browser: CONNECT tunnels and plain requests through either kind of proxy, and
# the proxy's own address checked at each connection (where a name resolves to a private address only later).

@pytest.fixture
def page():
    server = RecordingServer({"/ok": PAGE})
    yield server
    server.close()


def _egress(config):
    return EgressProxy({"VAR_DIR": tempfile.mkdtemp(prefix="rd-upstream-"),
                        "ENCRYPTION_KEY": Fernet.generate_key().decode(), **config}, "upstream-test")


@pytest.mark.parametrize("kind", ["http", "https", "socks5"])
def test_the_egress_proxy_goes_through_the_callers_proxy_with_its_credentials(page, kind, webhook_ca, monkeypatch):
    password = "pw-" + secrets.token_hex(8)
    if kind == "https":  # TLS to the proxy, its certificate verified against a CA the egress proxy trusts
        monkeypatch.setenv("SSL_CERT_FILE", webhook_ca[1])
        tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        webhook_ca[0].issue_cert("127.0.0.1").configure_cert(tls)
        caller = BasicAuthProxy("alice", password, tls=tls)
    else:
        caller = (BasicAuthProxy if kind == "http" else Socks5Proxy)("alice", password)
    try:
        with _egress({"ALLOW_PRIVATE_URLS": True}) as egress:
            egress.chain(_proxy(caller.server, password=password))
            assert password.encode() not in egress.upstream_file.read_bytes()  # encrypted on disk
            for tunnel in (False, True):
                assert "hello via proxy" in fetch_through(egress.port, page.url("/ok"), tunnel)
            forwarded = caller.forwarded()
            assert len(forwarded) == 2, caller.log
            if kind != "socks5":
                basic = "Basic " + base64.b64encode(f"alice:{password}".encode()).decode()
                assert [(e["method"], e["authorization"]) for e in forwarded] == [("GET", basic), ("CONNECT", basic)]
                assert all(e["target"].endswith(f"127.0.0.1:{page.port}") or f"127.0.0.1:{page.port}/" in e["target"]
                           for e in forwarded)
            else:
                assert [e["target"] for e in forwarded] == [f"127.0.0.1:{page.port}"] * 2
            # the server got the request without our credentials
            assert all("Proxy-Authorization" not in headers for _, headers in page.requests)
            wrong = "wrong-" + secrets.token_hex(8)
            egress.chain(_proxy(caller.server, password=wrong))
            for tunnel in (False, True):
                answer = fetch_through(egress.port, page.url("/ok"), tunnel)
                assert answer.startswith("HTTP/1.1 502") and "refused the credentials" in answer, answer
            assert [r["kind"] for r in egress.refusals()] == ["upstream", "upstream"]
            assert all("refused the credentials" in r["reason"] for r in egress.refusals())
            egress.chain(None)  # directly again
            assert "hello via proxy" in fetch_through(egress.port, page.url("/ok"), False)
            assert len(caller.forwarded()) == 2
            logs = "".join(p.read_text(errors="replace") for p in egress.directory.iterdir() if p.is_file()
                           and p.name != "upstream")
            assert password not in logs and wrong not in logs
    finally:
        caller.close()


def test_the_callers_proxy_is_checked_as_any_outbound_address_at_each_connection(page):
    caller = BasicAuthProxy("alice", "pw")
    try:
        # The page's address is allowed; the caller's proxy, on another private address:port, is not.
        with _egress({"ALLOW_PRIVATE_URLS": False, "EGRESS_ALLOW_HOSTS": f"127.0.0.1:{page.port}"}) as egress:
            assert "hello via proxy" in fetch_through(egress.port, page.url("/ok"), False)
            egress.chain(_proxy(caller.server, password="pw"))
            answer = fetch_through(egress.port, page.url("/ok"), True)
            assert answer.startswith("HTTP/1.1 502") and "refused by the egress policy" in answer, answer
            assert "non-public" in egress.refusals()[-1]["reason"] and egress.refusals()[-1]["kind"] == "upstream"
            assert caller.log == []
        # Where private addresses are allowed, the service's own endpoints (its database here) still are not a proxy.
        database = os.environ["DATABASE_URL"]
        with _egress({"ALLOW_PRIVATE_URLS": True, "DATABASE_URL": database}) as egress:
            egress.chain(_proxy("http://" + database.split("@")[1].split("/")[0], password="pw"))
            answer = fetch_through(egress.port, page.url("/ok"), True)
            assert answer.startswith("HTTP/1.1 502") and "this service's own endpoint" in answer, answer
    finally:
        caller.close()


def test_on_a_selenium_grid_the_nodes_browser_goes_through_the_callers_proxy_too(client, api_key, page,
                                                                                 selenium_grid):
    """With SELENIUM_REMOTE_URL the browser runs on the Grid's node but still leaves only through the worker's egress
    proxy, which chains the caller's proxy as for a local browser. (Before the module's own worker starts.)"""
    password = "pw-" + secrets.token_hex(8)
    caller = BasicAuthProxy("alice", password)
    worker = WorkerProcess(queues="tasks", concurrency=1, name="grid-proxy",
                           env={"SELENIUM_REMOTE_URL": str(selenium_grid)})
    try:
        request_id = submit(client, api_key, {"prompt": f"/Operator\ngo to {page.url('/ok')}",
                                              "executionMode": "cloud_browser",
                                              "proxy": _proxy(caller.server, password=password)}).get_json()["requestId"]
        body = wait_for_status(client, api_key, request_id, timeout=180)
        assert body["status"] == "success", body
        assert [e["target"] for e in caller.forwarded()][:1] == [page.url("/ok")], caller.log
        assert password not in worker.output() + selenium_grid.output()
    finally:
        worker.stop()
        caller.close()


# Real tasks: the web process, a worker, Chromium.

@pytest.fixture(scope="module")
def service(app):
    with web_and_worker("caller-proxy") as started:
        yield started


@pytest.fixture
def sites():
    canary = Canary()
    other = f"http://127.0.0.3:{canary.port}"
    server = RecordingServer({
        "/ok": PAGE,
        "/reach-out": f'<iframe src="{other}/frame"></iframe><img src="{other}/i.png">'
                      f"<script>fetch('{other}/fetch').finally(() => document.body.insertAdjacentHTML('beforeend', "
                      "'<p>all settled</p>'));</script>",
    })
    yield server, canary, other
    server.close()
    canary.close()


def _api(web, key, method, path, **kwargs):
    reply = requests.request(method, f"{web.base}/fast/v2{path}", headers={"x-api-key": key}, timeout=120, **kwargs)
    assert reply.status_code < 300, reply.text
    return reply


def _run(web, key, body):
    request_id = _api(web, key, "POST", "/remote-dispatch", json=body).json()["requestId"]
    return request_id, wait_until(lambda: (lambda b: b if b["completedAt"] else None)(
        _api(web, key, "GET", f"/remote-dispatch/responses/{request_id}").json()), "the task", timeout=120)


def _no_secret_anywhere(app, web, worker, request_id, password):
    """Neither the poll answer (trace included), the logs, nor the task's row in plain text holds the password."""
    for where in (web.output(), worker.output()):
        assert password not in where
    with app.app_context():
        row = db.session.execute(text("SELECT row_to_json(t)::text FROM tasks t WHERE id = :id"),
                                 {"id": request_id}).scalar_one()
        db.session.rollback()
    assert password not in row and json.loads(row)["proxy_sealed"], row[:200]


def test_a_task_goes_through_the_callers_proxy_and_the_fence_holds(app, service, api_key, sites):
    web, worker = service
    server, canary, other = sites
    password = "pw-" + secrets.token_hex(8)
    caller = BasicAuthProxy("alice", password)
    try:
        prompt = "\n".join(["/Operator", f"go to {server.url('/ok')}", f"go to {server.url('/reach-out')}",
                            'wait for "all settled"'])
        request_id, body = _run(web, api_key, {"prompt": prompt, "executionMode": "cloud_browser",
                                               "allowedDomains": [f"127.0.0.1:{server.port}"],
                                               "proxy": _proxy(caller.server, password=password)})
        assert body["status"] == "success", body
        basic = "Basic " + base64.b64encode(f"alice:{password}".encode()).decode()
        pages = [e for e in caller.forwarded() if e["target"] == server.url("/ok")]
        assert pages and all(e["authorization"] == basic for e in pages), caller.log
        # The second host is outside allowedDomains: refused by our egress proxy, never sent to the caller's.
        assert not [e for e in caller.log if f"127.0.0.3:{canary.port}" in e["target"]], caller.log
        assert canary.connections == []
        refused = " ".join(r for entry in body["response"]["actionTrace"] for r in entry.get("refused", []))
        assert f"127.0.0.3:{canary.port}" in refused, refused
        assert password not in json.dumps(body)
        _no_secret_anywhere(app, web, worker, request_id, password)
    finally:
        caller.close()


@pytest.mark.parametrize("failure", ["wrong credentials", "unreachable"])
def test_a_proxy_that_refuses_the_credentials_or_cannot_be_reached_ends_the_task_error(app, service, api_key, sites,
                                                                                       failure):
    web, worker = service
    server, _, _ = sites
    caller = BasicAuthProxy("alice", "right")
    closed = socket.socket()  # bound, never listening: nothing else takes its port meanwhile
    closed.bind(("127.0.0.1", 0))
    try:
        if failure == "unreachable":
            proxy = _proxy(f"http://127.0.0.1:{closed.getsockname()[1]}", password="right")
            said = "cannot be reached"
        else:
            proxy, said = _proxy(caller.server, password="wrong-" + secrets.token_hex(4)), "refused the credentials"
        request_id, body = _run(web, api_key, {"prompt": f"/Operator\ngo to {server.url('/ok')}",
                                               "executionMode": "cloud_browser", "proxy": proxy})
        assert body["status"] == "error", body
        assert said in body["response"]["text"] and "proxy" in body["response"]["text"], body["response"]["text"]
        assert not [path for path, _ in server.requests if path == "/ok"]
        _no_secret_anywhere(app, web, worker, request_id, proxy["password"])
    finally:
        caller.close()
        closed.close()


def test_a_kept_session_goes_through_its_proxy_for_its_life(service, api_key, sites):
    web, worker = service
    server, _, _ = sites
    password = "pw-" + secrets.token_hex(8)
    caller = Socks5Proxy("bob", password)
    session = _api(web, api_key, "POST", "/cloud-browser/create-and-initialize-cloud-browser-session",
                   json={"proxy": _proxy(caller.server, username="bob", password=password)}).json()
    try:
        for _ in range(2):
            _, body = _run(web, api_key, {"prompt": f"/Operator\ngo to {server.url('/ok')}",
                                          "cloudBrowserSessionId": session["session_id"]})
            assert body["status"] == "success", body
        assert len([e for e in caller.forwarded() if e["target"] == f"127.0.0.1:{server.port}"]) >= 2, caller.log
        assert password not in web.output() + worker.output()
        egress = browsers.egress_dir({"VAR_DIR": os.environ["VAR_DIR"]}, session["session_id"])
        assert (egress / "upstream").exists()  # the settings, encrypted, beside the proxy's logs
        assert not [p for p in egress.iterdir() if p.is_file() and password.encode() in p.read_bytes()]
    finally:
        _api(web, api_key, "POST", "/cloud-browser/stop-cloud-browser-session",
             json={"session_id": session["session_id"]})
        caller.close()
