"""Recordings of browser runs (rrweb): made for cloud_browser tasks, kept-session tasks and replays, served to
their owner only, without password values, played in the console with a marker per step, purged with the files; a
hostile page can neither forge nor bloat its recording, nor get a secret into it in another form."""
import base64
import gzip
import json
import os
from pathlib import Path
from urllib.parse import quote_plus

import pytest
import requests
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait
from sqlalchemy import select, update

from app.extensions import db
from app.models import TaskRecording, now_plus
from app.sandbox.box import unprivileged_chromedriver
from tests.conftest import make_key, wait_until
from tests.page_server import PageServer
from tests.processes import WebProcess, WorkerProcess
from workers import sweeps

pytestmark = pytest.mark.slow
SECRET = "Rec0rded?Never-9#pass"
SHOTS = Path(os.environ.get("SCREENSHOT_DIR", "/tmp/rd-recording-shots"))
LOGIN = """<html><head><title>Sign in</title></head><body><h1>Bank of Loopback</h1>
<form action="/home" method="get"><label for="u">Username</label> <input id="u" name="username">
<label for="p">Password</label> <input id="p" name="password" type="password">
<button id="go" type="submit">Sign in</button></form></body></html>"""
HOME = """<html><head><title>Home</title><style>.balance { color: rgb(0, 128, 0) }</style></head><body>
<h1 id="greeting">Welcome back</h1><p class="balance">Balance: 42</p><a href="/login">Sign out</a></body></html>"""
LINKS = """<html><head><title>Links</title></head><body><h1>Links</h1>
<a href="/home" target="_blank">Open the account</a></body></html>"""
STEPS = ['type "ada" into "Username"', 'type "${PASSWORD}" into "Password"', 'click "Sign in"', "extract #greeting"]


MAX_BYTES = 4 * 1024 * 1024  # the worker's RECORDING_MAX_BYTES here: a bloating page reaches it quickly


@pytest.fixture(scope="module")
def live(app):
    web = WebProcess()
    worker = WorkerProcess(name="recordings", concurrency=1, env={"RECORDING_MAX_BYTES": str(MAX_BYTES)})
    yield web
    worker.stop()
    web.stop()


@pytest.fixture(scope="module")
def pages():
    server = PageServer({"/login": LOGIN, "/home": HOME, "/links": LINKS})
    yield server
    server.close()


def api(live, key, method, path, **kwargs):
    return requests.request(method, live.base + "/fast/v2" + path, headers={"x-api-key": key}, timeout=60, **kwargs)


def run(live, key, body):
    submitted = api(live, key, "POST", "/remote-dispatch", json=body)
    assert submitted.status_code == 202, submitted.text
    request_id = submitted.json()["requestId"]
    result = wait_until(lambda: (lambda b: b if b["completedAt"] else None)(
        api(live, key, "GET", f"/remote-dispatch/responses/{request_id}").json()), "the task", timeout=180)
    assert result["status"] == "success", json.dumps(result)[:3000]
    return request_id, result


def login_task(pages, **body):
    prompt = "\n".join(["/Operator", f"go to {pages.url('/login')}", *STEPS])
    return {"prompt": prompt, "executionMode": "cloud_browser", "secretVariables": {"PASSWORD": SECRET}, **body}


def recording(live, key, request_id):
    response = api(live, key, "GET", f"/remote-dispatch/responses/{request_id}/recording")
    assert response.status_code == 200, response.text
    assert response.headers["Content-Type"] == "application/json"
    return response.json()


def stored_bytes(request_id):
    db.session.rollback()
    data = db.session.execute(select(TaskRecording.data).where(TaskRecording.task_id == request_id)).scalar_one()
    return gzip.decompress(data)


def assert_no_secret(text):
    for form in (SECRET, quote_plus(SECRET), json.dumps(SECRET)[1:-1]):
        assert form.lower() not in text.lower()


def page_texts(body):
    """Every text node and input value of the recorded pages (full snapshots, DOM changes, typing)."""
    found = []

    def walk(value):
        if isinstance(value, dict):
            for name in ("textContent", "text"):
                if isinstance(value.get(name), str):
                    found.append(value[name])
            for item in value.values():
                walk(item)
        elif isinstance(value, list):
            for item in value:
                walk(item)

    walk(body["events"])
    return found


def assert_login_recorded(body, request_id):
    assert body["requestId"] == request_id and body["format"] == "rrweb" and body["durationMs"] > 0
    types = {e["type"] for e in body["events"]}
    assert {2, 4} <= types  # a full snapshot of a page, and its meta (URL, size)
    texts = page_texts(body)
    assert any("Bank of Loopback" in t for t in texts) and any("Balance: 42" in t for t in texts)
    assert "ada" in texts  # what was typed into the username field is seen...
    actions = [m["action"] for m in body["markers"]]
    assert actions[:5] == ["go_to", "type", "type", "click", "extract"], actions
    assert [m["step"] for m in body["markers"]] == list(range(len(actions)))
    assert body["markers"] == sorted(body["markers"], key=lambda m: m["offsetMs"])


def test_a_cloud_browser_run_and_its_replay_are_recorded_for_their_owner_without_the_password(live, pages):
    owner, other = make_key("alice"), make_key("bob")
    request_id, result = run(live, owner, login_task(pages))
    assert result["response"]["text"] == "Welcome back"
    body = recording(live, owner, request_id)
    assert_login_recorded(body, request_id)
    raw = stored_bytes(request_id).decode()
    assert_no_secret(raw)  # ...the password typed into its field is not, nor the URL the form sent it in
    # The next page's URL (a GET form), redacted as the trace's is; then "pass", four characters of the secret, starred
    # wherever it is (also in "password" and the placeholder: over-masking is the safe side).
    assert "****word=${****WORD}" in raw
    # The response is compressed on the wire when the client accepts it, and plain JSON when it does not.
    plain = requests.get(live.base + f"/fast/v2/remote-dispatch/responses/{request_id}/recording",
                         headers={"x-api-key": owner, "Accept-Encoding": "identity"}, timeout=60)
    assert "Content-Encoding" not in plain.headers and json.loads(plain.content) == body

    foreign = api(live, other, "GET", f"/remote-dispatch/responses/{request_id}/recording")
    assert foreign.status_code == 404 and foreign.json()["error"] == "Request Not Found"
    unknown = api(live, owner, "GET", "/remote-dispatch/responses/no-such-task/recording")
    assert unknown.status_code == 404 and unknown.json()["error"] == "Request Not Found"
    # A task without a browser has no recording, and says so.
    general, _ = run(live, owner, {"prompt": "/Operator\nanswer nothing to see", "executionMode": "cloud"})
    missing = api(live, owner, "GET", f"/remote-dispatch/responses/{general}/recording")
    assert missing.status_code == 404 and missing.json()["error"] == "Recording Not Found"
    assert "no recording" in missing.json()["message"]

    replayed, result = run(live, owner, {"replayOf": request_id, "executionMode": "cloud_browser",
                                         "secretVariables": {"PASSWORD": SECRET}})
    assert [e["replayed"] for e in result["response"]["actionTrace"][:5]] == [True] * 5
    assert_login_recorded(recording(live, owner, replayed), replayed)
    assert_no_secret(stored_bytes(replayed).decode())

    # The files sweep deletes recordings past RECORDING_TTL_SECONDS (with the task's other files); the task stays.
    db.session.execute(update(TaskRecording).where(TaskRecording.task_id == request_id)
                       .values(created_at=now_plus(-8 * 86400)))
    db.session.commit()
    sweeps.purge_expired_files()
    gone = api(live, owner, "GET", f"/remote-dispatch/responses/{request_id}/recording")
    assert gone.status_code == 404 and gone.json()["error"] == "Recording Not Found"
    assert api(live, owner, "GET", f"/remote-dispatch/responses/{request_id}").status_code == 200
    assert recording(live, owner, replayed)["requestId"] == replayed  # a younger recording stays


def test_each_task_in_a_kept_session_has_a_recording_of_its_own(live, pages):
    owner = make_key("carol")
    created = api(live, owner, "POST", "/cloud-browser/create-and-initialize-cloud-browser-session",
                  json={"require_extension": False})
    assert created.status_code == 200, created.text
    session = created.json()
    target = {"cloudBrowserSessionId": session["session_id"], "browserWindowId": session["browser_window_id"]}
    try:
        first, _ = run(live, owner, {**login_task(pages), **target})
        assert_login_recorded(recording(live, owner, first), first)
        assert_no_secret(stored_bytes(first).decode())
        # The next task starts on the page the first left: its recording shows that page and only its own steps.
        second, result = run(live, owner, {"prompt": "/Operator\nclick \"Sign out\"\nextract h1", **target})
        assert result["response"]["text"] == "Bank of Loopback"
        body = recording(live, owner, second)
        assert [m["action"] for m in body["markers"]][:2] == ["click", "extract"]
        texts = page_texts(body)
        assert any("Balance: 42" in t for t in texts) and any("Bank of Loopback" in t for t in texts)
        assert "ada" not in texts  # nothing of the first task's typing
    finally:
        api(live, owner, "POST", "/cloud-browser/stop-cloud-browser-session", json={"session_id": session["session_id"]})


def test_a_tab_the_page_opens_is_recorded_too(live, pages):
    owner = make_key("frank")
    request_id, result = run(live, owner, {"prompt": "\n".join([
        "/Operator", f"go to {pages.url('/links')}", 'click "Open the account"', "extract .balance"]),
        "executionMode": "cloud_browser"})
    assert result["response"]["text"] == "Balance: 42"
    body = recording(live, owner, request_id)
    texts = page_texts(body)
    assert any("Open the account" in t for t in texts) and any("Balance: 42" in t for t in texts)
    assert [m["action"] for m in body["markers"]][:3] == ["go_to", "click", "extract"]


@pytest.fixture(scope="module")
def viewer():
    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for arg in ("--headless=new", "--disable-dev-shm-usage", "--disable-gpu", "--window-size=1280,1000",
                "--disable-extensions", "--no-first-run"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(unprivileged_chromedriver()), options=options)
    driver.set_page_load_timeout(30)
    yield driver
    driver.quit()


def sign_in(viewer, live, key):
    viewer.get(live.base + "/console/signin")
    viewer.delete_all_cookies()
    viewer.get(live.base + "/console/signin")
    viewer.find_element(By.ID, "api_key").send_keys(key)
    viewer.find_element(By.CSS_SELECTOR, "form button[type=submit]").click()
    WebDriverWait(viewer, 30).until(lambda d: d.current_url.split("?")[0].endswith("/console/tasks"))


def test_the_console_plays_the_recording_with_a_marker_per_step(live, pages, viewer):
    raw_key = make_key("dave")
    request_id, result = run(live, raw_key, login_task(pages))
    steps = [e for e in result["response"]["actionTrace"] if e.get("startTs")]
    sign_in(viewer, live, raw_key)
    viewer.get(f"{live.base}/console/tasks/{request_id}")
    frame = viewer.find_element(By.CSS_SELECTOR, "#recording-box iframe#recording")
    viewer.execute_script("arguments[0].scrollIntoView()", frame)
    viewer.switch_to.frame(frame)
    try:
        WebDriverWait(viewer, 30).until(lambda d: d.execute_script("return document.body.dataset.player") is not None)
        assert viewer.execute_script("return document.body.dataset.player") == "ready", \
            viewer.find_element(By.ID, "player").text
        markers = viewer.find_elements(By.CSS_SELECTOR, "#markers .marker")
        assert len(markers) == len(steps)
        assert markers[0].text.startswith("1. go to") and "Sign in" in markers[3].text
        offsets = [int(m.get_attribute("data-offset")) for m in markers]
        assert offsets == sorted(offsets) and offsets[-1] > 0
        # The player's bar carries a mark per step the page recorded (rrweb custom events, tagged "step").
        bar_marks = viewer.execute_script(
            "return document.querySelectorAll('.rr-progress [title=\"step\"]').length")
        assert bar_marks >= 5
        # A step's marker moves the player to it: after "click Sign in" the replayed page is the home page.
        markers[4].click()

        def replayed_text():
            return viewer.execute_script(
                "var f = document.querySelector('.replayer-wrapper iframe');"
                "return f && f.contentDocument && f.contentDocument.body ? f.contentDocument.body.textContent : ''")

        WebDriverWait(viewer, 20).until(lambda d: "Balance: 42" in replayed_text())
        SHOTS.mkdir(parents=True, exist_ok=True)
        viewer.switch_to.default_content()
        viewer.save_screenshot(str(SHOTS / "task-recording-home.png"))
        viewer.switch_to.frame(viewer.find_element(By.CSS_SELECTOR, "iframe#recording"))
        viewer.find_elements(By.CSS_SELECTOR, "#markers .marker")[1].click()
        WebDriverWait(viewer, 20).until(lambda d: "Bank of Loopback" in replayed_text())
        assert SECRET not in viewer.execute_script(
            "var f = document.querySelector('.replayer-wrapper iframe'); return f.contentDocument.documentElement.outerHTML")
        viewer.switch_to.default_content()
        viewer.save_screenshot(str(SHOTS / "task-recording-login.png"))
    finally:
        viewer.switch_to.default_content()
    # Another key's console session gets no recording of it.
    other = make_key("erin")
    sign_in(viewer, live, other)
    viewer.get(f"{live.base}/console/tasks/{request_id}/recording.json")
    assert "Request Not Found" in viewer.page_source and "rrweb" not in viewer.page_source


def test_a_run_resumed_after_a_question_adds_to_its_recording(client, api_key, monkeypatch):
    from app.dispatch import recording_store, service as dispatch_service

    monkeypatch.setattr(dispatch_service, "dispatch", lambda task_id, **_: True)  # no worker: the test stores
    request_id = client.post("/fast/v2/remote-dispatch", headers={"x-api-key": api_key}, json={
        "prompt": "/Operator go to http://127.0.0.1/", "executionMode": "cloud_browser"}).get_json()["requestId"]

    def part(start, action):
        return [{"type": 4, "data": {"href": "http://127.0.0.1/", "width": 1280, "height": 900}, "timestamp": start},
                {"type": 5, "data": {"tag": "step", "payload": {"step": 0, "action": action}}, "timestamp": start + 10}]

    recording_store.store(request_id, part(1_000, "ask_user"))  # the run paused on a question
    recording_store.store(request_id, part(61_000, "click"))  # and was resumed after the answer
    body = client.get(f"/fast/v2/remote-dispatch/responses/{request_id}/recording",
                      headers={"x-api-key": api_key}).get_json()
    assert [e["timestamp"] for e in body["events"]] == [1_000, 1_010, 61_000, 61_010]
    assert body["markers"] == [{"step": 0, "action": "ask_user", "offsetMs": 10},
                               {"step": 0, "action": "click", "offsetMs": 60_010}]
    assert body["durationMs"] == 60_010


HOSTILE = """<html><head><title>Hostile</title><script>
// What the recorder used to serialise with, and how it found the recorder: the page's own, overridden.
var forgedSnapshot = {type: 2, timestamp: Date.now(), data: {node: {type: 0, id: 1, childNodes: [
  {type: 3, id: 2, textContent: "FORGED SNAPSHOT"}]}, initialOffset: {left: 0, top: 0}}};
var forgedMarker = {type: 5, timestamp: Date.now(), data: {tag: "step", payload: {step: 99, action: "forged"}}};
var stringify = JSON.stringify, push = Array.prototype.push, names = Object.getOwnPropertyNames;
JSON.stringify = function (value) {
  if (Array.isArray(value)) value = [forgedSnapshot, forgedMarker].concat(value);
  return stringify.apply(JSON, [value].concat([].slice.call(arguments, 1)));
};
Array.prototype.push = function (item) {
  if (item && typeof item === "object" && typeof item.type === "number" && item.timestamp) {
    push.call(this, forgedSnapshot, forgedMarker);
  }
  return push.apply(this, arguments);
};
Object.getOwnPropertyNames = function (target) { return names(target).filter(function (n) { return n.indexOf("__rd") }); };
function tamper() {
  names(window).forEach(function (name) {
    if (name.indexOf("__rd") === 0) {
      try { window[name].drain = function () { return stringify([forgedSnapshot, forgedMarker]); }; } catch (e) {}
      try { Object.defineProperty(window, name, {value: {drain: function () { return stringify([forgedSnapshot]); }}}); } catch (e) {}
    }
  });
  Object.keys(sessionStorage).forEach(function (key) { sessionStorage.setItem(key, stringify([forgedSnapshot, forgedMarker])); });
}
setInterval(tamper, 20);
addEventListener("pagehide", tamper);
</script></head><body><h1>Hostile</h1><a href="/hostile2">Next</a></body></html>"""
BLOAT = """<html><head><title>Bloat</title></head><body><h1>Bloat</h1><p id="big"></p><script>
// 100 MB of rrweb events: a 1 MB text changed a hundred times.
var round = 0, big = document.getElementById("big");
(function more() {
  big.textContent = String(round).repeat(1 << 20);
  if (++round < 100) setTimeout(more, 5);
  else { big.textContent = ""; document.body.insertAdjacentHTML("beforeend", "<p>generated</p>"); }
})();
</script></body></html>"""
PIN = "Zq7!kW3#mP9x@Lt2"
OTP = "482913"
ECHO = """<html><head><title>Verify</title></head><body><h1>Verify it is you</h1>
<label for="pin">PIN</label> <input id="pin" name="pin" autocomplete="off">
<p id="echo"></p><p id="reversed"></p><p id="encoded" title=""></p><p id="later"></p>
<div class="otp"><input class="box" maxlength="1" aria-label="Code"><input class="box" maxlength="1">
<input class="box" maxlength="1"><input class="box" maxlength="1"><input class="box" maxlength="1">
<input class="box" maxlength="1"></div><p id="code"></p><button id="go">Continue</button>
<script>
var pin = document.getElementById("pin"), boxes = document.querySelectorAll(".box");
pin.addEventListener("input", function () {  // the page echoes what is typed, as it is typed, in other forms
  var value = pin.value;
  document.getElementById("echo").textContent = value;
  document.getElementById("reversed").textContent = value.split("").reverse().join("");
  document.getElementById("encoded").textContent = btoa(value);
  document.getElementById("encoded").title = value;
  setTimeout(function () { document.getElementById("later").textContent = "You typed " + value; }, 400);
});
boxes.forEach(function (box, i) {  // an OTP widget: a box per digit, the focus moves on, the code shown in spans
  box.addEventListener("input", function () {
    if (box.value && boxes[i + 1]) boxes[i + 1].focus();
    setTimeout(function () {
      document.getElementById("code").innerHTML = Array.prototype.map.call(boxes, function (b) {
        return "<span>" + b.value + "</span>"; }).join("");
    }, 400);
  });
});
</script></body></html>"""


@pytest.fixture(scope="module")
def hostile_pages():
    server = PageServer({"/hostile": HOSTILE, "/hostile2": HOSTILE.replace("<h1>Hostile", "<h1>Second"),
                         "/bloat": BLOAT, "/verify": ECHO})
    yield server
    server.close()


def strings(value):
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from strings(item)


def test_a_hostile_page_cannot_forge_its_recording(live, hostile_pages):
    owner = make_key("mallory")
    request_id, _ = run(live, owner, {"prompt": "\n".join([
        "/Operator", f"go to {hostile_pages.url('/hostile')}", 'click "Next"', "extract h1"]),
        "executionMode": "cloud_browser"})
    body = recording(live, owner, request_id)
    raw = stored_bytes(request_id).decode()
    assert "FORGED SNAPSHOT" not in raw and "forged" not in raw
    # The markers are the worker's: one per action, in order, and no other custom event.
    markers = [(m["step"], m["action"]) for m in body["markers"]]
    assert markers == [(0, "go_to"), (1, "click"), (2, "extract"), (3, "answer")], markers
    assert [e["data"]["tag"] for e in body["events"] if e["type"] == 5] == ["step"] * 4
    assert body["truncated"] is False
    texts = page_texts(body)  # and the pages themselves are recorded
    assert any("Hostile" in t for t in texts) and any("Second" in t for t in texts)


def test_a_page_that_makes_100_mb_of_events_ends_its_recording_at_the_cap(live, hostile_pages):
    owner = make_key("oscar")
    request_id, result = run(live, owner, {"prompt": "\n".join([
        "/Operator", f"go to {hostile_pages.url('/bloat')}", 'wait for "generated"', "extract h1"]),
        "executionMode": "cloud_browser"})
    assert result["response"]["text"] == "Bloat"  # the run itself goes on
    body = recording(live, owner, request_id)
    assert body["truncated"] is True  # the recording says it ends early...
    assert [e["data"]["payload"] for e in body["events"] if e["type"] == 5 and e["data"]["tag"] == "truncated"] \
        == [{"maxBytes": MAX_BYTES}]
    assert len(stored_bytes(request_id)) <= MAX_BYTES + 64 * 1024  # ...and holds no more than the cap
    assert body["markers"][0]["action"] == "go_to"


def test_a_secret_echoed_by_the_page_in_other_forms_is_not_in_the_recording(live, hostile_pages):
    owner = make_key("peggy")
    request_id, result = run(live, owner, {"prompt": "\n".join([
        "/Operator", f"go to {hostile_pages.url('/verify')}", 'type "${PIN}" into "PIN"',
        'type "${CODE}" into "Code"', 'wait for "You typed"', 'click "Continue"', "extract h1"]),
        "executionMode": "cloud_browser", "secretVariables": {"PIN": PIN, "CODE": OTP}})
    assert result["response"]["text"] == "Verify it is you"
    body = recording(live, owner, request_id)
    texts = list(strings(body["events"]))
    assert any("Verify it is you" in t for t in texts)
    forms = [PIN, PIN[::-1], base64.b64encode(PIN.encode()).decode(), OTP]
    for form in forms:  # no four consecutive characters of the PIN, its reversal, its base64, the code
        for start in range(len(form) - 3):
            piece = form[start:start + 4].lower()
            assert not [t for t in texts if piece in t.lower()], (form, piece)
    # The code typed into six boxes is not there one digit per box either, nor any digit of it in the boxes' values.
    inputs = [e["data"]["text"] for e in body["events"] if e["type"] == 3 and e["data"].get("source") == 5]
    assert inputs and not any(ch.isdigit() for text in inputs for ch in text), inputs
    assert "".join(t for t in texts if len(t) == 1 and t.isdigit()).find(OTP[:3]) < 0
