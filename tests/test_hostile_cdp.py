"""A kept session's CDP, used as an attacker would on a strict instance: the relay refuses what reaches the server."""
import base64
import json
import secrets
import shutil
import tempfile
import time
from pathlib import Path

import pytest
import requests
import websocket

from app.sessions import browsers
from tests.browser_pages import Canary, RecordingServer
from tests.conftest import make_key, wait_until
from tests.processes import web_and_worker
from tests.sdk_support import run_sdk

pytestmark = pytest.mark.slow
SECRET = "canary-" + secrets.token_hex(8)
REPORT = b"region,total\nnorth,7\n"
REFUSED = "refused by Remote Dispatch"


@pytest.fixture(scope="module")
def canary():
    server = Canary()
    yield server
    server.close()


@pytest.fixture(scope="module")
def site(canary):
    """The one server the strict instance lets browsers reach, with pages that try the canary from inside."""
    other = f"http://127.0.0.1:{canary.port}"
    pages = {
        "/hello": "<html><head><title>Hello</title></head><body><h1>Hello</h1>"
                  "<a id='dl' href='/report.csv'>report</a></body></html>",
        "/report.csv": (200, {"Content-Type": "text/csv", "Content-Disposition": "attachment; filename=report.csv"},
                        REPORT.decode()),
        "/second.csv": (200, {"Content-Type": "text/csv", "Content-Disposition": "attachment; filename=second.csv"},
                        REPORT.decode()),
        # A service worker that answers the page's fetch by fetching the canary itself.
        "/worker": "<html><body><script>const sw = navigator.serviceWorker; sw.register('/sw.js');"
                   "(sw.controller ? Promise.resolve() : new Promise(r => sw.addEventListener('controllerchange', r)))"
                   ".then(() => fetch('/through-worker')).then(r => r.text())"
                   ".then(t => document.title = 'sw:' + t, e => document.title = 'sw-failed:' + e)</script></body></html>",
        "/sw.js": (200, {"Content-Type": "text/javascript"},
                   "self.addEventListener('install', e => self.skipWaiting());"
                   "self.addEventListener('activate', e => e.waitUntil(self.clients.claim()));"
                   "self.addEventListener('fetch', e => { if (e.request.url.endsWith('/through-worker')) "
                   f"e.respondWith(fetch('{other}/from-worker')"
                   ".then(r => new Response('worker:' + r.status), () => new Response('worker:failed'))); });"),
    }
    server = RecordingServer(pages)
    yield server
    server.close()


@pytest.fixture(scope="module")
def strict(site):
    """The web process (which relays kept browsers' CDP) and the tasks worker (which starts them, and whose stream
    endpoint reaches their DevTools), with private addresses refused but for `site`."""
    env = {"ALLOW_PRIVATE_URLS": "false", "EGRESS_ALLOW_HOSTS": f"127.0.0.1:{site.port}"}
    with web_and_worker("strict", env) as (web, _):
        yield web


@pytest.fixture
def planted(app):
    """A secret file in VAR_DIR, beside the encryption key and every session's folder."""
    path = Path(app.config["VAR_DIR"]) / "planted-canary.txt"  # its name may be echoed; its content must not
    path.write_text(SECRET)
    yield path
    path.unlink(missing_ok=True)


@pytest.fixture
def outside():
    """A folder outside the session, as a caller would name it for downloads and extensions."""
    path = Path(tempfile.mkdtemp(prefix="rd-hostile-cdp-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def session_file(config, session_id, name):
    """The content of a file the session's browser downloaded, in its downloads folder or already stored from there
    into its files (the holding worker stores an idle session's downloads every second); None while neither has it."""
    for folder in (browsers.downloads_dir(config, session_id), browsers.files_dir(config, session_id)):
        if (folder / name).is_file():
            return (folder / name).read_bytes()
    return None


def api(web, key, path, **body):
    return requests.post(f"{web.base}/fast/v2{path}", headers={"x-api-key": key}, json=body, timeout=120)


def cdp_session(web, key):
    reply = api(web, key, "/cloud-browser/create-cloud-browser-session", session_name="hostile")
    assert reply.status_code == 200, reply.text
    return reply.json()


class RawCdp:
    """A plain WebSocket CDP client that keeps every message it received (to look for leaked bytes)."""

    def __init__(self, url, headers):
        self.ws = websocket.create_connection(url, header=[f"{k}: {v}" for k, v in headers.items()], timeout=30)
        self.next_id = 0
        self.received = []

    def send(self, method, params=None, session=None):
        self.next_id += 1
        message = {"id": self.next_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        self.ws.send(json.dumps(message))
        wanted = self.next_id
        return self.wait(lambda m: m.get("id") == wanted)

    def wait(self, predicate, timeout=30):
        for message in self.received:
            if predicate(message):
                return message
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            message = json.loads(self.ws.recv())
            self.received.append(message)
            if predicate(message):
                return message
        raise AssertionError("no such CDP message")

    def text(self):
        return json.dumps(self.received)

    def close(self):
        self.ws.close()


def refused(reply, *words):
    """The reply is the relay's CDP error naming the method and why."""
    error = reply.get("error") or {}
    message = error.get("message", "")
    assert error.get("code") == -32000 and REFUSED in message, reply
    for word in words:
        assert word in message, (word, reply)
    return message


def test_a_free_key_gets_no_cdp_and_is_told_why(strict):
    key = make_key("free-caller", plan="free")
    reply = api(strict, key, "/cloud-browser/create-cloud-browser-session")
    assert reply.status_code == 403
    assert reply.json()["error"] == "CDP Not In Plan" and "'free' plan" in reply.json()["message"]
    headers = api(strict, key, "/cloud-browser/generate-cdp-auth-headers", cdp_websocket_url="ws://x/devtools/browser/y")
    assert headers.status_code == 403  # (sessions without CDP stay open to it: tests/test_sessions.py)


def test_every_hostile_cdp_command_is_refused_and_nothing_leaks(app, strict, site, canary, planted, outside):
    key = make_key("attacker", plan="pro")
    created = cdp_session(strict, key)
    session_id = created["session_id"]
    var_dir = Path(app.config["VAR_DIR"])
    _discovery_points_at_the_relay(created)
    cdp = RawCdp(created["cdp_websocket_url"], created["cdp_auth_headers"])
    try:
        # The table, row by row.
        for url in ("file:///etc/hostname", f"file://{var_dir}/cloud-sessions/", f"file://{planted}",
                    f"file://{var_dir}/encryption.key"):
            refused(cdp.send("Target.createTarget", {"url": url}), "Target.createTarget", "file:")
        refused(cdp.send("Target.createBrowserContext", {"proxyServer": "direct://"}), "proxyServer",
                "egress proxy")
        refused(cdp.send("Target.createBrowserContext", {"proxyServer": "http://127.0.0.1:9",
                                                         "proxyBypassList": "<-loopback>"}), "proxyServer")

        # A page of our own, attached flat (as Playwright does), for the page-level commands.
        target = cdp.send("Target.createTarget", {"url": "about:blank"})["result"]["targetId"]
        page = cdp.send("Target.attachToTarget", {"targetId": target, "flatten": True})["result"]["sessionId"]
        for url in (f"file://{planted}", f" FILE:{planted}", f"fi\tle://{planted}", "filesystem:http://127.0.0.1/x",
                    "chrome://version", "about:version", "view-source:file:///etc/hostname",
                    "devtools://devtools/bundled/inspector.html", "chrome-extension://abc/x.html", "javascript:1",
                    "blob:file:///x"):
            reply = cdp.send("Page.navigate", {"url": url}, session=page)
            assert reply.get("sessionId") == page
            refused(reply, "Page.navigate")
        # Non-flat messages to a target get the same checks.
        inner = json.dumps({"id": 1, "method": "Page.navigate", "params": {"url": f"file://{planted}"}})
        refused(cdp.send("Target.sendMessageToTarget", {"targetId": target, "message": inner}), "file:")
        refused(cdp.send("Network.loadNetworkResource", {"url": f"file://{planted}", "frameId": target,
                                                         "options": {"disableCache": True, "includeCredentials": False}},
                         session=page), "file:")
        refused(cdp.send("DOM.setFileInputFiles", {"files": [str(planted)], "nodeId": 1}, session=page),
                "session's downloads")
        refused(cdp.send("Target.exposeDevToolsProtocol", {"targetId": target}), "bypasses this relay")
        refused(cdp.send("Target.setRemoteLocations", {"locations": [{"host": "127.0.0.1", "port": canary.port}]}),
                "egress proxy")
        (outside / "manifest.json").write_text('{"name": "x", "version": "1", "manifest_version": 3}')
        refused(cdp.send("Extensions.loadUnpacked", {"path": str(outside)}), "Extensions.loadUnpacked")
        refused(cdp.send("SystemInfo.getInfo"), "server machine")
        refused(cdp.send("Browser.getBrowserCommandLine"), "paths")
        refused(cdp.send("Tracing.start", {"perfettoConfig": "AAAA"}), "command line")

        # What stays allowed still works: a page of the allowed server, read back.
        assert "error" not in cdp.send("Page.navigate", {"url": site.url("/hello")}, session=page)
        wait_until(lambda: _evaluate(cdp, page, "document.title") == "Hello", "the allowed page")

        # The page's own ways to a file: Chromium refuses them (no file: navigation from the web).
        _evaluate(cdp, page, f"location.href = 'file://{planted}'")
        time.sleep(1)
        assert SECRET not in str(_evaluate(cdp, page, "document.documentElement.outerHTML"))

        # Interception: requests rerouted to the canary still meet the egress proxy; to file:, the relay.
        cdp.send("Fetch.enable", {"patterns": [{"urlPattern": "*/hello*"}]}, session=page)
        cdp.ws.send(json.dumps({"id": 9000, "method": "Page.navigate", "params": {"url": site.url("/hello?again")},
                                "sessionId": page}))
        paused = cdp.wait(lambda m: m.get("method") == "Fetch.requestPaused")["params"]["requestId"]
        refused(cdp.send("Fetch.continueRequest", {"requestId": paused, "url": f"file://{planted}"}, session=page),
                "file:")
        rerouted = cdp.send("Fetch.continueRequest", {"requestId": paused,
                                                      "url": f"http://127.0.0.1:{canary.port}/rerouted"}, session=page)
        if "error" in rerouted:  # Chromium's own refusal is as good: the request must not stay paused
            cdp.send("Fetch.failRequest", {"requestId": paused, "errorReason": "Failed"}, session=page)
        cdp.wait(lambda m: m.get("id") == 9000)
        cdp.send("Fetch.disable", session=page)

        # A context of its own (no proxy settings) and a service worker: still behind the egress proxy.
        context = cdp.send("Target.createBrowserContext")["result"]["browserContextId"]
        other = cdp.send("Target.createTarget", {"url": "about:blank", "browserContextId": context})["result"]
        other_page = cdp.send("Target.attachToTarget", {"targetId": other["targetId"], "flatten": True})["result"]
        cdp.send("Page.navigate", {"url": f"http://127.0.0.1:{canary.port}/context"}, session=other_page["sessionId"])
        cdp.send("Network.setBypassServiceWorker", {"bypass": False}, session=page)
        cdp.send("Page.navigate", {"url": site.url("/worker")}, session=page)
        wait_until(lambda: str(_evaluate(cdp, page, "document.title")).startswith("sw"), "the service worker")
        assert str(_evaluate(cdp, page, "document.title")).startswith("sw:worker:")  # it answered (canary: below)

        # Downloads: wherever the caller points them (page level first, then browser level), they land in
        # the session's folder.
        page_dir, browser_dir = outside / "page-level", outside / "browser-level"
        assert "error" not in cdp.send("Page.setDownloadBehavior", {"behavior": "allow",
                                                                    "downloadPath": str(page_dir)}, session=page)
        cdp.send("Page.navigate", {"url": site.url("/second.csv")}, session=page)
        wait_until(lambda: session_file(app.config, session_id, "second.csv") == REPORT, "the page-level download")
        assert "error" not in cdp.send("Browser.setDownloadBehavior", {
            "behavior": "allowAndName", "downloadPath": str(browser_dir), "eventsEnabled": True})
        cdp.send("Page.navigate", {"url": site.url("/report.csv")}, session=page)
        cdp.wait(lambda m: m.get("method") == "Browser.downloadProgress" and m["params"]["state"] == "completed",
                 timeout=60)
        # Under the name the site suggested, not its GUID (allowAndName, as Playwright asks, is saved as allow).
        assert wait_until(lambda: session_file(app.config, session_id, "report.csv")) == REPORT

        # A binary frame (Chromium would read it as CBOR, unchecked) ends the connection.
        cdp.ws.send_binary(b"\xd8\x5a\x00\x00\x00\x00")
        assert _closed(cdp)
    finally:
        cdp.close()
    assert canary.connections == []
    assert SECRET not in cdp.text() and "hostname" not in _titles(cdp)
    assert list(outside.iterdir()) == [outside / "manifest.json"]  # nothing written outside the session
    listed = requests.get(f"{strict.base}/fast/v2/cloud-browser/replay/downloads", params={"session_id": session_id},
                          headers={"x-api-key": key}, timeout=30).json()["downloaded_files"]
    assert sorted(f["file_name"] for f in listed) == ["report.csv", "second.csv"]


def test_playwright_over_cdp_stays_useful_and_is_told_what_is_refused(app, strict, site, canary, planted):
    key = make_key("builder", plan="pro")
    created = cdp_session(strict, key)
    downloads = browsers.downloads_dir(app.config, created["session_id"])
    result = run_sdk(strict_as_service(strict), key, f'''
        import base64
        from playwright.async_api import async_playwright
        async def attempt(call):
            try:
                await call
                return None
            except Exception as exc:
                return str(exc)
        async with async_playwright() as playwright:
            browser = await playwright.chromium.connect_over_cdp({created["cdp_websocket_url"]!r},
                                                                 headers={created["cdp_auth_headers"]!r})
            context = await browser.new_context()
            page = await context.new_page()
            await page.goto({site.url("/hello")!r})
            heading = await page.evaluate("document.querySelector('h1').textContent")
            shot = base64.b64encode((await page.screenshot())[:8]).decode()
            await context.add_cookies([{{"name": "flavour", "value": "plain", "url": {site.url("/")!r}}}])
            cookies = [(c["name"], c["value"]) for c in await context.cookies()]
            async with page.expect_download() as info:
                await page.click("#dl")
            download = await info.value
            await download.failure()  # waits until the browser says it is done
            refusals = {{
                "file": await attempt(page.goto({f"file://{planted}"!r})),
                "chrome": await attempt(page.goto("chrome://version")),
                "proxy": await attempt(browser.new_context(proxy={{"server": "direct://"}})),
                "canary": await attempt(page.goto("http://127.0.0.1:{canary.port}/typed")),
            }}
            default_page = await browser.contexts[0].new_page()
            await default_page.goto({site.url("/hello")!r})
            emit(heading=heading, shot=shot, cookies=cookies, name=download.suggested_filename, refusals=refusals,
                 default_title=await default_page.title(), content=await page.content(),
                 pages=[p.url for c in browser.contexts for p in c.pages])
    ''')
    value = result.value
    assert value["heading"] == "Hello" and value["default_title"] == "Hello"
    # A session not made by the SDK's CloudBrowserEnvironment (no require_extension) shows no stand-in side panel.
    assert not [url for url in value["pages"] if "sidepanel" in url], value["pages"]
    assert base64.b64decode(value["shot"]) == b"\x89PNG\r\n\x1a\n"
    assert ["flavour", "plain"] in value["cookies"]
    assert value["name"] == "report.csv"
    folders = (downloads, browsers.files_dir(app.config, created["session_id"]))  # into the session's folder
    assert [path.read_bytes() for folder in folders if folder.is_dir() for path in folder.iterdir()] == [REPORT]
    refusals = value["refusals"]
    assert REFUSED in refusals["file"] and "file:" in refusals["file"]
    assert REFUSED in refusals["chrome"] and "chrome:" in refusals["chrome"]
    assert REFUSED in refusals["proxy"] and "proxyServer" in refusals["proxy"]
    assert canary.connections == [] and SECRET not in json.dumps(value)
    # The session's own download (over CDP, no task) becomes a file of the key once collected (here by the
    # session's listing): the session named, no task, the exact bytes.
    base, headers = strict.base + "/fast/v2", {"x-api-key": key}
    assert requests.get(base + "/cloud-browser/replay/downloads", params={"session_id": created["session_id"]},
                        headers=headers, timeout=30).status_code == 200
    (stored,) = requests.get(base + "/files", headers=headers, timeout=30).json()["files"]
    assert (stored["sessionId"], stored["requestId"], stored["size"]) == (created["session_id"], None, len(REPORT))
    assert stored["filename"] == "report.csv"  # as a task's download of it is named, not Playwright's GUID
    assert requests.get(f"{base}/files/{stored['key']}", headers=headers, timeout=30).content == REPORT


def _discovery_points_at_the_relay(created):
    """/json/version and /json/list need the credential and name the relay, never the DevTools port."""
    relay = created["cdp_websocket_url"].split("/devtools/")[0].replace("ws://", "http://")
    headers = created["cdp_auth_headers"]
    assert requests.get(relay + "/json/version", timeout=10).status_code == 401
    answer = requests.get(relay + "/json/version", headers=headers, timeout=10)
    version = answer.json()
    assert version["webSocketDebuggerUrl"] == created["cdp_websocket_url"]
    listed = requests.get(relay + "/json/list", headers=headers, timeout=10).json()
    assert listed and all(entry["webSocketDebuggerUrl"].startswith(relay.replace("http://", "ws://") + "/devtools/")
                          and "devtoolsFrontendUrl" not in entry for entry in listed)
    assert requests.put(relay + "/json/new?file:///etc/hostname", headers=headers, timeout=10).status_code == 405


def _evaluate(cdp, session, expression):
    reply = cdp.send("Runtime.evaluate", {"expression": expression, "returnByValue": True}, session=session)
    return reply.get("result", {}).get("result", {}).get("value")


def _closed(cdp):
    for _ in range(100):
        try:
            data = cdp.ws.recv()
        except (websocket.WebSocketException, OSError):
            return True
        if not data:
            return True
        cdp.received.append(json.loads(data))
    return False


def _titles(cdp):
    return " ".join(str(m.get("params", {}).get("targetInfo", {}).get("title", "")) for m in cdp.received)


def strict_as_service(web):
    """run_sdk needs only the API base of a service."""
    class Service:
        api_base = web.base + "/fast/v2"
    return Service
