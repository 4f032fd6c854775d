"""What a site sees of our browsers: BotD 2.0.0 and fpscanner 1.0.2 (`make detectors`) run in the page, and a page,
an iframe and a worker that report what they see, with the request headers as the loopback server received them
(docs/browser-identity.md)."""
import json
import os

import pytest

from tests.identity_pages import DETECTORS, STILL_SEEN, IdentityServer, detections
from workers.browser.egress import BrowserEgressProxy
from workers.browser.launch import browsers_dir
from workers.browser.selenium_driver import SeleniumBrowser

pytestmark = pytest.mark.slow

@pytest.fixture(scope="module")
def site():
    """The loopback site with the detectors (tests/identity_pages.py)."""
    if not os.path.exists(os.path.join(DETECTORS, "botd.esm.js")):
        pytest.fail("BotD and fpscanner are not installed: run `make detectors` (make test does)")
    server = IdentityServer()
    yield server
    server.close()


@pytest.fixture(scope="module")
def browser(site):
    """A cloud_browser task's browser as workers/agent/browser_modes.py starts it cold: DevTools on, its time zone."""
    with BrowserEgressProxy({"VAR_DIR": os.environ["VAR_DIR"], "ALLOW_PRIVATE_URLS": True}, "identity-test") as proxy:
        browser = SeleniumBrowser(label="identity-test", profile_root=browsers_dir(os.environ["VAR_DIR"]),
                                  time_zone="Europe/Paris", proxy=proxy.address, devtools=True)
        yield browser
        browser.close()


def look(browser, site, page):
    site.forget()
    browser.open(site.url(f"/{page}"))
    found = site.wait(page)
    assert found is not None, f"the {page} page posted nothing back"
    return found


def test_the_detectors_find_no_automation_but_what_is_documented(browser, site):
    found = look(browser, site, "detect")
    assert set(detections(found)) == STILL_SEEN
    assert found["botd"] == {"bot": False}
    # And after the agent has acted on the page (page.js calls in its isolated world), nothing more.
    browser.read()
    browser.click("h1")
    found = look(browser, site, "detect")
    assert set(detections(found)) == STILL_SEEN


def test_a_tab_the_page_opens_shows_nothing_either(browser, site):
    look(browser, site, "opener")
    browser.click("a")  # target=_blank: the driver follows the new tab
    assert len(browser.tabs()) == 2
    found = look(browser, site, "detect")  # in the new tab, once the driver has attached to it
    assert set(detections(found)) == STILL_SEEN
    browser.close_tab()


def test_the_page_an_iframe_a_worker_and_the_wire_tell_one_story(browser, site):
    found = look(browser, site, "report")
    page, frame, worker = found["page"], found["iframe"], found["worker"]
    wire = site.headers["/report"]
    everything = json.dumps(found) + json.dumps(site.headers)
    assert "headless" not in everything.lower()
    for key in ("userAgent", "appVersion", "platform", "languages", "hardwareConcurrency", "deviceMemory",
                "brands", "uaPlatform", "high", "timeZone", "webglVendor", "webglRenderer"):
        assert page[key] == frame[key] == worker[key], key
    assert page["webdriver"] is False and frame["webdriver"] is False
    assert page["userAgent"].startswith("Mozilla/5.0 (X11; Linux x86_64)") and "Chrome/" in page["userAgent"]
    assert page["appVersion"] == page["userAgent"][len("Mozilla/"):]
    assert wire["user-agent"] == page["userAgent"]
    assert "via" not in wire and "x-forwarded-for" not in wire  # the egress proxy does not announce itself
    major = page["userAgent"].split("Chrome/")[1].split(".")[0]
    assert {"brand": "Chromium", "version": major} in page["brands"]
    assert wire["sec-ch-ua"] == ", ".join(f'"{b["brand"]}";v="{b["version"]}"' for b in page["brands"])
    assert wire["sec-ch-ua-platform"] == f'"{page["uaPlatform"]}"' == '"Linux"'
    assert wire["sec-ch-ua-mobile"] == "?0" and page["mobile"] is False
    # The high-entropy hints of a desktop Chromium (a --user-agent flag alone leaves them empty), in the page and,
    # once the site asked for them (Accept-CH), on the wire.
    high = page["high"]
    assert (high["architecture"], high["bitness"], high["platform"], high["mobile"]) == ("x86", "64", "Linux", False)
    assert high["uaFullVersion"].startswith(f"{major}.") and high["brands"] == page["brands"]
    assert [b["brand"] for b in high["fullVersionList"]] == [b["brand"] for b in page["brands"]]
    posted = site.headers["POST report"]
    assert posted["sec-ch-ua-arch"] == '"x86"' and posted["sec-ch-ua-bitness"] == '"64"'
    assert posted["sec-ch-ua-full-version-list"] == ", ".join(
        f'"{b["brand"]}";v="{b["version"]}"' for b in high["fullVersionList"])
    assert wire["accept-language"].split(",")[0] == page["languages"][0] == page["language"]
    assert [part.split(";")[0] for part in wire["accept-language"].split(",")] == page["languages"]
    # No page learns where the browser is (browserSettings.geolocation chooses a place: tests/test_browser_settings.py).
    assert page["geolocationPermission"] == "denied" and found["geolocation"] == {"error": 1}
    assert page["timeZone"] == "Europe/Paris"
    # A desktop's screen, a taskbar off its available height, a window smaller than the screen.
    screen, window = page["screen"], page["window"]
    assert (screen["width"], screen["height"]) == (1920, 1080)
    assert screen["availWidth"] == 1920 and screen["availHeight"] < 1080
    assert 0 < window["outerWidth"] < screen["width"] and 0 < window["outerHeight"] < screen["height"]
    assert window["innerWidth"] <= window["outerWidth"] and window["innerHeight"] < window["outerHeight"]
    assert page["chrome"] is True and page["plugins"] == 5 and page["mimeTypes"] == 2
    # Nothing of chromedriver's or ours on the page's window or document.
    ours = [name for name in page["windowKeys"] + page["documentKeys"]
            if name.startswith(("cdc_", "$cdc_", "__webdriver", "__selenium", "__pw", "__rd", "rrweb"))]
    assert ours == []
