"""Benchmark: the live view (`python -m bench.live`). Frame latency (a page change → its frame at a viewer, p50/p99)
and frames per second while a page animates, on a kept session's page; input latency (a viewer's click → the
event in the page); take control during a `wait 30` step (→ the viewer's state says "person"); and the cost of
watching: a 10-action cloud_browser task with a viewer attached ÷ without."""
import base64
import io
import json
import statistics
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import websocket
from PIL import Image

from app.live import state as live_state
from app.live.cdp import Cdp
from bench import common
from bench.common import Row
from bench.sessions import run, stack_post

SECTION = "11 live view"
SAMPLE_SECONDS = common.scaled(6, 2)
CLICKS = common.scaled(40, 10)
ROUNDS = common.scaled(5, 1)
COLORS = [(230, 30, 30), (30, 180, 30), (30, 30, 230), (230, 200, 0)]
# Every 250 ms the page turns the next colour and notes when (Date.now(): the same clock as time.time()); a
# mousedown is noted too; `?animate` repaints every animation frame (a moving bar) for the fps figure.
PAGE = """<html><head><title>Live</title><style>body{margin:0} #box{position:absolute;left:0;top:0;width:400px;
height:300px} #bar{position:absolute;top:320px;height:20px;width:50px;background:#333}</style></head><body>
<div id="box"></div><div id="bar"></div><script>
const colors = %s; window.changes = []; window.clicks = []; let k = 0;
function paint() { const c = colors[k %% colors.length]; document.getElementById("box").style.background =
  `rgb(${c[0]},${c[1]},${c[2]})`; window.changes.push([Date.now(), k %% colors.length]); k++; }
paint(); setInterval(paint, 250);
document.addEventListener("mousedown", () => window.clicks.push(Date.now()));
if (location.search === "?animate") { let x = 0; (function step() { x = (x + 7) %% 1200;
  document.getElementById("bar").style.left = x + "px"; requestAnimationFrame(step); })(); }
</script></body></html>""" % json.dumps(COLORS)
FORM = ("<html><head><title>Form</title></head><body><h1>Order</h1><label>Name <input id=n></label>"
        "<label>City <input id=c></label><button onclick=\"document.getElementById('r').textContent="
        "'Sent ' + document.getElementById('n').value\">Send</button><p id=r></p></body></html>")


class _Pages(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def do_GET(self):
        data = (FORM if self.path.startswith("/form") else PAGE).encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


class _Viewer:
    """A viewer's WebSocket (as the viewer page opens it): arrival time and centre colour of every frame."""

    def __init__(self, stack, live_url):
        path = live_url.split("/live/", 1)[1]
        self.ws = websocket.create_connection(f"{stack.web.url.replace('http', 'ws', 1)}/live/{path}/socket",
                                              timeout=30)
        self.frames, self.states = [], []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        try:
            while True:
                message = json.loads(self.ws.recv())
                if message["type"] == "frame":
                    self.frames.append((time.time() * 1000, message["data"]))
                elif message["type"] == "state":
                    self.states.append(message)
        except (websocket.WebSocketException, OSError, ValueError):
            pass

    def send(self, message):
        self.ws.send(json.dumps(message))

    def close(self):
        self.ws.close()


def _colour(data):
    pixel = Image.open(io.BytesIO(base64.b64decode(data))).convert("RGB").getpixel((200, 150))
    return min(range(len(COLORS)), key=lambda i: sum((a - b) ** 2 for a, b in zip(COLORS[i], pixel)))


def _evaluate(cdp, session, expression):
    return cdp.call("Runtime.evaluate", {"expression": expression, "returnByValue": True}, session)["result"]["value"]


def _wait(predicate, timeout=30):
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise RuntimeError("timed out")
        time.sleep(0.02)


def measure(stack):
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Pages)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}"
    stack.tasks_worker  # noqa: B018  (started before any timing)
    try:
        rows = _frames_and_input(stack, base)
        rows += _take_control(stack, base)
        rows += _cost_of_watching(stack, base)
    finally:
        server.shutdown()
    return rows


def _frames_and_input(stack, base):
    session = stack_post(stack, "/cloud-browser/create-and-initialize-cloud-browser-session", {})
    try:
        live = common.http().get(f"{stack.web.url}/fast/v2/cloud-browser/sessions/{session['session_id']}/live",
                                 params={"mode": "control"}, headers={"x-api-key": stack.api_key}, timeout=30).json()
        # The bench's own CDP connection to the page (as the viewer's), to load pages and read what they noted.
        [(endpoint,)] = stack.sql("SELECT debugger_address FROM cloud_sessions WHERE id = :id",
                                  id=session["session_id"])
        cdp = Cdp(endpoint, lambda *_: None)
        target = next(t["targetId"] for t in cdp.call("Target.getTargets")["targetInfos"] if t["type"] == "page")
        page = cdp.call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        cdp.call("Page.navigate", {"url": base + "/"}, page)
        time.sleep(0.5)
        viewer = _Viewer(stack, live["liveUrl"])
        _wait(lambda: len(viewer.frames) > 2)
        time.sleep(SAMPLE_SECONDS)
        changes = _evaluate(cdp, page, "window.changes")
        frames = list(viewer.frames)
        latencies = []
        for (changed, colour), (following, _) in zip(changes, changes[1:] + [[float("inf"), None]]):
            seen = next((at for at, data in frames if changed <= at < following + 1000 and _colour(data) == colour), None)
            if seen is not None and changed > frames[0][0]:
                latencies.append(seen - changed)
        # Input: a viewer's mousedown → the page's listener (Date.now()), one at a time.
        sent = []
        for _ in range(CLICKS):
            before = len(_evaluate(cdp, page, "window.clicks"))
            sent.append(time.time() * 1000)
            viewer.send({"type": "mouse", "event": "down", "x": 600, "y": 500, "button": "left", "clickCount": 1})
            viewer.send({"type": "mouse", "event": "up", "x": 600, "y": 500, "button": "left", "clickCount": 1})
            _wait(lambda: len(_evaluate(cdp, page, "window.clicks")) > before)
        clicks = _evaluate(cdp, page, "window.clicks")
        input_ms = [at - sent_at for at, sent_at in zip(clicks[-len(sent):], sent)]
        # Frames per second while the page animates every frame.
        cdp.call("Page.navigate", {"url": base + "/?animate"}, page)
        time.sleep(1)
        counted = len(viewer.frames)
        time.sleep(SAMPLE_SECONDS)
        fps = (len(viewer.frames) - counted) / SAMPLE_SECONDS
        viewer.close()
        cdp.close()
    finally:
        stack_post(stack, "/cloud-browser/stop-cloud-browser-session", {"session_id": session["session_id"]})
    print(f"live view: {len(latencies)} page changes, frame latency p50 {common.percentile(latencies, 50):.0f} ms "
          f"p99 {common.percentile(latencies, 99):.0f} ms; input p50 {statistics.median(input_ms):.1f} ms; "
          f"{fps:.1f} fps animating", flush=True)
    return [
        Row(SECTION, "frame latency, page change → frame at the viewer (ms, p50)", common.percentile(latencies, 50),
            "goal (ms)", 100, note=f"p99 {common.percentile(latencies, 99):.0f} ms, {len(latencies)} changes"),
        Row(SECTION, "frames per second while the page animates", fps, "goal (fps)", 10),
        Row(SECTION, "input latency, viewer click → event in the page (ms, p50)", statistics.median(input_ms),
            "goal (ms)", 50, note=f"{len(input_ms)} clicks, p99 {common.percentile(input_ms, 99):.1f} ms"),
    ]


def _take_control(stack, base):
    """Take control while the agent is inside a `wait 30` step: the viewer's "take" → its state says "person"."""
    took = []
    for _ in range(ROUNDS):
        request_id = stack_post(stack, "/remote-dispatch", {"prompt": f"/Operator\ngo to {base}/form\nwait 30\n"
                                                            "answer done", "executionMode": "cloud_browser"})["requestId"]
        try:
            _wait(lambda: str(live_state.read(request_id).get("step") or "").startswith("wait 30"), 60)
            time.sleep(1)  # inside the wait, well before its end
            live = common.http().get(f"{stack.web.url}/fast/v2/remote-dispatch/responses/{request_id}/live",
                                     params={"mode": "control"}, headers={"x-api-key": stack.api_key}, timeout=30)
            viewer = _Viewer(stack, live.json()["liveUrl"])
            try:
                _wait(lambda: viewer.states)
                sent = time.perf_counter()
                viewer.send({"type": "take"})
                _wait(lambda: viewer.states[-1]["control"] == "person", timeout=40)
                took.append((time.perf_counter() - sent) * 1000)
            finally:
                viewer.close()
        finally:
            stack_post(stack, f"/remote-dispatch/responses/{request_id}/cancel", {})
    print(f"live view: take control during wait 30, p50 {statistics.median(took):.0f} ms "
          f"(max {max(took):.0f} ms)", flush=True)
    return [Row(SECTION, "take control during a `wait 30` step → the viewer says \"person\" (ms, p50)",
                statistics.median(took), "goal (ms)", 1000, note=f"{len(took)} tasks, max {max(took):.0f} ms")]


def _cost_of_watching(stack, base):
    """The same 10-action task, alternately with a viewer attached as soon as its browser is up, and without."""
    steps = [f"go to {base}/form", 'type "Ada" into "Name"', 'type "Oslo" into "City"', 'click "Send"',
             "extract #r", 'type "Bo" into "Name"', 'click "Send"', "extract #r", "scroll down", "extract h1"]
    task = {"prompt": "/Operator\n" + "\n".join(steps), "executionMode": "cloud_browser"}
    run(stack, task)  # warm-up
    watched_ms, alone_ms, frames = [], [], []
    for round_ in range(ROUNDS):
        for watched in ((True, False) if round_ % 2 == 0 else (False, True)):
            if watched:
                elapsed, seen = _watched_run(stack, task)
                watched_ms.append(elapsed)
                frames.append(seen)
            else:
                alone_ms.append(run(stack, task))
    if not any(frames):
        raise RuntimeError("no viewer saw a frame of its task")
    watched, alone = statistics.median(watched_ms), statistics.median(alone_ms)
    print(f"live view: 10-action task {watched:.0f} ms watched, {alone:.0f} ms alone ({watched / alone:.2f})", flush=True)
    return [Row(SECTION, "10-action cloud_browser task with a viewer attached (ms, median)", watched,
                "the same task with no viewer (ms)", alone,
                note=f"{ROUNDS} rounds, {statistics.median(frames):.0f} frames per watched task; goal ratio ≤ 1.1")]


def _watched_run(stack, body):
    started = time.perf_counter()
    request_id = stack_post(stack, "/remote-dispatch", body)["requestId"]
    _wait(lambda: live_state.read(request_id).get("targetId")
          or stack.sql("SELECT status FROM tasks WHERE id = :id", id=request_id)[0][0] != "pending")
    live = common.http().get(f"{stack.web.url}/fast/v2/remote-dispatch/responses/{request_id}/live",
                             headers={"x-api-key": stack.api_key}, timeout=30)
    viewer = _Viewer(stack, live.json()["liveUrl"]) if live.ok else None
    try:
        if stack.wait_finished([request_id], 120) != 1:
            raise RuntimeError(f"task {request_id} did not finish")
        elapsed = (time.perf_counter() - started) * 1000
    finally:
        if viewer is not None:
            viewer.close()
    return elapsed, len(viewer.frames) if viewer is not None else 0


if __name__ == "__main__":
    common.main(measure)
