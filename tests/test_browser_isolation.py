"""Browser isolation (README "Browser isolation"): our browsers run unprivileged, sandboxed, see none of the
server's files and have no network but their egress proxy, whatever is asked of them over WebDriver or raw
CDP; a SIGKILLed worker's browsers are gone within beat's sweep. Real Chromium, a loopback canary server and a
canary file under VAR_DIR, on a strict instance (private addresses refused; only the page server allowed)."""
import itertools
import json
import os
import tempfile

import pytest

from app.sandbox import processes as sandbox_processes
from app.sessions import browsers
from config import settings
from tests.conftest import submit, wait_until
from tests.devtools import devtools_websocket
from tests.page_server import PageServer
from tests.processes import WorkerProcess
from workers.browser.egress import BrowserEgressProxy, our_proxies
from workers.browser.launch import browsers_dir
from workers.browser.selenium_driver import SeleniumBrowser
from workers.sweeps import reap_browsers

pytestmark = pytest.mark.slow

SECRET = "canary-secret-7f3a9"
PAGES = {"/home": "<html><head><title>Home</title></head><body><h1>Home</h1></body></html>",
         "/download": "<html><body><a id='get' href='/home' download='notes.html'>Get</a></body></html>",
         "/slow": "<html><head><title>Slow</title></head><body><p>Nothing comes.</p></body></html>"}


@pytest.fixture(scope="module")
def site():
    pages, canary = PageServer(PAGES), PageServer({"/": "canary"})
    var_dir = os.environ["VAR_DIR"]
    canary_file = os.path.join(var_dir, "canary")
    with open(canary_file, "w") as out:
        out.write(SECRET)
    # Strict: the page server only (the suite's ALLOW_PRIVATE_URLS turned back off).
    config = {**settings.load(), "VAR_DIR": var_dir, "CHROMIUM_PATH": "/usr/bin/chromium",
              "CHROMEDRIVER_PATH": "/usr/bin/chromedriver", "ALLOW_PRIVATE_URLS": False,
              "EGRESS_ALLOW_HOSTS": [pages.url("/").split("/")[2]]}
    yield pages, canary, canary_file, config
    pages.close()
    canary.close()


HOSTILE_URLS = ("file://{canary}", "file:///etc/hostname", "file:///proc/1/environ", "view-source:file://{canary}",
                "chrome://version", "devtools://devtools/bundled/inspector.html", "filesystem:http://x/temporary/a")


def _process_facts(pgid):
    """(uid, argv) of each process of the sandbox's process group (renderers name no folder of ours)."""
    facts = []
    for pid, _ in sandbox_processes.processes():
        try:
            with open(f"/proc/{pid}/stat") as stat:
                if int(stat.read().rsplit(")", 1)[1].split()[2]) != pgid:
                    continue
            with open(f"/proc/{pid}/status") as status:
                uid = next(int(line.split()[1]) for line in status if line.startswith("Uid:"))
            with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
                # Chromium's helpers rewrite their command line into one string: split it again.
                argv = cmdline.read().decode(errors="replace").replace("\0", " ").split()
        except OSError:
            continue
        facts.append((uid, argv))
    return facts


def _assert_unprivileged_and_sandboxed(pgid):
    facts = _process_facts(pgid)
    chromium = [(uid, argv) for uid, argv in facts if argv and ("chromium" in argv[0] or "chromedriver" in argv[0])]
    assert any("--type=renderer" in argv for _, argv in chromium)
    assert chromium and all(uid != 0 for uid, _ in chromium)
    assert not any("--no-sandbox" in argv for _, argv in chromium)


def test_a_tasks_browser_is_unprivileged_sandboxed_and_reaches_only_its_proxy(site, tmp_path):
    pages, canary, canary_file, config = site
    hostname = open("/etc/hostname").read().strip()
    downloads = tmp_path / "downloads"
    with BrowserEgressProxy(config, "isolation") as proxy:
        browser = SeleniumBrowser(proxy=proxy.address, profile_root=browsers_dir(config["VAR_DIR"]),
                                  download_dir=str(downloads))
        try:
            browser.open(pages.url("/home"))  # through the proxy: the one way out
            assert browser.title() == "Home"
            _assert_unprivileged_and_sandboxed(browser.service.process.pid)
            for url in HOSTILE_URLS:  # the raw driver: no check of ours in the way, only the browser's limits
                browser.driver.get(url.format(canary=canary_file))
                text = browser.run_js("return document.documentElement.innerText")
                assert SECRET not in text and hostname not in text and "PATH=" not in text, url
            # The page itself tries: through the proxy (refused there, and traced), and around it.
            browser.open(pages.url("/home"))
            for target in (canary.url("/fetch"), canary.url("/fetch").replace("127.0.0.1", "localhost")):
                browser.run_js(f"fetch({json.dumps(target)}, {{mode: 'no-cors'}}).catch(() => 0); return 1")
            wait_until(lambda: len([r for r in proxy.refusals() if str(r.get("port")) == canary.url().split(":")[2]
                                    .strip("/")]) >= 1, what="the proxy to refuse the canary", timeout=15)
            browser.open(pages.url("/download"))
            browser.click("Get")
            wait_until(lambda: "notes.html" in os.listdir(downloads), what="the download", timeout=15)
        finally:
            browser.close()
    assert canary.requests == []
    assert os.listdir(downloads) == ["notes.html"]
    info = (downloads / "notes.html").stat()
    assert (info.st_uid, info.st_mode & 0o777) == (os.geteuid(), 0o600)


class Cdp:
    """A raw DevTools client on the browser endpoint itself (below any CDP filtering of ours)."""

    def __init__(self, debugger_address):
        self.ws = devtools_websocket(debugger_address)
        self.ids = itertools.count(1)
        self.events = []

    def __call__(self, method, session=None, **params):
        number = next(self.ids)
        self.ws.send(json.dumps({"id": number, "method": method, "params": params,
                                 **({"sessionId": session} if session else {})}))
        while True:
            message = json.loads(self.ws.recv())
            if message.get("id") == number:
                return message
            self.events.append(message)

    def page(self, url, context=None):
        """A new tab on `url` (in `context`), attached, loaded or failed: its session id."""
        target = self("Target.createTarget", url=url, **({"browserContextId": context} if context else {}))
        session = self("Target.attachToTarget", targetId=target["result"]["targetId"], flatten=True)["result"]
        # A new tab is about:blank (complete at once) until the navigation commits: wait for the page asked for.
        loaded = "location.href !== 'about:blank' && document.readyState === 'complete'"
        wait_until(lambda: self.evaluate(session["sessionId"], loaded) is True, what=f"{url} to load or fail", timeout=20)
        return session["sessionId"]

    def evaluate(self, session, expression):
        reply = self("Runtime.evaluate", session, expression=expression, returnByValue=True)
        return (reply.get("result") or {}).get("result", {}).get("value")

    def close(self):
        self.ws.close()


def test_a_kept_sessions_browser_holds_against_hostile_cdp(site):
    """The issue's table, on the raw DevTools endpoint: what a CDP caller asks is bounded by the OS."""
    pages, canary, canary_file, config = site
    session_id = "cbs_isolation" + os.urandom(4).hex()
    launched = browsers.launch(config, session_id)
    outside = tempfile.mkdtemp(prefix="rd-outside-")
    cdp = None
    try:
        root = browsers.session_dir(config, session_id)
        cdp = Cdp(launched.debugger_address)
        home = cdp.page(pages.url("/home"))
        assert cdp.evaluate(home, "document.title") == "Home"  # through its proxy
        _assert_unprivileged_and_sandboxed(launched.pid)
        # Server files: refused by policy, and absent from the browser's mount namespace anyway.
        for url in [u.format(canary=canary_file) for u in HOSTILE_URLS] + [f"file://{root.parent}/"]:
            text = cdp.evaluate(cdp.page(url), "document.documentElement.innerText") or ""
            assert SECRET not in text and "rd-cloud-session-" not in text, url
        # A context told to go direct: no route but the proxy exists in its network namespace.
        direct = cdp("Target.createBrowserContext", proxyServer="direct://")["result"]["browserContextId"]
        for url in (canary.url("/direct"), canary.url("/direct").replace("127.0.0.1", "localhost")):
            assert cdp.evaluate(cdp.page(url, direct), "location.href").startswith("chrome-error://")
        # Downloads told to go anywhere: nothing lands outside the sandbox.
        cdp("Browser.setDownloadBehavior", behavior="allow", downloadPath=outside, eventsEnabled=True)
        page = cdp.page(pages.url("/download"))
        cdp.evaluate(page, "document.getElementById('get').click()")
        wait_until(lambda: cdp("Browser.getVersion") and any(
            e.get("method") == "Browser.downloadProgress" and e["params"]["state"] in ("completed", "canceled")
            for e in cdp.events), what="the download to end", timeout=20)
        assert os.listdir(outside) == []
    finally:
        if cdp is not None:
            cdp.close()
        browsers.terminate(launched.webdriver_url, launched.webdriver_session, launched.host, launched.pid,
                           launched.profile_dir, egress=browsers.egress_dir(config, session_id))
        os.rmdir(outside)
    assert canary.requests == []
    assert not [pid for pid, directory in sandbox_processes.processes_under(root.parent).items() if directory == str(root)]


def test_a_kept_session_starts_and_serves_cdp_where_var_dir_is_deeper_than_a_socket_address(site):
    """A checkout in a deep folder (CI's): the box's sockets lie past sun_path's 108 bytes, and still all works."""
    pages, _, _, config = site
    deep = os.path.join(config["VAR_DIR"], *["a-folder-as-deep-as-a-ci-checkout"] * 3)
    config = {**config, "VAR_DIR": deep}
    session_id = "cbs_deep" + os.urandom(4).hex()
    launched = browsers.launch(config, session_id)
    root = browsers.session_dir(config, session_id)
    cdp = None
    try:
        assert len(os.fsencode(launched.debugger_address)) > 108
        cdp = Cdp(launched.debugger_address)
        assert cdp.evaluate(cdp.page(pages.url("/home")), "document.title") == "Home"  # through its proxy
    finally:
        if cdp is not None:
            cdp.close()
        browsers.terminate(launched.webdriver_url, launched.webdriver_session, launched.host, launched.pid,
                           launched.profile_dir, egress=browsers.egress_dir(config, session_id))
    assert not [pid for pid, directory in sandbox_processes.processes_under(root.parent).items() if directory == str(root)]


def test_browsers_of_a_sigkilled_worker_are_gone_within_beats_sweep(client, api_key, site):
    pages = site[0]
    var_dir = os.environ["VAR_DIR"]

    def instance_browsers():
        return list(sandbox_processes.processes_under(browsers_dir(var_dir))) + list(our_proxies({"VAR_DIR": var_dir}))

    doomed = WorkerProcess(queues="tasks", concurrency=1, name="isolation-doomed")
    submit(client, api_key, {"prompt": f"/Operator\ngo to {pages.url('/slow')}\nwait for \"never shown\"\nwait 30",
                             "executionMode": "cloud_browser"})
    try:
        wait_until(lambda: len(sandbox_processes.processes_under(browsers_dir(var_dir))) >= 3,
                   what="the task's browser to start", timeout=60)
    finally:
        doomed.kill()
    # Beat's sweep (workers.reap_browsers, every SWEEP_INTERVAL_SECONDS), called as beat would; no worker starts.
    wait_until(lambda: reap_browsers({"VAR_DIR": var_dir}) is not None and not instance_browsers(),
               what="this instance's browser processes to be 0", timeout=60)
