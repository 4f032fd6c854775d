"""BotD 2.0.0 and fpscanner 1.0.2 in every other kind of browser we start or serve (issue 51, items 1, 4 and 5):
a kept session's browser as the agent's steps, a direct action and a replay drive it, a paused task's browser after
its answer, a Grid's browser, a caller's own CDP client over our relay (raw, then Playwright), and a person's
Chromium with our extension. A cold and a pooled cloud_browser task's are in tests/test_cloud_browser.py and
tests/test_browser_pool.py, the driver's own in tests/test_browser_identity.py. docs/browser-identity.md, "Where it
applies", has the table of what each shows."""
import json
import os
import types

import pytest
import websocket

from tests.conftest import WorkerProcess, make_key, submit, wait_for_status
from tests.extension_support import ExtensionBrowser, action, browser, module_key, web, window  # noqa: F401
from tests.grid import selenium_grid  # noqa: F401 (fixture)
from tests.identity_pages import STILL_SEEN, detect_steps, detections
from tests.sdk_support import run_sdk
from tests.test_browser_identity import site  # noqa: F401 (the loopback site with the detectors)
from tests.test_pause_keeps_browser import KEPT, actions, answer, paused
from tests.test_sessions import api, cdp_call, create, run_and_wait
from workers.browser.egress import BrowserEgressProxy
from workers.browser.launch import browsers_dir
from workers.browser.selenium_driver import SeleniumBrowser

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

# What Playwright itself adds over our CDP URL (docs/browser-identity.md, "Your own client over our CDP URL"): its
# Runtime.enable on every page it attaches to (fpscanner hasCDP); with expose_function, its binding on window
# (fpscanner hasPlaywright).
PLAYWRIGHT_SEEN = {"fpscanner.hasCDP"}
PLAYWRIGHT_BINDING_SEEN = PLAYWRIGHT_SEEN | {"fpscanner.hasPlaywright"}
# What a Grid's browser still shows (docs/browser-identity.md, "A Grid's browser"): the node's own chromedriver, not our
# quiet copy, keeps its cdc_ globals on every page; and it keeps --disable-gpu (the node's Mesa is not known), so
# WebGL is SwiftShader's.
GRID_SEEN = STILL_SEEN | {"botd.detectDistinctiveProperties:selenium", "fpscanner.hasSwiftshaderRenderer"}


@pytest.fixture(scope="module")
def service(web):
    """The extension tests' gunicorn (its port stays the extension's service URL) and one worker for every task,
    direct action and session of this module."""
    worker = WorkerProcess(concurrency=2, name="identity-modes")
    yield types.SimpleNamespace(base=web.base, api_base=web.base + "/fast/v2", worker=worker)
    worker.stop()


def seen_as_a_person(site, name):
    """The findings filed under `name`: no detection but the documented ones, and BotD takes it for a person."""
    found = site.wait(name)
    assert found is not None, f"the detectors ({name}) posted nothing back"
    assert set(detections(found)) == STILL_SEEN, name
    assert found["botd"] == {"bot": False}, name
    return found


def test_a_kept_session_shows_nothing_to_the_agent_s_steps_a_direct_action_or_a_replay(service, site):
    key = make_key("kept-identity")
    created = create(service, key)
    session = {"cloudBrowserSessionId": created["session_id"]}
    site.forget()
    recorded = run_and_wait(service, key, {"prompt": detect_steps(site, "agent"), **session})
    assert recorded["status"] == "success" and recorded["response"]["text"] == "Detectors done", recorded
    seen_as_a_person(site, "agent")
    # The SDK's direct actions: the same tab, then a new one (a tab the driver attaches to afresh).
    for name, new_tab in (("direct", False), ("direct-tab", True)):
        reply = action(service.base, key, created["browser_window_id"], "go_to_url",
                       url=site.url(f"/detect?as={name}"), new_tab=new_tab)
        assert reply.status_code == 200 and reply.json()["status"] == "success", reply.text
        seen_as_a_person(site, name)
    # The agent task's recorded script, replayed without a model in the same session: the findings go under
    # "agent" again, so forget the first ones.
    site.forget()
    replayed = run_and_wait(service, key, {"replayOf": recorded["requestId"], **session})
    assert replayed["status"] == "success" and replayed["replay"]["replayOf"] == recorded["requestId"], replayed
    assert all(entry["replayed"] for entry in replayed["response"]["actionTrace"][:-1])
    seen_as_a_person(site, "agent")


def test_a_paused_task_s_browser_shows_nothing_after_its_answer(client, service, site):
    key = make_key("paused-identity")
    steps = detect_steps(site, "before").splitlines()[:-1] + ["ask What is the code from your phone?"] + \
        detect_steps(site, "after").splitlines()[1:]
    site.forget()
    request_id = submit(client, key, {"prompt": "\n".join(steps), "executionMode": "cloud_browser"}
                        ).get_json()["requestId"]
    asked = paused(client, key, request_id)
    seen_as_a_person(site, "before")
    answer(client, key, request_id, asked)
    body = wait_for_status(client, key, request_id, timeout=120)
    assert body["status"] == "success" and body["response"]["text"] == "Detectors done", body
    assert KEPT in actions(body)  # the browser kept at the pause, attached to again
    seen_as_a_person(site, "after")


def test_a_grid_browser_shows_only_its_node_s_chromedriver(selenium_grid, site):
    """As workers/agent/browser_modes.py starts a task's browser when SELENIUM_REMOTE_URL names a Grid."""
    with BrowserEgressProxy({"VAR_DIR": os.environ["VAR_DIR"], "ALLOW_PRIVATE_URLS": True}, "grid-identity") as proxy:
        browser = SeleniumBrowser(label="grid-identity", remote_url=str(selenium_grid), proxy=proxy.address,
                                  profile_root=browsers_dir(os.environ["VAR_DIR"]), time_zone="Europe/Paris",
                                  devtools=True)
        try:
            site.forget()
            browser.open(site.url("/detect"))
            found = site.wait("detect")
            assert found is not None, "the detectors posted nothing back"
            assert set(detections(found)) == GRID_SEEN
            site.forget()
            browser.open(site.url("/report"))
            page = site.wait("report")["page"]
        finally:
            browser.close()
    assert "headless" not in page["userAgent"].lower() and page["webdriver"] is False
    assert page["timeZone"] == "Europe/Paris"


def test_a_cdp_client_over_our_relay_sees_what_its_own_commands_add_and_nothing_of_ours(service, site):
    """Raw CDP with no Runtime domain: nothing beyond a task's own browser. Playwright: only what it adds itself."""
    key = make_key("cdp-identity", plan="pro")  # free keys have no CDP
    created = api(service, key, "POST", "/cloud-browser/create-cloud-browser-session", json={}).json()
    headers = [f"{name}: {value}" for name, value in created["cdp_auth_headers"].items()]
    site.forget()
    ws = websocket.create_connection(created["cdp_websocket_url"], header=headers, timeout=60)
    try:
        pages = [t["targetId"] for t in cdp_call(ws, 1, "Target.getTargets")["targetInfos"] if t["type"] == "page"]
        attached = cdp_call(ws, 2, "Target.attachToTarget", {"targetId": pages[0], "flatten": True})["sessionId"]
        cdp_call(ws, 3, "Page.enable", session=attached)
        cdp_call(ws, 4, "Page.navigate", {"url": site.url("/detect?as=raw")}, session=attached)
        seen_as_a_person(site, "raw")
    finally:
        ws.close()
    result = run_sdk(service, key, f'''
        from playwright.async_api import async_playwright
        async with async_playwright() as playwright:
            browser = await playwright.chromium.connect_over_cdp({created["cdp_websocket_url"]!r},
                                                                 headers={created["cdp_auth_headers"]!r})
            page = await browser.contexts[0].new_page()
            for name in ("playwright", "playwright-binding"):
                if name == "playwright-binding":
                    await page.expose_function("shout", lambda text: text.upper())
                await page.goto({site.url("/detect")!r} + "?as=" + name)
                await page.locator("h1", has_text="Detectors done").wait_for()
            await page.close()
            await browser.close()
        emit(done=True)
    ''')
    assert result.value == {"done": True}
    for name, expected in (("playwright", PLAYWRIGHT_SEEN), ("playwright-binding", PLAYWRIGHT_BINDING_SEEN)):
        found = site.wait(name)
        assert set(detections(found)) == STILL_SEEN | expected, name


def test_the_extension_adds_nothing_to_the_page_of_a_person_s_chromium(client, service, browser, window, module_key,
                                                                       site):
    """A client task on the detectors' page, run by the extension in its window, against the same Chromium with no
    extension. The harness's chromedriver drives both (it configures the extension): its Runtime domain is turned off
    in each tab first, so what chromedriver shows is the same in both and what the extension shows is not hidden."""
    plain = ExtensionBrowser(extension=False)
    try:
        site.forget()
        plain.driver.execute_cdp_cmd("Runtime.disable", {})
        plain.driver.execute_cdp_cmd("Page.navigate", {"url": site.url("/detect?as=plain")})
        floor = site.wait("plain")
        assert floor is not None, "the detectors posted nothing back in the plain Chromium"
    finally:
        plain.quit()
    browser.driver.execute_cdp_cmd("Runtime.disable", {})
    request_id = submit(client, module_key, {"prompt": detect_steps(site, "extension"), "browserWindowId": window}
                        ).get_json()["requestId"]
    body = wait_for_status(client, module_key, request_id, timeout=180)
    assert body["status"] == "success" and body["response"]["text"] == "Detectors done", json.dumps(body)[:2000]
    found = site.wait("extension")
    assert found is not None, "the detectors posted nothing back in the extension's window"
    assert sorted(detections(found)) == sorted(detections(floor))
