"""Benchmark: streams through a machine's stream endpoint (`python -m bench.streams`), against the browser's own
DevTools socket, side by side on one kept session's browser, alternated round by round.

- frame latency p50: a page change → its screencast frame at the CDP client (the live view's own connection);
- input latency p50: Input.dispatchMouseEvent sent → the page's mousedown listener (Date.now());
- a CDP round trip p50 (Browser.getVersion): direct, through the endpoint, and as a caller's CDP goes (the web
  tier's relay, app/sessions/cdp_web.py, then the endpoint).
"Direct" is the path a web process on the holding machine took before the endpoint existed; "endpoint" is the one
every web process takes now, on that machine or another (workers/browser/host_endpoint.py)."""
import json
import statistics
import threading
import time
from http.server import ThreadingHTTPServer

import websocket

from app import browser_hosts
from app.live.cdp import Cdp
from bench import common
from bench.common import Row
from bench.live import _colour, _Pages
from bench.sessions import stack_post

SECTION = "11b streams"
SAMPLE_SECONDS = common.scaled(6, 2)
CLICKS = common.scaled(40, 10)
CALLS = common.scaled(200, 40)
ROUNDS = common.scaled(2, 1)


class _Client:
    """One CDP connection to the session's browser attached to its page: frames as they arrive (acked at once)."""

    def __init__(self, endpoint, token=None):
        self.frames, self.session = [], None
        self.cdp = Cdp(endpoint, self._event, token)
        target = next(t["targetId"] for t in self.cdp.call("Target.getTargets")["targetInfos"] if t["type"] == "page")
        self.session = self.cdp.call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]

    def _event(self, method, params, session):
        if method == "Page.screencastFrame" and session == self.session:
            self.frames.append((time.time() * 1000, params.get("data", "")))
            self.cdp.send("Page.screencastFrameAck", {"sessionId": params.get("sessionId")}, session=session)

    def evaluate(self, expression):
        return self.cdp.call("Runtime.evaluate", {"expression": expression, "returnByValue": True},
                             self.session)["result"]["value"]

    def frame_latencies(self):
        """Page changes (every 250 ms) → the first frame showing each, for SAMPLE_SECONDS."""
        self.frames.clear()
        self.cdp.send("Page.startScreencast", {"format": "jpeg", "quality": 70, "everyNthFrame": 1}, self.session)
        time.sleep(SAMPLE_SECONDS)
        self.cdp.call("Page.stopScreencast", session=self.session)
        changes, frames = self.evaluate("window.changes"), list(self.frames)
        latencies = []
        for (changed, colour), (following, _) in zip(changes, changes[1:] + [[float("inf"), None]]):
            if frames and changed > frames[0][0]:
                seen = next((at for at, data in frames if changed <= at < following + 1000 and _colour(data) == colour),
                            None)
                if seen is not None:
                    latencies.append(seen - changed)
        if not latencies:
            raise RuntimeError(f"no page change seen in a frame ({len(changes)} changes, {len(frames)} frames)")
        return latencies

    def input_latencies(self):
        latencies = []
        for _ in range(CLICKS):
            before = len(self.evaluate("window.clicks"))
            sent = time.time() * 1000
            for kind in ("mousePressed", "mouseReleased"):
                self.cdp.send("Input.dispatchMouseEvent", {"type": kind, "x": 600, "y": 500, "button": "left",
                                                           "clickCount": 1}, self.session)
            while len(clicks := self.evaluate("window.clicks")) <= before:
                time.sleep(0.005)
            latencies.append(clicks[-1] - sent)
        return latencies

    def round_trips(self):
        return [_timed(lambda: self.cdp.call("Browser.getVersion")) for _ in range(CALLS)]


def _timed(work):
    started = time.perf_counter()
    work()
    return (time.perf_counter() - started) * 1000


def measure(stack):
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Pages)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    stack.tasks_worker  # noqa: B018  (its stream endpoint serves the session's browser)
    session = stack_post(stack, "/cloud-browser/create-cloud-browser-session", {})
    try:
        [(debugger, host)] = stack.sql("SELECT debugger_address, host FROM cloud_sessions WHERE id = :id",
                                       id=session["session_id"])
        url = _registered(stack, host)
        token = browser_hosts.mint(stack.flask_app.config, host, browser_hosts.session_target(session["session_id"]),
                                   seconds=600)
        clients = {"direct": _Client(debugger), "endpoint": _Client(url, token)}
        clients["direct"].cdp.call("Page.navigate", {"url": f"http://127.0.0.1:{server.server_address[1]}/"},
                                   clients["direct"].session)
        time.sleep(0.5)
        figures = {name: {"frame": [], "input": [], "cdp": []} for name in clients}
        figures["web tier"] = {"cdp": []}
        caller = websocket.create_connection(session["cdp_websocket_url"], timeout=30, suppress_origin=True,
                                             header=[f"{k}: {v}" for k, v in session["cdp_auth_headers"].items()])
        for round_ in range(ROUNDS):
            for name in (("direct", "endpoint") if round_ % 2 == 0 else ("endpoint", "direct")):
                client = clients[name]
                figures[name]["frame"] += client.frame_latencies()
                figures[name]["input"] += client.input_latencies()
                figures[name]["cdp"] += client.round_trips()
            figures["web tier"]["cdp"] += [_timed(lambda: _call(caller, "Browser.getVersion")) for _ in range(CALLS)]
        caller.close()
        for client in clients.values():
            client.cdp.close()
    finally:
        stack_post(stack, "/cloud-browser/stop-cloud-browser-session", {"session_id": session["session_id"]})
        server.shutdown()
    p50 = {name: {kind: statistics.median(values) for kind, values in kinds.items()} for name, kinds in figures.items()}
    for kind in ("frame", "input", "cdp"):
        print(f"streams: {kind} p50 direct {p50['direct'][kind]:.2f} ms, through the endpoint "
              f"{p50['endpoint'][kind]:.2f} ms (ratio {p50['endpoint'][kind] / p50['direct'][kind]:.2f})", flush=True)
    print(f"streams: CDP round trip p50 through the web tier {p50['web tier']['cdp']:.2f} ms "
          f"(ratio {p50['web tier']['cdp'] / p50['direct']['cdp']:.2f} against direct)", flush=True)
    return [
        Row(SECTION, "frame latency through the stream endpoint (ms, p50)", p50["endpoint"]["frame"],
            "direct to the DevTools socket (ms, p50)", p50["direct"]["frame"],
            note=f"{len(figures['endpoint']['frame'])} / {len(figures['direct']['frame'])} page changes"),
        Row(SECTION, "input latency through the stream endpoint (ms, p50)", p50["endpoint"]["input"],
            "direct (ms, p50)", p50["direct"]["input"], note=f"{CLICKS * ROUNDS} clicks each"),
        Row(SECTION, "CDP round trip (Browser.getVersion) through the stream endpoint (ms, p50)",
            p50["endpoint"]["cdp"], "direct (ms, p50)", p50["direct"]["cdp"], note=f"{CALLS * ROUNDS} calls each"),
        Row(SECTION, "CDP round trip through the web tier's relay and the endpoint (ms, p50)", p50["web tier"]["cdp"],
            "direct (ms, p50)", p50["direct"]["cdp"], note="a caller's path (cdp_websocket_url)"),
    ]


def _registered(stack, host):
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        found = stack.sql("SELECT url FROM session_hosts WHERE host = :host", host=host)
        if found and found[0][0]:
            return found[0][0]
        time.sleep(0.2)
    raise RuntimeError(f"no stream endpoint registered for {host}")


def _call(ws, method):
    ws.send(json.dumps({"id": 1, "method": method}))
    while json.loads(ws.recv()).get("id") != 1:
        pass


if __name__ == "__main__":
    common.main(measure)
