"""A page cannot make the browser reach loopback or private addresses: the egress proxy refuses, the canary hears nothing."""
import json
import os
import shutil
import tempfile
from pathlib import Path

import pytest
from selenium import webdriver
from selenium.common.exceptions import WebDriverException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.support.ui import WebDriverWait

from app.sandbox.box import browser_owned, unprivileged_chromedriver
from tests.browser_pages import Canary, RecordingServer, UdpCanary, group_pids
from tests.conftest import WorkerProcess, submit, wait_for_status, wait_until
from tests.grid import selenium_grid  # noqa: F401 (fixture)
from workers.browser.base import NavigationRefused
from workers.browser.egress import BrowserEgressProxy, check_typed_url, harden_chrome_options, our_proxies, reap_orphans

# What a page tries, each finished (succeeded or failed) before the page sets `window.settled`.
SCRIPTS = """<html><body><script>
window.results = {};
const tries = {
  fetch: () => fetch("%(canary)s/fetch").then(r => r.text()),
  fetchLocalhost: () => fetch("%(localhost)s/fetch"),
  fetchV6: () => fetch("%(v6)s/fetch"),
  fetchProxyItself: () => fetch("http://%(proxy)s/"),
  xhr: () => new Promise((ok, ko) => { const x = new XMLHttpRequest(); x.open("GET", "%(other)s/xhr");
                                       x.onload = ok; x.onerror = ko; x.send(); }),
  websocket: () => new Promise((ok, ko) => { const w = new WebSocket("%(ws)s/ws"); w.onopen = ok; w.onerror = ko; }),
  image: () => new Promise((ok, ko) => { const i = new Image(); i.onload = ok; i.onerror = ko; i.src = "%(canary)s/i.png"; }),
  allowed: () => fetch("/ok").then(r => r.text()),
  webrtc: () => new Promise((ok) => {
    const pc = new RTCPeerConnection({iceServers: [{urls: "stun:127.0.0.1:%(udp)s"},
                                                   {urls: "turn:127.0.0.1:%(udp)s?transport=udp", username: "u", credential: "p"}]});
    pc.createDataChannel("x");
    pc.createOffer().then(offer => pc.setLocalDescription(offer));
    setTimeout(() => { pc.close(); ok("tried"); }, 3000);
  }),
};
Promise.all(Object.entries(tries).map(([name, go]) => go().then(
    value => { window.results[name] = "reached" + (typeof value === "string" ? ":" + value : ""); },
    error => { window.results[name] = "failed"; })))
  .then(() => { window.settled = true; document.body.insertAdjacentHTML("beforeend", "<p>all settled</p>"); });
</script></body></html>"""


@pytest.fixture
def servers():
    canary = Canary()
    udp = UdpCanary()
    urls = {"canary": f"http://127.0.0.3:{canary.port}", "other": f"http://127.0.0.1:{canary.port}",
            "localhost": f"http://localhost:{canary.port}", "v6": f"http://[::1]:{canary.port}",
            "ws": f"ws://127.0.0.1:{canary.port}", "udp": udp.port}
    pages = {
        "/ok": "<html><head><title>allowed page</title></head><body>fine</body></html>",
        "/redirect": (302, {"Location": urls["canary"] + "/redirected"}, ""),
        "/iframes": "".join(f'<iframe src="{urls[k]}/frame"></iframe>' for k in ("canary", "other", "localhost", "v6"))
                    + '<a id="file" href="file:///etc/hostname">file</a>',
        "/navigate": f'<script>location.href = "{urls["other"]}/navigated";</script>',
    }
    page = RecordingServer(pages)
    page.udp = udp
    yield page, canary, urls
    page.close()
    canary.close()
    udp.close()


@pytest.fixture
def session(tmp_path):
    """Start Chromium (Debian's) behind an BrowserEgressProxy with the given settings, as the browser driver does."""
    proxies, drivers, profiles = [], [], []

    def start(settings, remote=None):
        proxy = BrowserEgressProxy({"VAR_DIR": str(tmp_path), **settings})
        proxies.append(proxy)  # stopped at teardown even if what follows fails
        proxy.start().wait_ready()
        downloads = tmp_path / "downloads"
        downloads.mkdir(exist_ok=True)
        options = webdriver.ChromeOptions()
        options.binary_location = "/usr/bin/chromium"
        profile = browser_owned(tempfile.mkdtemp(prefix="rd-egress-test-"))
        profiles.append(profile)
        # A Grid node runs Chromium as rd-browser (tests/grid.py), with its sandbox and a profile of its own.
        arguments = ("--headless=new", "--disable-dev-shm-usage") if remote else (
            "--headless=new", "--disable-dev-shm-usage", f"--user-data-dir={profile}")
        for argument in arguments:
            options.add_argument(argument)
        harden_chrome_options(options, proxy, downloads)
        if remote:
            options.set_capability("se:name", "egress-test")
            driver = webdriver.Remote(remote, options=options)
        else:
            driver = webdriver.Chrome(options=options, service=Service(unprivileged_chromedriver()))
        drivers.append(driver)
        driver.set_page_load_timeout(20)
        return driver, proxy

    yield start
    try:
        for driver in drivers:
            driver.quit()
    finally:
        for proxy in proxies:
            proxy.stop()
        for profile in profiles:
            shutil.rmtree(profile, ignore_errors=True)


def run_everything(driver, page, urls):
    """Every way a page (or a typed URL) reaches out, against the canary."""
    def visit(url):
        try:
            driver.get(url)
        except WebDriverException:  # a refused navigation may surface as an error page or a driver error
            pass

    visit(page.url("/ok"))
    assert driver.title == "allowed page"
    visit(page.url("/redirect"))
    visit(page.url("/iframes"))
    try:
        driver.find_element("id", "file").click()
    except WebDriverException:
        pass
    assert not driver.current_url.startswith("file:")
    visit(page.url("/navigate"))
    page.pages["/scripts"] = SCRIPTS % {**urls, "proxy": f"127.0.0.1:{page.proxy_port}"}
    visit(page.url("/scripts"))
    WebDriverWait(driver, 30).until(lambda d: d.execute_script("return window.settled === true"))
    results = driver.execute_script("return window.results")
    for typed in (urls["canary"] + "/typed", urls["localhost"] + "/typed", urls["v6"] + "/typed"):
        visit(typed)
    return results


def test_a_page_reaches_nothing_but_the_allowed_server(servers, session):
    page, canary, urls = servers
    driver, proxy = session({"EGRESS_ALLOW_HOSTS": f"127.0.0.1:{page.port}"})
    page.proxy_port = proxy.port

    results = run_everything(driver, page, urls)

    assert canary.connections == []
    assert page.udp.datagrams == 0  # WebRTC's STUN/TURN goes nowhere: no proxied UDP exists
    assert results["allowed"] == "reached:<html><head><title>allowed page</title></head><body>fine</body></html>"
    for name in ("fetch", "fetchLocalhost", "fetchV6", "fetchProxyItself", "xhr", "websocket", "image"):
        assert results[name] == "failed", name
    # The allowed pages came through the proxy (loopback included), not around it, and the allowed server was
    # asked only for its own pages (a reused proxy connection must not carry another host's request to it).
    # Each request's connection is held by the proxy's processes (a proof that needs no header the proxy adds).
    proxy_pids = group_pids(proxy.proc.pid)
    assert page.peer_pids and all(pids and pids <= proxy_pids for pids in page.peer_pids), (page.peer_pids, proxy_pids)
    assert {headers["Host"] for _, headers in page.requests} == {f"127.0.0.1:{page.port}"}
    refused = {(r["host"], r["port"]) for r in proxy.refusals()}
    for host in ("127.0.0.3", "127.0.0.1", "localhost", "::1"):
        assert (host, canary.port) in refused, (host, refused)
    assert ("127.0.0.1", proxy.port) in refused
    reasons = " ".join(r["reason"] for r in proxy.refusals())
    assert "non-public address" in reasons
    assert {r["method"] for r in proxy.refusals()} >= {"GET", "CONNECT"}  # a WebSocket asks for a tunnel


def test_a_grid_session_reaches_nothing_but_the_allowed_server(servers, session, selenium_grid):
    """The same pages in a Chromium that a Selenium Grid node started: still behind the task's proxy."""
    page, canary, urls = servers
    driver, proxy = session({"EGRESS_ALLOW_HOSTS": f"127.0.0.1:{page.port}"}, remote=str(selenium_grid))
    page.proxy_port = proxy.port
    assert driver.capabilities.get("se:name") == "egress-test"

    results = run_everything(driver, page, urls)

    assert canary.connections == [] and page.udp.datagrams == 0
    assert results["allowed"].startswith("reached:")
    assert {results[name] for name in results if name not in ("allowed", "webrtc")} == {"failed"}
    refused = {(r["host"], r["port"]) for r in proxy.refusals()}
    assert {(host, canary.port) for host in ("127.0.0.3", "127.0.0.1", "localhost", "::1")} <= refused


def test_the_same_pages_reach_the_canary_when_private_urls_are_allowed(servers, session):
    """The control: the pages above really do reach out, so zero connections above means refused."""
    page, canary, urls = servers
    driver, proxy = session({"ALLOW_PRIVATE_URLS": True})
    page.proxy_port = proxy.port

    results = run_everything(driver, page, urls)

    assert {host for host, _ in canary.connections} >= {"127.0.0.1", "127.0.0.3"}
    assert results["fetch"] == "failed" or results["fetch"].startswith("reached")
    assert results["xhr"] == "failed" or results["xhr"] == "reached"  # CORS may hide the answer, not the request
    assert any(first.startswith(b"GET /ws") for _, first in canary.connections)
    assert [r for r in proxy.refusals() if r["port"] == canary.port] == []


def test_webrtc_sends_no_udp_once_hardened(servers, session, tmp_path):
    """Chromium as it comes sends STUN/TURN datagrams to the canary; with our flags it sends none."""
    page, canary, urls = servers
    page.pages["/rtc"] = SCRIPTS % {**urls, "proxy": "127.0.0.1:9"}
    for hardened, expect_udp in ((False, True), (True, False)):
        before = page.udp.datagrams
        options = webdriver.ChromeOptions()
        options.binary_location = "/usr/bin/chromium"
        for argument in ("--headless=new", f"--user-data-dir={browser_owned(tempfile.mkdtemp(prefix='rd-rtc-'))}"):
            options.add_argument(argument)
        if hardened:
            driver, proxy = session({"ALLOW_PRIVATE_URLS": True})
        else:
            driver = webdriver.Chrome(options=options, service=Service(unprivileged_chromedriver()))
        try:
            driver.get(page.url("/rtc"))
            WebDriverWait(driver, 30).until(lambda d: d.execute_script("return window.settled === true"))
        finally:
            if not hardened:
                driver.quit()
        assert (page.udp.datagrams > before) is expect_udp, (hardened, page.udp.datagrams)


def test_typed_urls_other_than_http_are_refused_before_the_browser():
    for url in ("file:///etc/passwd", "chrome://settings", "view-source:http://example.com/",
                "devtools://devtools/bundled/inspector.html", "chrome-extension://abc/page.html",
                "javascript:alert(1)", "ftp://example.com/", "example.com", "blob:http://example.com/x"):
        with pytest.raises(NavigationRefused, match="navigation refused"):
            check_typed_url(url)
    assert check_typed_url("https://example.com/a") == "https://example.com/a"
    assert check_typed_url("about:blank") == "about:blank"
    assert check_typed_url("data:text/html,<h1>hi</h1>") == "data:text/html,<h1>hi</h1>"


def test_the_proxy_ends_with_its_session_and_orphans_are_reaped(tmp_path):
    proxy = BrowserEgressProxy({"VAR_DIR": str(tmp_path)}).start().wait_ready()
    group = proxy.proc.pid
    assert _group_members(group)
    proxy.stop()
    assert _group_members(group) == []

    # A proxy whose worker is gone (its directory names a dead pid) is reaped; one of a live worker is not.
    live = BrowserEgressProxy({"VAR_DIR": str(tmp_path)}).start().wait_ready()
    orphan = BrowserEgressProxy({"VAR_DIR": str(tmp_path)})
    orphan.directory = orphan.directory.with_name(f"{_dead_pid()}-{orphan.directory.name.split('-')[1]}")
    orphan.port_file = orphan.directory / "port"
    orphan.start().wait_ready()
    try:
        reaped = reap_orphans({"VAR_DIR": str(tmp_path)})
        assert orphan.proc.pid in reaped
        orphan.proc.wait(10)
        assert _group_members(orphan.proc.pid) == []
        assert _group_members(live.proc.pid)
    finally:
        live.stop()
        orphan.stop()


def _group_members(pgid):
    members = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = open(f"/proc/{entry}/stat").read()
            except OSError:
                continue
            fields = stat.rsplit(")", 1)[1].split()
            if int(fields[2]) == pgid and fields[0] != "Z":
                members.append(int(entry))
    return members


def _dead_pid():
    import subprocess

    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def test_refusal_records_are_json_lines(tmp_path):
    proxy = BrowserEgressProxy({"VAR_DIR": str(tmp_path)})
    proxy.directory.mkdir(parents=True)
    proxy.refusal_log.write_text(json.dumps({"host": "10.0.0.1", "port": 80, "method": "GET", "reason": "x"}) + "\n")
    assert proxy.new_refusals() == [{"host": "10.0.0.1", "port": 80, "method": "GET", "reason": "x"}]
    assert proxy.new_refusals() == []



def test_a_reused_proxy_connection_cannot_carry_a_request_for_another_host(servers, tmp_path):
    """Keep-alive to the proxy: a second request on the same connection, for a refused host, goes nowhere."""
    import socket

    page, canary, urls = servers
    proxy = BrowserEgressProxy({"VAR_DIR": str(tmp_path), "EGRESS_ALLOW_HOSTS": f"127.0.0.1:{page.port}"})
    with proxy, socket.create_connection(("127.0.0.1", proxy.port), timeout=10) as conn:
        conn.sendall(f"GET {page.url('/ok')} HTTP/1.1\r\nHost: 127.0.0.1:{page.port}\r\n"
                     f"Proxy-Connection: keep-alive\r\n\r\n".encode())
        first = _read_response(conn)
        assert b"allowed page" in first
        try:
            conn.sendall(f"GET {urls['other']}/second HTTP/1.1\r\nHost: 127.0.0.1:{canary.port}\r\n\r\n".encode())
            second = _read_response(conn)
        except OSError:
            second = b""
    assert not second.startswith(b"HTTP/1.1 200")
    assert canary.connections == []
    assert [path for path, _ in page.requests] == ["/ok"]


def _read_response(conn):
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(4096)
        if not chunk:
            return data
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                   if line.lower().startswith(b"content-length:")), 0)
    while len(body) < length:
        chunk = conn.recv(4096)
        if not chunk:
            break
        body += chunk
    return head + b"\r\n\r\n" + body


def test_cloud_browser_tasks_reach_nothing_but_the_allowed_server_and_say_what_was_refused(
        client, api_key, servers):
    """Real tasks on a worker whose policy admits only the page server: every way out, as steps."""
    page, canary, urls = servers
    page.pages["/scripts"] = SCRIPTS % {**urls, "proxy": "127.0.0.1:9"}
    worker = WorkerProcess(queues="tasks", concurrency=2, name="egress", env={
        "ALLOW_PRIVATE_URLS": "false", "EGRESS_ALLOW_HOSTS": f"127.0.0.1:{page.port}"})
    try:
        def run(*steps):
            prompt = "\n".join(["/Operator", *steps])
            request_id = submit(client, api_key, {"executionMode": "cloud_browser", "prompt": prompt}
                                ).get_json()["requestId"]
            return request_id

        runs = {
            "page": run(f"go to {page.url('/iframes')}", f"go to {page.url('/scripts')}", 'wait for "all settled"',
                        f"go to {page.url('/navigate')}"),
            "typed": run(f"go to {urls['canary']}/typed"),
            "redirect": run(f"go to {page.url('/redirect')}"),
            "localhost": run(f"go to {urls['localhost']}/typed"),
            "v6": run(f"go to {urls['v6']}/typed"),
            "file": run("go to file:///etc/hostname"),
        }
        bodies = {name: wait_for_status(client, api_key, rid, timeout=120) for name, rid in runs.items()}
    finally:
        worker.stop()

    assert canary.connections == [] and page.udp.datagrams == 0
    assert no_proxy_left()
    for name, body in bodies.items():
        assert body["status"] == "error", (name, body)
    trace = bodies["page"]["response"]["actionTrace"]
    refused = lambda entry: " ".join(entry.get("refused", []))  # noqa: E731
    iframes, scripts, _, navigate = trace[:4]
    assert iframes["url"] == page.url("/iframes")
    for where in (f"127.0.0.3:{canary.port}", f"127.0.0.1:{canary.port}", f"localhost:{canary.port}",
                  f"[::1]:{canary.port}"):
        assert where in refused(iframes), (where, iframes)
    assert "non-public address" in refused(iframes)
    assert f"CONNECT 127.0.0.1:{canary.port}" in refused(scripts) + refused(trace[2])  # the WebSocket
    assert f"GET 127.0.0.3:{canary.port}" in refused(scripts) + refused(trace[2])  # fetch, image
    assert f"127.0.0.1:{canary.port}" in refused(navigate) + refused(trace[2])  # the script's navigation
    assert "Navigation refused by the egress policy" in bodies["page"]["response"]["text"]
    assert bodies["page"]["response"]["actionTrace"][3]["failed"] is True
    assert f"GET 127.0.0.3:{canary.port}" in refused(bodies["typed"]["response"]["actionTrace"][0])
    assert f"127.0.0.3:{canary.port}" in refused(bodies["redirect"]["response"]["actionTrace"][0])
    assert f"localhost:{canary.port}" in refused(bodies["localhost"]["response"]["actionTrace"][0])
    assert f"[::1]:{canary.port}" in refused(bodies["v6"]["response"]["actionTrace"][0])
    assert "navigation refused: file scheme is not allowed" in bodies["file"]["response"]["text"]


def test_the_cloud_browser_scenario_on_a_selenium_grid(client, api_key, other_key, selenium_grid):
    """issue 10's sign-in / new tab / select / table scenario with SELENIUM_REMOTE_URL set: the sessions are
    the Grid's (named by cloudBrowserSessionName), still behind the task's egress proxy."""
    from tests import test_cloud_browser as scenario

    pages = PageServerForScenario()
    worker = WorkerProcess(queues="tasks", concurrency=1, name="grid", env={
        "SELENIUM_REMOTE_URL": selenium_grid, "GIF_WIDTH": str(scenario.GIF_WIDTH)})
    try:
        request_id = submit(client, api_key, {
            "executionMode": "cloud_browser", "prompt": scenario.builtin_steps(pages),
            "secretVariables": {"PASSWORD": scenario.SECRET}, "generateGif": True,
            "cloudBrowserSessionName": "grid-sales-check",
            "responseFormat": {"type": "jsonSchema", "jsonSchema": {"type": "integer", "minimum": 0}},
        }).get_json()["requestId"]
        body = wait_for_status(client, api_key, request_id, timeout=180)
    finally:
        worker.stop()
        pages.close()
    assert body["status"] == "success", body
    assert body["response"]["structuredOutput"] == 42
    trace = body["response"]["actionTrace"][:-1]
    actions = len(scenario.builtin_steps(pages).splitlines()) - 1  # less the /Operator line
    assert len(trace) == body["usage"]["actions"] == actions
    assert trace[-1]["url"] == pages.url("/report")  # the new tab was followed on the Grid too
    assert {entry["browserSession"] for entry in trace} == {"grid-sales-check"}
    assert any(path.startswith("/home?username=ada&password=") for path in pages.requests)
    scenario.assert_secret_nowhere(request_id, body, worker.output(), selenium_grid.output())
    scenario.assert_gif(client, api_key, other_key, request_id, body, actions=actions)
    # The session was the Grid's, under the task's name, and no local browser was started.
    assert "grid-sales-check" in selenium_grid.output()
    assert "browser session grid-sales-check started" in worker.output()
    assert not scenario.ours()


def PageServerForScenario():
    from tests import test_cloud_browser as scenario
    from tests.page_server import PageServer

    return PageServer({"/login": scenario.LOGIN, "/home": scenario.HOME, "/report": scenario.REPORT})


def no_proxy_left():
    wait_until(lambda: not our_proxies(os.environ), what="every egress proxy of the suite to end", timeout=15)
    return True


def test_the_egress_proxy_of_a_sigkilled_worker_is_reaped_when_a_worker_starts(client, api_key, servers):
    page, _, _ = servers
    doomed = WorkerProcess(queues="tasks", concurrency=1, name="egress-doomed")
    submit(client, api_key, {"executionMode": "cloud_browser",
                             "prompt": f"/Operator\ngo to {page.url('/ok')}\nwait 30"})
    try:
        try:
            wait_until(lambda: len(our_proxies(os.environ)) >= 2, what="the proxy and its acceptor", timeout=60)
        finally:
            doomed.kill()
        orphans = our_proxies(os.environ)
        assert orphans  # nothing stopped them: the worker died
        rescuer = WorkerProcess(queues="webhooks", concurrency=1, name="egress-rescuer")  # takes no task
        try:
            assert no_proxy_left()
            owners = tuple(f"{owner}-" for owner in orphans.values())
            assert not any(d.name.startswith(owners) for d in (Path(os.environ["VAR_DIR"]) / "browser-egress").iterdir())
        finally:
            rescuer.stop()
    finally:  # whatever failed above, leave no process of the dead worker behind
        from workers.browser.reaper import reap

        reap(os.environ["VAR_DIR"])
        reap_orphans(os.environ)


def test_a_download_lands_in_the_tasks_own_directory_and_becomes_a_file_of_the_key(client, api_key, servers):
    page, _, _ = servers
    page.pages["/download"] = '<a href="/report.csv">Get the report</a> <a href="/../../escape.csv" download="../../escape.csv">Escape</a>'
    page.pages["/report.csv"] = (200, {"Content-Type": "text/csv",
                                       "Content-Disposition": 'attachment; filename="report.csv"'}, "a,b\n1,2\n")
    page.pages["/escape.csv"] = (200, {"Content-Type": "text/csv",
                                       "Content-Disposition": 'attachment; filename="../../escape.csv"'}, "x\n")
    worker = WorkerProcess(queues="tasks", concurrency=1, name="downloads")
    try:
        request_id = submit(client, api_key, {"executionMode": "cloud_browser", "prompt": "\n".join([
            "/Operator", f"go to {page.url('/download')}", 'click "Get the report"', 'click "Escape"', "wait 3",
            "answer done"])}).get_json()["requestId"]
        body = wait_for_status(client, api_key, request_id, timeout=90)
    finally:
        worker.stop()
    assert body["status"] == "success", body
    # Both downloads landed in the task's own folder (a name with ../ too: Chromium and the service sanitise it),
    # were kept as files of the key from there, and the folder is gone.
    files = {item["filename"]: item["key"] for item in body["response"]["files"]}
    assert len(files) == 2 and "report.csv" in files and all("/" not in name for name in files), files
    report = client.get(f"/fast/v2/files/{files['report.csv']}", headers={"x-api-key": api_key})
    assert report.data == b"a,b\n1,2\n"
    downloads = Path(os.environ["VAR_DIR"]) / "downloads"
    assert not (downloads / "remote-dispatch" / request_id).exists()
    assert not list(Path(os.environ["VAR_DIR"]).rglob("escape*")) and not list(Path.home().glob("Downloads/escape*"))


def test_names_that_do_not_resolve_are_refused_but_not_reported_as_policy_refusals(tmp_path):
    import requests

    with BrowserEgressProxy({"VAR_DIR": str(tmp_path)}) as proxy:
        proxies = {"http": f"http://{proxy.address}"}
        assert requests.get("http://no-such-host.invalid/", proxies=proxies, timeout=10).status_code == 403
        assert requests.get("http://10.1.2.3:8080/", proxies=proxies, timeout=10).status_code == 403
        assert [(r["host"], r["kind"]) for r in proxy.refusals()] == [("no-such-host.invalid", "unresolved"),
                                                                       ("10.1.2.3", "policy")]
        assert [r["host"] for r in proxy.new_refusals()] == ["10.1.2.3"]
