"""Live view and takeover: a running cloud_browser task and a kept session watched through our viewer (its
WebSocket, and its page in a real Chromium), a person taking control and handing it back, the agent asking for
one, and everything a viewer must not get or do."""
import base64
import io
import json
import threading
import time

import pytest
import requests
import websocket
from PIL import Image
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

from app.live import service as live_service
from app.sandbox.box import unprivileged_chromedriver
from tests.conftest import WorkerProcess, poll, submit, wait_for_status, wait_until
from tests.llm_server import ScriptedModel, tool_call
from tests.page_server import PageServer
from tests.processes import WebProcess

pytestmark = pytest.mark.slow
BROWSER = {"executionMode": "cloud_browser"}
# Fixed places, so a viewer's click lands on them: the field at (100..300, 100..130), the button at (100..220,
# 200..240), in the page's own CSS pixels.
FORM = """<html><head><title>Greeting</title><style>body{margin:0} #name{position:absolute;left:100px;top:100px;
width:200px;height:30px} #go{position:absolute;left:100px;top:200px;width:120px;height:40px}
#greeting{position:absolute;left:100px;top:300px}</style></head><body>
<input id="name" aria-label="Name"><button id="go">Greet</button><p id="greeting">nobody yet</p>
<script>document.getElementById("go").onclick = function () {
  document.getElementById("greeting").textContent = "Thanks " + document.getElementById("name").value; };</script>
</body></html>"""
LOGIN = """<html><head><title>Sign in</title><style>body{margin:0} #code{position:absolute;left:100px;top:100px;
width:200px;height:30px} #go{position:absolute;left:100px;top:200px;width:120px;height:40px}</style></head><body>
<input id="code" type="password" aria-label="One-time code"><button id="go">Verify</button>
<script>document.getElementById("go").onclick = function () {
  if (document.getElementById("code").value.length === 7) { location.href = "/inside"; } };</script>
</body></html>"""
INSIDE = "<html><head><title>Inside</title></head><body><h1>Welcome inside</h1></body></html>"
CODE = "739-215"
FIELD, BUTTON = (150, 115), (150, 220)


@pytest.fixture(scope="module")
def pages():
    server = PageServer({"/form": FORM, "/login": LOGIN, "/inside": INSIDE})
    yield server
    server.close()


@pytest.fixture(scope="module")
def model():
    return ScriptedModel()


@pytest.fixture(scope="module")
def stack(app, model):
    """gunicorn (which serves the viewer) and a tasks worker: different processes, as in production. The worker
    has a (scripted) model; prompts made only of built-in steps still run on the built-in planner."""
    web = WebProcess()
    worker = WorkerProcess(queues="tasks", concurrency=2, env=model.env(PUBLIC_URL=web.base), name="live")
    yield web
    worker.stop()
    web.stop()


@pytest.fixture(scope="module")
def chromium():
    """A real browser for the viewer page (as a person would open the liveUrl)."""
    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for arg in ("--headless=new", "--disable-dev-shm-usage", "--disable-gpu", "--window-size=1500,1300",
                "--no-first-run"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(unprivileged_chromedriver()), options=options)
    driver.set_page_load_timeout(30)
    yield driver
    driver.quit()


class Viewer:
    """A viewer's WebSocket, as the viewer page opens it: every message it receives is kept."""

    def __init__(self, live_url):
        self.ws = websocket.create_connection(live_url.replace("http", "ws", 1) + "/socket", timeout=10)
        self.messages, self.closed = [], None
        self._lock = threading.Lock()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        try:
            while True:
                opcode, data = self.ws.recv_data()
                if opcode == websocket.ABNF.OPCODE_CLOSE:
                    self.closed = int.from_bytes(data[:2], "big") if len(data) >= 2 else 1005
                    return
                with self._lock:
                    self.messages.append(json.loads(data))
        except (websocket.WebSocketException, OSError, ValueError):
            self.closed = self.closed or -1

    def of(self, kind):
        with self._lock:
            return [m for m in self.messages if m["type"] == kind]

    def send(self, message):
        self.ws.send(message if isinstance(message, str) else json.dumps(message))

    def error_after(self, message):
        before = len(self.of("error"))
        self.send(message)
        return wait_until(lambda: self.of("error")[before:] and self.of("error")[before]["message"],
                          what="the viewer's refusal")

    def control(self):
        states = self.of("state")
        return states[-1]["control"] if states else None

    def click(self, point):
        for event in ("down", "up"):
            self.send({"type": "mouse", "event": event, "x": point[0], "y": point[1], "button": "left",
                       "clickCount": 1})

    def close(self):
        self.ws.close()


def live_url(web, key, path, mode=None):
    reply = requests.get(f"{web.base}/fast/v2/{path}/live", params={"mode": mode} if mode else None,
                         headers={"x-api-key": key}, timeout=10)
    return reply


def frame_image(frame):
    return Image.open(io.BytesIO(base64.b64decode(frame["data"])))


def running(client, key, request_id):
    """Once the task's browser is up (the worker publishes where it is), its request id."""
    wait_until(lambda: (live_service.state.read(request_id) or {})
               .get("targetId"), what="the task's browser to start", timeout=60)
    return request_id


def waits(n):
    """n short waits, each a different step (the same step again and again would be no progress)."""
    return [f"wait 0.{300 + i}" for i in range(n)]


def test_control_viewer_takes_over_clicks_and_types_then_hands_back(client, api_key, pages, stack):
    prompt = "\n".join(["/Operator", f"go to {pages.url('/form')}", *waits(40), "extract #greeting"])
    request_id = submit(client, api_key, {**BROWSER, "prompt": prompt}).get_json()["requestId"]
    running(client, api_key, request_id)
    reply = live_url(stack, api_key, f"remote-dispatch/responses/{request_id}", "control")
    assert reply.status_code == 200, reply.text
    body = reply.json()
    assert body["mode"] == "control" and body["liveUrl"].startswith(stack.base + "/live/") and body["expiresAt"]
    viewer = Viewer(body["liveUrl"])
    try:
        frame = wait_until(lambda: viewer.of("frame") and viewer.of("frame")[-1], what="a frame")
        image = frame_image(frame)
        # The page at the browser's real size (its viewport: the 1280x900 window less the browser's own bars).
        assert image.format == "JPEG" and (image.width, image.height) == (frame["width"], frame["height"])
        assert image.width == 1280 and 600 < image.height <= 900
        assert wait_until(lambda: viewer.of("state") and viewer.of("state")[-1]["url"] == pages.url("/form"),
                          what="the agent's URL in the viewer")
        assert viewer.control() == "agent"
        viewer.click(FIELD)  # the agent drives: a person's input waits for "take"
        assert "take control first" in wait_until(lambda: viewer.of("error") and viewer.of("error")[-1]["message"],
                                                  what="a refusal")
        viewer.send({"type": "take"})
        wait_until(lambda: viewer.control() == "person", what="the agent to pause", timeout=30)
        paused_at = len(poll(client, api_key, request_id).get_json()["progress"]["actionTrace"])
        frames = len(viewer.of("frame"))
        viewer.click(FIELD)
        viewer.send({"type": "text", "text": "ada"})
        viewer.click(BUTTON)
        # The page changed under the person's hands: a new frame shows it.
        wait_until(lambda: len(viewer.of("frame")) > frames, what="a frame of the changed page")
        time.sleep(1)  # the agent would have run three more waits by now, were it not paused
        assert len(poll(client, api_key, request_id).get_json()["progress"]["actionTrace"]) == paused_at
        viewer.send({"type": "handback"})
        done = wait_for_status(client, api_key, request_id, timeout=90)
    finally:
        viewer.close()
    assert done["status"] == "success", done
    assert done["response"]["text"] == "Thanks ada"  # read afresh after the person's hand-back
    trace = done["response"]["actionTrace"]
    held = [e for e in trace if "takeover" in e]
    assert len(held) == 1 and held[0]["takeover"] == {"by": "alice", "events": 3}
    assert held[0]["durationMs"] > 0 and held[0]["action"].startswith("alice had control of the browser")
    person = [e["action"] for e in trace if e.get("by") == "alice"]
    assert person == [f"alice: clicked at ({FIELD[0]}, {FIELD[1]})", "alice: typed text", f"alice: clicked at ({BUTTON[0]}, {BUTTON[1]})"]
    assert "ada" not in json.dumps(person)  # what a person types is never traced
    # Finished: no live view any more.
    assert live_url(stack, api_key, f"remote-dispatch/responses/{request_id}").status_code == 409


def test_view_viewer_input_is_refused_and_malformed_messages_too(client, api_key, pages, stack):
    prompt = "\n".join(["/Operator", f"go to {pages.url('/form')}", *waits(60), "answer done"])
    request_id = submit(client, api_key, {**BROWSER, "prompt": prompt}).get_json()["requestId"]
    running(client, api_key, request_id)
    watcher = Viewer(live_url(stack, api_key, f"remote-dispatch/responses/{request_id}").json()["liveUrl"])
    controller = Viewer(live_url(stack, api_key, f"remote-dispatch/responses/{request_id}", "control").json()["liveUrl"])
    try:
        wait_until(lambda: watcher.of("frame") and controller.of("frame"), what="frames for both viewers")
        for message in ({"type": "take"}, {"type": "mouse", "event": "down", "x": 10, "y": 10}, {"type": "text", "text": "x"}):
            assert "view-only" in watcher.error_after(message)
        controller.send({"type": "take"})
        wait_until(lambda: controller.control() == "person", what="the agent to pause", timeout=30)
        refused = {
            "not json": "not JSON",
            json.dumps([1, 2]): "Unknown message type",
            json.dumps({"type": "cdp", "method": "Page.navigate", "params": {"url": "http://10.0.0.1/"}}): "Unknown message type",
            json.dumps({"type": "mouse", "event": "down", "x": 10, "y": 10, "method": "Runtime.evaluate"}): "Unknown field",
            json.dumps({"type": "mouse", "event": "explode", "x": 10, "y": 10}): "Must be one of",
            json.dumps({"type": "mouse", "event": "down", "x": 5000, "y": 10}): "outside the page",
            json.dumps({"type": "mouse", "event": "down", "x": -1, "y": 10}): "greater than or equal",
            json.dumps({"type": "mouse", "event": "down", "x": "NaN", "y": 10}): "Invalid",
            json.dumps({"type": "key", "event": "down", "key": "k" * 33}): "Invalid key message",
            json.dumps({"type": "text", "text": ""}): "Invalid text message",
        }
        for message, why in refused.items():
            assert why.lower() in controller.error_after(message).lower(), message
        controller.ws.send_binary(b"\x00\x01")
        assert "Binary" in wait_until(lambda: controller.of("error")[-1]["message"].startswith("Binary")
                                      and controller.of("error")[-1]["message"], what="the binary refusal")
        # Still served after all that, and the page untouched by any of it.
        frames = len(controller.of("frame"))
        controller.click(FIELD)
        controller.send({"type": "text", "text": "bo"})
        wait_until(lambda: len(controller.of("frame")) > frames, what="a frame after valid input")
        # An oversized message closes that one connection (1009); the server and the other viewer go on.
        controller.send(json.dumps({"type": "text", "text": "x" * 9000}))
        wait_until(lambda: controller.closed, what="the oversized message to close the socket")
        assert controller.closed in (1009, -1)  # its close frame (1009), unless the reset outran it
        assert requests.get(stack.base + "/healthz", timeout=5).ok
        assert not watcher.closed
    finally:
        watcher.close()
        controller.close()
    client.post(f"/fast/v2/remote-dispatch/responses/{request_id}/cancel", headers={"x-api-key": api_key})


def test_another_key_forged_and_expired_urls_get_nothing(app, client, api_key, other_key, pages, stack):
    prompt = "\n".join(["/Operator", f"go to {pages.url('/form')}", *waits(30), "answer done"])
    request_id = submit(client, api_key, {**BROWSER, "prompt": prompt}).get_json()["requestId"]
    general = submit(client, api_key, {"prompt": "answer hi", "executionMode": "cloud"}).get_json()["requestId"]
    running(client, api_key, request_id)
    mine = live_url(stack, api_key, f"remote-dispatch/responses/{request_id}").json()["liveUrl"]
    reply = live_url(stack, other_key, f"remote-dispatch/responses/{request_id}")
    assert reply.status_code == 404 and reply.json()["error"] == "Request Not Found"
    assert live_url(stack, other_key, "cloud-browser/sessions/no-such-session").status_code == 404
    assert live_url(stack, api_key, f"remote-dispatch/responses/{request_id}", "steer").status_code == 400
    wait_for_status(client, api_key, general)
    assert live_url(stack, api_key, f"remote-dispatch/responses/{general}").status_code == 409
    token = mine.rsplit("/", 1)[1]
    with app.app_context():
        claims = live_service.claims(token)
        expired = live_service._signer().dumps({**claims, "x": int(time.time()) - 1})
    forged = token[:-3] + ("AAA" if not token.endswith("AAA") else "BBB")
    for bad in (forged, expired, "nonsense"):
        page = requests.get(f"{stack.base}/live/{bad}", timeout=5)
        assert page.status_code == 404 and page.json()["error"] == "Not Found"
        with pytest.raises(websocket.WebSocketBadStatusException) as refused:
            websocket.create_connection(f"ws://{stack.base.split('://')[1]}/live/{bad}/socket", timeout=5)
        assert refused.value.status_code == 404
    assert requests.get(mine, timeout=5).status_code == 200
    client.post(f"/fast/v2/remote-dispatch/responses/{request_id}/cancel", headers={"x-api-key": api_key})


def test_agent_asks_for_a_person_who_signs_in_through_the_viewer_page(client, api_key, pages, stack, chromium):
    prompt = "\n".join(["/Operator", f"go to {pages.url('/login')}",
                        "ask for a person: the sign-in needs a one-time code", "extract h1"])
    request_id = submit(client, api_key, {**BROWSER, "prompt": prompt}).get_json()["requestId"]
    asked = wait_for_status(client, api_key, request_id, statuses=("input-required", "success", "error"), timeout=60)
    assert asked["status"] == "input-required", json.dumps(asked)[:1500]
    assert asked["completedAt"] is None
    hitl = asked["hitlInputMetadata"]
    assert hitl["type"] == "takeover" and hitl["reason"] == "the sign-in needs a one-time code"
    assert hitl["liveUrl"].startswith(stack.base + "/live/") and "the sign-in needs" in asked["response"]["text"]
    chromium.get(hitl["liveUrl"])
    wait = WebDriverWait(chromium, 30, poll_frequency=0.1)
    box = chromium.find_element(By.CSS_SELECTOR, ".live")
    wait.until(lambda d: int(box.get_attribute("data-frames")) > 0 and box.get_attribute("data-control") == "waiting")
    assert "Asks for a person: the sign-in needs a one-time code" in chromium.find_element(By.CSS_SELECTOR, ".live-step").text
    chromium.find_element(By.CSS_SELECTOR, ".live-take").click()
    wait.until(lambda d: box.get_attribute("data-control") == "person")
    image = chromium.find_element(By.CSS_SELECTOR, ".live-frame")
    scale = image.size["width"] / 1280

    def click_at(point):
        # Selenium offsets from the element's centre: the page's point, scaled to the picture on screen.
        ActionChains(chromium).move_to_element_with_offset(
            image, int(point[0] * scale - image.size["width"] / 2), int(point[1] * scale - image.size["height"] / 2)
        ).click().perform()

    click_at(FIELD)
    ActionChains(chromium).send_keys(CODE).perform()
    frames = int(box.get_attribute("data-frames"))
    click_at(BUTTON)
    wait.until(lambda d: int(box.get_attribute("data-frames")) > frames)
    chromium.save_screenshot("/tmp/live-viewer-person.png")
    chromium.find_element(By.CSS_SELECTOR, ".live-handback").click()
    done = wait_for_status(client, api_key, request_id, timeout=60)
    assert done["status"] == "success", done
    assert done["response"]["text"] == "Welcome inside"
    trace = done["response"]["actionTrace"]
    assert any(e.get("takeover", {}).get("by") == "alice" for e in trace)
    typed, clicked = [e["action"] for e in trace if e.get("by")][-2:]
    assert typed == "alice: typed text (7×)" and clicked.startswith("alice: clicked at (")
    assert CODE not in json.dumps(done)
    wait.until(lambda d: box.get_attribute("data-ended") == "1")


def test_kept_session_frames_and_idle_control(client, api_key, other_key, pages, stack):
    created = client.post("/fast/v2/cloud-browser/create-and-initialize-cloud-browser-session", json={},
                          headers={"x-api-key": api_key}).get_json()
    session_id = created["session_id"]
    request_id = submit(client, api_key, {"prompt": f"/Operator go to {pages.url('/form')}",
                                          "cloudBrowserSessionId": session_id}).get_json()["requestId"]
    assert wait_for_status(client, api_key, request_id, timeout=60)["status"] == "success"
    assert live_url(stack, other_key, f"cloud-browser/sessions/{session_id}").status_code == 404
    reply = live_url(stack, api_key, f"cloud-browser/sessions/{session_id}", "control")
    assert reply.status_code == 200, reply.text
    viewer = Viewer(reply.json()["liveUrl"])
    try:
        wait_until(lambda: viewer.of("frame"), what="a frame of the kept session's page")
        assert viewer.control() == "idle"  # no agent: the person may act at once
        frames = len(viewer.of("frame"))
        viewer.click(FIELD)
        viewer.send({"type": "text", "text": "kim"})
        viewer.click(BUTTON)
        wait_until(lambda: len(viewer.of("frame")) > frames, what="a frame after the person's input")
        assert "take" not in json.dumps(viewer.of("error"))
        # The session's next task reads what the person left.
        after = submit(client, api_key, {"prompt": "/Operator extract #greeting",
                                         "cloudBrowserSessionId": session_id}).get_json()["requestId"]
        assert wait_for_status(client, api_key, after, timeout=60)["response"]["text"] == "Thanks kim"
        client.post("/fast/v2/cloud-browser/stop-cloud-browser-session", json={"session_id": session_id},
                    headers={"x-api-key": api_key})
        wait_until(lambda: viewer.of("ended"), what="the viewer to learn the session ended")
    finally:
        viewer.close()


def test_console_task_page_shows_the_live_view_while_the_task_runs(client, api_key, pages, stack, chromium):
    prompt = "\n".join(["/Operator", f"go to {pages.url('/form')}", *waits(25), "answer done"])
    request_id = submit(client, api_key, {**BROWSER, "prompt": prompt}).get_json()["requestId"]
    running(client, api_key, request_id)
    sign_in(chromium, stack, api_key)
    chromium.get(f"{stack.base}/console/tasks/{request_id}")
    wait = WebDriverWait(chromium, 30, poll_frequency=0.1)
    box = chromium.find_element(By.CSS_SELECTOR, "#live-box .live")
    assert box.get_attribute("data-mode") == "control"
    wait.until(lambda d: int(box.get_attribute("data-frames")) > 0 and box.get_attribute("data-control") == "agent")
    wait.until(lambda d: d.find_element(By.CSS_SELECTOR, "#live-box .live-step").text.startswith("Step: wait"))
    assert chromium.find_element(By.CSS_SELECTOR, "#live-box .live-url").text == pages.url("/form")
    chromium.save_screenshot("/tmp/live-console-task.png")
    done = wait_for_status(client, api_key, request_id, timeout=60)
    assert done["status"] == "success"
    wait.until(lambda d: box.get_attribute("data-ended") == "1")
    chromium.get(f"{stack.base}/console/tasks/{request_id}")
    assert not chromium.find_elements(By.CSS_SELECTOR, "#live-box")  # finished: no live view


def test_a_model_asks_for_a_person_and_reads_the_page_they_left(client, api_key, pages, stack, model):
    def answer(body):
        page = [m["content"] for m in body["messages"] if m["role"] == "tool"][-1]
        return tool_call("answer", text="signed in" if "Welcome inside" in page else "still outside")

    model.script(tool_call("go_to", url=pages.url("/login")),
                 tool_call("ask_for_person", reason="the sign-in needs a one-time code"), answer)
    request_id = submit(client, api_key, {**BROWSER, "prompt": f"/Operator Sign in at {pages.url('/login')}."}
                        ).get_json()["requestId"]
    asked = wait_for_status(client, api_key, request_id, statuses=("input-required", "success", "error"), timeout=60)
    assert asked["status"] == "input-required", json.dumps(asked)[:1500]
    assert asked["hitlInputMetadata"]["type"] == "takeover"
    tools = [t["function"]["name"] for t in model.bodies()[0]["tools"]]
    assert "ask_for_person" in tools
    # Answering it as a question is refused: a person hands back through the live view.
    assert client.post(f"/fast/v2/remote-dispatch/responses/{request_id}/input", json={"answer": CODE},
                       headers={"x-api-key": api_key}).status_code == 409
    asked_so_far = len(model.bodies())
    viewer = Viewer(asked["hitlInputMetadata"]["liveUrl"])
    try:
        wait_until(lambda: viewer.control() == "waiting" and viewer.of("frame"), what="the waiting task's picture")
        viewer.send({"type": "take"})
        wait_until(lambda: viewer.control() == "person", what="control")
        viewer.click(FIELD)
        viewer.send({"type": "text", "text": CODE})
        viewer.click(BUTTON)
        wait_until(lambda: viewer.of("state")[-1]["url"] == pages.url("/inside"), what="the page the person reached")
        assert len(model.bodies()) == asked_so_far  # no model call while a person has the browser
        viewer.send({"type": "handback"})
        done = wait_for_status(client, api_key, request_id, timeout=60)
    finally:
        viewer.close()
    assert done["status"] == "success" and done["response"]["text"] == "signed in", done
    assert CODE not in model.recorded() and CODE not in json.dumps(done)


def sign_in(driver, web, key):
    driver.delete_all_cookies()
    driver.get(web.base + "/console/signin")
    driver.find_element(By.ID, "api_key").send_keys(key)
    driver.find_element(By.CSS_SELECTOR, "form button[type=submit]").click()
    WebDriverWait(driver, 30).until(lambda d: d.current_url.split("?")[0].endswith("/console/tasks"))
