"""browserSettings: the identity a caller chooses for a cloud_browser task or a kept session. Real tasks load the
identity report page (tests/identity_pages.py) and every value the page, its iframe, its worker and the request
headers show agrees with the settings; a combination that cannot be consistent is a 400 saying why
(docs/browser-identity.md, "Choosing the identity")."""
import pytest
import requests

from tests.conftest import submit, wait_until
from tests.identity_pages import STILL_SEEN, detections
from tests.processes import web_and_worker
from tests.test_browser_identity import site  # noqa: F401 (the loopback site with the detectors)

pytestmark = pytest.mark.slow

PARIS = {"latitude": 48.8584, "longitude": 2.2945, "accuracy": 15}
# What fpscanner still sees of a phone: a dedicated worker's navigator.platform is the machine's
# (Linux x86_64), which no CDP override of a tab reaches (docs/browser-identity.md).
PHONE_STILL_SEEN = STILL_SEEN | {"fpscanner.hasMismatchPlatformWorker"}


@pytest.fixture(scope="module")
def service(app):
    with web_and_worker("settings") as (web, _):
        yield web


def _api(service, key, method, path, **kwargs):
    reply = requests.request(method, f"{service.base}/fast/v2{path}", headers={"x-api-key": key}, timeout=180,
                             **kwargs)
    assert reply.status_code < 300, reply.text
    return reply.json()


def _look(service, key, site, page, **body):
    """A task that opens `page` of the site and waits until it has posted what it saw: (found, request headers)."""
    site.forget()
    done = "Report done" if page == "report" else "Detectors done"
    prompt = f'/Operator\ngo to {site.url("/" + page)}\nwait for "{done}"'
    request_id = _api(service, key, "POST", "/remote-dispatch", json={"prompt": prompt, **body})["requestId"]
    finished = wait_until(lambda: (lambda b: b if b["completedAt"] else None)(
        _api(service, key, "GET", f"/remote-dispatch/responses/{request_id}")), "the task", timeout=180)
    assert finished["status"] == "success", finished
    found = site.wait(page)
    assert found is not None, f"the {page} page posted nothing back"
    return found, site.headers.get("/" + page)


def _agrees(found, wire, *, mobile, screen, viewport, ratio, touch, languages, zone, place, dark):
    """Every value the page, its iframe and its worker report, and the request headers, tell one device's story."""
    page, frame, worker = found["page"], found["iframe"], found["worker"]
    for seen in (page, frame, worker):
        assert seen["userAgent"] == wire["user-agent"] and seen["appVersion"] == wire["user-agent"][len("Mozilla/"):]
        assert ("Android" in seen["userAgent"] and "Mobile Safari" in seen["userAgent"]) is mobile
        assert seen["mobile"] is mobile and seen["high"]["mobile"] is mobile
        assert seen["uaPlatform"] == seen["high"]["platform"] == ("Android" if mobile else "Linux")
        assert seen["languages"] == languages and seen["locale"] == languages[0]
        assert seen["timeZone"] == zone
        assert seen["geolocationPermission"] == ("granted" if place else "denied")
        assert "headless" not in seen["userAgent"].lower()
    assert wire["sec-ch-ua-mobile"] == ("?1" if mobile else "?0")
    assert wire["sec-ch-ua-platform"] == ('"Android"' if mobile else '"Linux"')
    assert wire["accept-language"].split(",")[0] == languages[0]
    assert [part.split(";")[0] for part in wire["accept-language"].split(",")] == languages
    for seen in (page, frame):  # what only a document has
        assert seen["platform"] == ("Linux armv81" if mobile else "Linux x86_64")
        assert (seen["screen"]["width"], seen["screen"]["height"]) == screen
        assert seen["window"]["devicePixelRatio"] == ratio
        assert seen["maxTouchPoints"] == touch and seen["touch"] is bool(touch)
        assert seen["dark"] is dark
    assert (page["window"]["innerWidth"], page["window"]["innerHeight"]) == viewport
    if mobile:
        assert page["high"]["model"] and page["high"]["platformVersion"]
        assert page["screen"]["availWidth"] == screen[0]
    else:
        assert page["screen"]["availHeight"] < screen[1] and page["window"]["outerWidth"] <= screen[0]
    if place:
        assert (found["geolocation"]["latitude"], found["geolocation"]["longitude"]) == (place["latitude"],
                                                                                       place["longitude"])
    else:
        assert found["geolocation"] == {"error": 1}  # PERMISSION_DENIED: no page learns where the browser is


def test_a_phone_task_shows_one_phone_in_the_page_its_frame_its_worker_and_on_the_wire(service, api_key, site):
    settings = {"device": "pixel-7", "locale": "fr-fr", "geolocation": PARIS, "colorScheme": "dark"}
    found, wire = _look(service, api_key, site, "report", executionMode="cloud_browser", timeZone="Asia/Tokyo",
                        browserSettings=settings)
    _agrees(found, wire, mobile=True, screen=(412, 915), viewport=(412, 839), ratio=2.625, touch=5,
            languages=["fr-FR", "fr"], zone="Asia/Tokyo", place=PARIS, dark=True)
    found, _ = _look(service, api_key, site, "detect", executionMode="cloud_browser", browserSettings=settings)
    assert set(detections(found)) == PHONE_STILL_SEEN
    assert found["botd"] == {"bot": False}


def test_a_desktop_of_the_callers_size_and_only_a_colour_scheme(service, api_key, site):
    found, wire = _look(service, api_key, site, "report", executionMode="cloud_browser", browserSettings={
        "device": "laptop-1366", "viewport": {"width": 1200, "height": 560}, "locale": "de-DE",
        "timeZone": "Europe/Berlin"})
    _agrees(found, wire, mobile=False, screen=(1366, 768), viewport=(1200, 560), ratio=1, touch=0,
            languages=["de-DE", "de"], zone="Europe/Berlin", place=None, dark=False)
    # Settings CDP sets per tab need no browser of their own (a pooled one takes them): the default identity else.
    found, wire = _look(service, api_key, site, "report", executionMode="cloud_browser",
                        browserSettings={"colorScheme": "dark", "geolocation": PARIS})
    _agrees(found, wire, mobile=False, screen=(1920, 1080), viewport=(1280, 757), ratio=1, touch=0,
            languages=["en-US", "en"], zone="America/Los_Angeles", place=PARIS, dark=True)
    found, _ = _look(service, api_key, site, "detect", executionMode="cloud_browser",
                     browserSettings={"device": "desktop-1440p", "locale": "ja-JP"})
    assert set(detections(found)) == STILL_SEEN


def test_a_kept_session_keeps_its_settings_for_every_task(service, api_key, site):
    session = _api(service, api_key, "POST", "/cloud-browser/create-and-initialize-cloud-browser-session",
                   json={"require_extension": False, "browserSettings": {
                       "device": "galaxy-s23", "locale": "pt-BR", "timeZone": "America/Sao_Paulo",
                       "colorScheme": "dark"}})
    try:
        for _ in range(2):  # its first tab (set at its launch), then a task's on the same browser
            found, wire = _look(service, api_key, site, "report", cloudBrowserSessionId=session["session_id"])
            _agrees(found, wire, mobile=True, screen=(360, 780), viewport=(360, 708), ratio=3, touch=5,
                    languages=["pt-BR", "pt"], zone="America/Sao_Paulo", place=None, dark=True)
    finally:
        _api(service, api_key, "POST", "/cloud-browser/stop-cloud-browser-session",
             json={"session_id": session["session_id"]})


BROWSER_TASK = {"prompt": "/Operator\ngo to http://127.0.0.1:9/", "executionMode": "cloud_browser"}
REFUSED = [
    ({"device": "iphone-99"}, "unknown device 'iphone-99'"),
    ({"device": "pixel-7", "screen": {"width": 1920, "height": 1080}}, "a phone's screen is not a setting"),
    ({"device": "pixel-7", "viewport": {"width": 800, "height": 600}}, "does not fit the screen of 'pixel-7'"),
    ({"viewport": {"width": 1920, "height": 1080}}, "does not fit the screen (1920x1080)"),
    ({"screen": {"width": 1024, "height": 768}}, "smaller than the 1280x900 window"),
    ({"geolocation": {"latitude": 48.8}}, "longitude"),
    ({"geolocation": {"latitude": 91, "longitude": 2}}, "latitude"),
    ({"locale": "english"}, "not a BCP 47 language tag"),
    ({"locale": "en-US-x-private"}, "not a BCP 47 language tag"),
    ({"colorScheme": "blue"}, "colorScheme"),
    ({"timeZone": "Mars/Olympus"}, "not an IANA time zone"),
    ({"viewport": {"width": 10, "height": 600}}, "viewport"),
]


@pytest.mark.parametrize("settings,why", REFUSED)
def test_a_combination_that_cannot_be_one_browser_is_a_400_saying_why(client, api_key, settings, why):
    for reply in (submit(client, api_key, {**BROWSER_TASK, "browserSettings": settings}),
                  client.post("/fast/v2/cloud-browser/create-and-initialize-cloud-browser-session",
                              headers={"x-api-key": api_key}, json={"browser_settings": settings})):
        assert reply.status_code == 400, reply.get_json()
        body = reply.get_json()
        assert body["error"] and why in body["message"] and "rowser" in body["message"], body


@pytest.mark.parametrize("body,why", [
    ({"executionMode": "cloud"}, "'cloud' reads pages without a browser"),
    ({"executionMode": "client", "browserWindowId": "w1"}, "'client' runs in the caller's own browser"),
    ({"cloudBrowserSessionId": "cbs_x"}, "browser_settings on create-and-initialize-cloud-browser-session"),
    ({"timeZone": "Europe/Paris"}, "give the time zone once"),
])
def test_browser_settings_outside_a_browser_of_ours_or_twice_a_zone_is_a_400(client, api_key, body, why):
    reply = submit(client, api_key, {**BROWSER_TASK, **body, "browserSettings": {"colorScheme": "dark",
                                                                                 "timeZone": "Asia/Tokyo"}})
    assert reply.status_code == 400, reply.get_json()
    assert why in reply.get_json()["message"], reply.get_json()


def test_the_same_zone_twice_and_a_canonical_locale_are_taken_as_given(client, api_key):
    reply = submit(client, api_key, {**BROWSER_TASK, "timeZone": "Asia/Tokyo", "browserSettings": {
        "timeZone": "Asia/Tokyo", "locale": "zh-hant-tw", "device": None}})
    assert reply.status_code == 202, reply.get_json()
    from app.extensions import db
    from app.models import Task
    task = db.session.get(Task, reply.get_json()["requestId"])
    assert task.options["timeZone"] == "Asia/Tokyo"
    assert task.options["browserSettings"] == {"timeZone": "Asia/Tokyo", "locale": "zh-Hant-TW"}
