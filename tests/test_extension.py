"""Client mode end to end: headless Chromium with the unpacked extension, a real gunicorn, worker and pages."""
import base64
import json

import pytest

from tests.extension_support import action, browser, module_key, web, window, windows_of  # noqa: F401 (fixtures)
from tests.page_server import PageServer

pytestmark = pytest.mark.timeout(600)

PAGES = {
    "/form": """<html><head><title>Form</title></head><body>
      <input id="q" name="q" data-testid="query" aria-label="Query">
      <select id="size" name="size"><option value="s">Small</option><option value="l">Large</option></select>
      <button id="go" class="btn primary" onclick="document.getElementById('out').textContent='clicked '+document.getElementById('q').value">Go</button>
      <p id="out"></p>
      <div id="later"></div>
      <script>setTimeout(function(){document.getElementById('later').innerHTML='<span class=\"late\">here</span>'}, 700)</script>
      <form action="/echo"><input name="k" id="k"></form>
    </body></html>""",
    "/other": "<html><head><title>Other</title></head><body><h1>Other page</h1></body></html>",
}


@pytest.fixture(scope="module")
def pages():
    server = PageServer(PAGES)
    yield server
    server.close()


def test_every_sdk_action_round_trips(browser, window, web, module_key, pages):
    base, key = web.base, module_key

    def run(name, **args):
        response = action(base, key, window, name, **args)
        assert response.status_code == 200, response.text
        body = response.json()
        assert body["status"] == "success", body
        return None if body["data"] is None else json.loads(body["data"])

    assert run("go_to_url", url=pages.url("/form"), new_tab=False) is None
    assert run("get_url") == {"url": pages.url("/form")}
    shot = run("get_screenshot")
    assert base64.b64decode(shot["base64_content"]).startswith(b"\x89PNG") and shot["mime_type"] == "image/png"
    assert '<button id="go"' in run("get_full_html")["html"]
    assert "Go" in run("get_simplified_html")["html"]
    assert run("execute_javascript_on_page", code="document.title + ' ' + (1 + 1)") == {"result": "Form 2"}
    assert run("execute_javascript_on_page", code="return [location.pathname]") == {"result": ["/form"]}
    sel = lambda **kinds: {k: {"value": v} for k, v in kinds.items()}  # noqa: E731
    run("agentic_selector", action={"type": "fill", "value": "hello", "pressEnter": False},
        selectors=sel(dataTestId="query"), fallback_operator_query="the query box")
    run("agentic_selector", action={"type": "click"}, selectors=sel(className="btn primary", tagName="button"),
        fallback_operator_query="Go")
    assert run("agentic_selector", action={"type": "getText"}, selectors=sel(id="out"),
               fallback_operator_query="out") == {"value": "clicked hello"}
    assert run("agentic_selector", action={"type": "getProperty", "propertyName": "value"},
               selectors=sel(ariaLabel="Query"), fallback_operator_query="q") == {"value": "hello"}
    assert run("agentic_selector", action={"type": "selectOptionByValue", "value": "l"},
               selectors=sel(name="size"), fallback_operator_query="size")["value"] == "Large"
    assert run("agentic_selector", action={"type": "selectOptionByIndex", "value": 0},
               selectors=sel(xpath="//select[@id='size']"), fallback_operator_query="size")["value"] == "Small"
    assert run("agentic_selector", action={"type": "getText"}, selectors=sel(textContent="Go", role="") or
               sel(textContent="Go"), fallback_operator_query="Go")["value"] == "Go"
    assert run("wait_for_element", selectors=sel(className="late"), state="visible", timeout=5000) == {"found": True}
    assert run("wait_for_element", selectors=sel(id="nothing"), state="visible", timeout=500) == {"found": False}
    run("agentic_selector", action={"type": "fill", "value": "v1"}, selectors=sel(id="k"),
        fallback_operator_query="k")
    run("press_key", events=[{"type": "press", "code": "Enter", "key": "Enter"}])
    assert run("get_url")["url"] == pages.url("/echo?k=v1")
    assert run("print_message", message="hello from the SDK") is None
    assert run("go_to_url", url=pages.url("/other"), new_tab=True) is None
    assert run("get_url") == {"url": pages.url("/other")}
    assert run("close_tab") == {"closes_window": False}
    assert run("get_url") == {"url": pages.url("/echo?k=v1")}
    # A selector that matches nothing is an error with a reason, not a hang.
    response = action(base, key, window, "agentic_selector", action={"type": "click"},
                      selectors=sel(id="missing"), fallback_operator_query="missing")
    assert response.json()["status"] == "error" and "No element matches" in response.json()["error"]


def test_the_driver_works_the_page_through_the_extension(browser, window, pages):
    """The Browser interface the web agent uses, carried out by the extension (the worker's side of client mode)."""
    from workers.browser.base import BrowserError
    from workers.browser.extension_driver import ExtensionBrowser

    driver = ExtensionBrowser(window, "task-under-test", timeout=30).begin("driver test")
    driver.open(pages.url("/form"))
    reading = driver.read()
    assert reading.title == "Form" and "Go" in reading.text
    driver.type("Query", "typed")
    driver.select("size", "Large")
    driver.click("Go")
    assert driver.extract("#out") == ["clicked typed"]
    driver.wait_for(text="here", timeout=5)
    with pytest.raises(BrowserError, match="Timed out after 0.5 s"):
        driver.wait_for(text="never shown", timeout=0.5)
    assert driver.screenshot().startswith(b"\x89PNG")
    driver.open(pages.url("/other"), new_tab=True)
    assert [t["index"] for t in driver.tabs()] == [1, 2] and driver.title() == "Other"
    driver.switch_tab(1)
    assert driver.current_url() == pages.url("/form")
    assert driver.run_js("return document.querySelectorAll('option').length") == 2
    driver.close_tab(2)
    assert len(driver.tabs()) == 1
    driver.close(status="success")


def test_the_extension_s_page_js_is_the_one_page_script_not_a_copy():
    """A link (which Chromium follows when it loads the unpacked extension: the tests above run through it), so the
    workers and the extension can never run two versions of the page script."""
    from tests.processes import ROOT

    link = ROOT / "extension" / "page.js"
    assert link.is_symlink() and link.resolve() == (ROOT / "workers" / "browser" / "page.js").resolve()


def test_a_page_cannot_message_the_extension(browser, window, web, module_key, pages):
    """No externally_connectable and no listener for pages: a page's attempts reach nothing and change nothing."""
    from tests.extension_support import extension_id

    driver = browser.driver
    browser.driver.get(pages.url("/other"))
    outcome = driver.execute_async_script("""
        const done = arguments[arguments.length - 1];
        const id = arguments[0];
        const report = {runtime: typeof chrome === "object" && chrome.runtime ? typeof chrome.runtime.sendMessage : "undefined"};
        try {
          chrome.runtime.sendMessage(id, {type: "api", method: "DELETE", path: "/browser-windows/x"},
            (reply) => { report.reply = reply === undefined ? "none" : reply;
                         report.lastError = chrome.runtime.lastError && chrome.runtime.lastError.message; done(report); });
        } catch (e) { report.thrown = String(e); done(report); }
        window.postMessage({type: "reconnect", commandId: "x", name: "close_window"}, "*");
    """, extension_id())
    assert outcome.get("runtime") == "undefined" or outcome.get("thrown") or outcome.get("lastError"), outcome
    assert "reply" not in outcome or outcome["reply"] == "none"
    # The window is still registered and online, and the page is still open.
    assert [w["state"] for w in windows_of(web.base, module_key)] == ["online"]
    assert driver.title == "Other"


def test_a_stopped_service_worker_reconnects_and_loses_no_command(browser, window, web, module_key, pages):
    from tests.extension_support import wait_for_window

    assert action(web.base, module_key, window, "go_to_url", url=pages.url("/form"), new_tab=False).json()["status"] \
        == "success"
    browser.stop_service_worker()
    # The command is issued while nothing polls; it waits as a row until the worker is back (its alarm).
    response = action(web.base, module_key, window, "get_url", timeout=120)
    assert response.status_code == 200, response.text
    assert json.loads(response.json()["data"]) == {"url": pages.url("/form")}
    assert wait_for_window(web.base, module_key) == window


def test_the_manifest_pins_the_documented_id_and_opens_nothing_to_pages():
    from tests.extension_support import EXTENSION_DIR, extension_id

    manifest = json.loads((EXTENSION_DIR / "manifest.json").read_text())
    assert extension_id() == "fnobdpaflkalafjgbmfbmpkedjigpipc"  # the id the README documents
    assert manifest["manifest_version"] == 3 and manifest["minimum_chrome_version"] == "116"
    assert "externally_connectable" not in manifest and "content_scripts" not in manifest
    assert "web_accessible_resources" not in manifest


def test_a_new_window_registers_and_close_window_closes_it(browser, window, web, module_key, pages):
    from tests.conftest import wait_until

    driver = browser.driver
    main = driver.current_window_handle
    driver.switch_to.new_window("window")
    driver.get(pages.url("/other"))
    second = wait_until(lambda: [w["browserWindowId"] for w in windows_of(web.base, module_key)
                                 if w["browserWindowId"] != window], what="the second window to register")[0]
    assert json.loads(action(web.base, module_key, second, "get_url").json()["data"]) == {"url": pages.url("/other")}
    assert action(web.base, module_key, second, "close_window").json() == {"status": "success", "data": None,
                                                                            "error": None}
    wait_until(lambda: len(driver.window_handles) == 1, what="the window to close")
    driver.switch_to.window(main)
    wait_until(lambda: [w["browserWindowId"] for w in windows_of(web.base, module_key)] == [window],
               what="the closed window to leave the list")
    assert action(web.base, module_key, second, "get_url").status_code == 404
