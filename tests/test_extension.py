"""Client mode end to end: headless Chromium with the unpacked extension, a real gunicorn, worker and pages."""
import base64
import json

import pytest

from tests.conftest import make_key
from tests.extension_support import ExtensionBrowser, action, wait_for_window, windows_of
from tests.page_server import PageServer
from tests.processes import WebProcess

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
def web(app):
    server = WebProcess(env={"WINDOW_OFFLINE_SECONDS": "60"})
    yield server
    server.stop()


@pytest.fixture(scope="module")
def pages():
    server = PageServer(PAGES)
    yield server
    server.close()


@pytest.fixture(scope="module")
def browser(web):
    chromium = ExtensionBrowser()
    yield chromium
    chromium.quit()


@pytest.fixture
def module_key():
    """Each test starts from empty tables: a new key, which the test configures through the options page."""
    return make_key("extension-user", plan="dev")


@pytest.fixture
def window(browser, web, module_key):
    browser.configure(web.base, module_key)
    return wait_for_window(web.base, module_key)


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


def test_the_extension_copy_of_page_js_is_the_one_page_script():
    from tests.processes import ROOT

    assert (ROOT / "extension" / "page.js").read_bytes() == (ROOT / "workers" / "browser" / "page.js").read_bytes(), \
        "extension/page.js differs from workers/browser/page.js: run `make extension`"


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
    import time

    from tests.extension_support import wait_for_window

    assert action(web.base, module_key, window, "go_to_url", url=pages.url("/form"), new_tab=False).json()["status"] \
        == "success"
    browser.stop_service_worker()
    # The command is issued while nothing polls; it waits as a row until the worker is back (its alarm).
    started = time.monotonic()
    response = action(web.base, module_key, window, "get_url", timeout=120)
    assert response.status_code == 200, response.text
    assert json.loads(response.json()["data"]) == {"url": pages.url("/form")}
    assert wait_for_window(web.base, module_key) == window
    assert time.monotonic() - started < 120
