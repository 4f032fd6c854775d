"""Benchmark 6: kept cloud browser sessions (`make bench-sessions`): create-and-initialize → usable session, a task
in a warm session against the same task in a fresh `cloud_browser` browser, and CDP through the session's checking
relay against CDP straight to the browser (`python -m bench.sessions cdp` for that one alone), a direct SDK action's
round trip against the same read over CDP (`python -m bench.sessions actions`), and a stop written by another
machine against a stop through this machine's API (`python -m bench.sessions stop`), in the same run."""
import json
import statistics
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from bench import common
from bench.common import Row
from tests.devtools import devtools_json, devtools_websocket

ROUNDS = common.scaled(8, 3)
SECTION = "6 sessions"


# A page whose screenshot weighs what a real one does (a few hundred KiB of PNG): text and a noisy picture.
BUSY = ("<html><head><title>Busy</title></head><body><h1>Report</h1>" + "<p>Lorem ipsum dolor sit amet. </p>" * 40 +
        "<canvas id=c width=500 height=300></canvas><script>const c = document.getElementById('c').getContext('2d');"
        "const d = c.createImageData(500, 300); for (let i = 0; i < d.data.length; i++) d.data[i] = (i * 7919) % 251;"
        "c.putImageData(d, 0, 0);</script></body></html>").encode()


class _Page(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def do_GET(self):
        data = BUSY if self.path == "/busy" else \
            b"<html><head><title>Bench</title></head><body><h1>ready</h1><p>a page</p></body></html>"
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def measure(stack):
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Page)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    page = f"http://127.0.0.1:{server.server_address[1]}/"
    stack.tasks_worker  # noqa: B018  (started before any timing)
    task = {"prompt": f"/Operator\ngo to {page}\nextract h1"}
    try:
        run(stack, {**task, "executionMode": "cloud_browser"})  # warm-up: imports, the worker's first browser
        create_ms, usable_ms, warm_ms, fresh_ms = [], [], [], []
        for _ in range(ROUNDS):
            started = time.perf_counter()
            session = stack_post(stack, "/cloud-browser/create-and-initialize-cloud-browser-session",
                                 {"require_extension": False})
            create_ms.append((time.perf_counter() - started) * 1000)
            target = {**task, "cloudBrowserSessionId": session["session_id"]}
            run(stack, target)  # the first task: the session is usable
            usable_ms.append((time.perf_counter() - started) * 1000)
            warm_ms.append(run(stack, target))  # the second task, in the warm session
            stack_post(stack, "/cloud-browser/stop-cloud-browser-session", {"session_id": session["session_id"]})
            fresh_ms.append(run(stack, {**task, "executionMode": "cloud_browser"}))
    finally:
        server.shutdown()
    fresh = statistics.median(fresh_ms)
    return [
        Row(SECTION, "create-and-initialize → response (ms, median)", statistics.median(create_ms),
            "fresh cloud_browser task, same page (ms)", fresh),
        Row(SECTION, "create-and-initialize → first task done (ms, median)", statistics.median(usable_ms),
            "fresh cloud_browser task, same page (ms)", fresh),
        Row(SECTION, "second task in a warm session (ms, median)", statistics.median(warm_ms),
            "fresh cloud_browser task, same page (ms)", fresh, note=f"{ROUNDS} rounds"),
    ]


SCREENSHOTS = common.scaled(50, 20)


def measure_cdp(stack):
    """`SCREENSHOTS` Page.captureScreenshot over one page's CDP WebSocket, through the relay and direct, alternated."""
    import websocket

    server = ThreadingHTTPServer(("127.0.0.1", 0), _Page)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    stack.tasks_worker  # noqa: B018  (it starts the session's browser, and its stream endpoint reaches it)
    session = stack_post(stack, "/cloud-browser/create-cloud-browser-session", {})
    try:
        debugger, path = _devtools_page(stack, session)
        relay = session["cdp_websocket_url"].split("/devtools/")[0]
        headers = [f"{name}: {value}" for name, value in session["cdp_auth_headers"].items()]
        direct_ws = devtools_websocket(debugger, path, timeout=60)
        relay_ws = websocket.create_connection(relay + path, header=headers, timeout=60, suppress_origin=True)
        page = f"http://127.0.0.1:{server.server_address[1]}/busy"
        _call(direct_ws, 1, "Page.navigate", {"url": page})
        time.sleep(0.5)
        for ws in (direct_ws, relay_ws) * 2:  # warm-up
            _call(ws, 2, "Page.captureScreenshot", {"format": "png"})
        direct_ms, relay_ms, sizes = [], [], []
        for round_ in range(SCREENSHOTS):  # alternated, each side first every other round
            for ws, times in ((relay_ws, relay_ms), (direct_ws, direct_ms))[::1 if round_ % 2 else -1]:
                started = time.perf_counter()
                sizes.append(len(_call(ws, 10 + round_, "Page.captureScreenshot", {"format": "png"})))
                times.append((time.perf_counter() - started) * 1000)
        direct_ws.close()
        relay_ws.close()
    finally:
        stack_post(stack, "/cloud-browser/stop-cloud-browser-session", {"session_id": session["session_id"]})
        server.shutdown()
    relay_total, direct_total = sum(relay_ms), sum(direct_ms)
    print(f"CDP relay: {SCREENSHOTS} screenshots ({statistics.median(sizes) / 1024:.0f} KiB each) "
          f"{relay_total:.0f} ms through the relay, {direct_total:.0f} ms direct: ratio {relay_total / direct_total:.2f}",
          flush=True)
    return [Row(SECTION, f"{SCREENSHOTS} × Page.captureScreenshot through the CDP relay (ms, total)", relay_total,
                "the same, straight to the browser's DevTools port (ms)", direct_total,
                note=f"median per screenshot {statistics.median(relay_ms):.1f} vs {statistics.median(direct_ms):.1f} ms")]


ACTIONS = common.scaled(60, 15)


def measure_direct_actions(stack):
    """A direct action (POST /extension-actions get_url) in a kept session, round trip p50, against the same read
    (Runtime.evaluate location.href) sent straight to the session browser's DevTools socket: the floor."""

    server = ThreadingHTTPServer(("127.0.0.1", 0), _Page)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    worker = stack.start(common.start_celery("actions-worker", "workers", "control"))  # serves direct actions
    stack.tasks_worker  # noqa: B018  (starts the session's browser)
    session = stack_post(stack, "/cloud-browser/create-cloud-browser-session", {})
    try:
        window, page = session["browser_window_id"], f"http://127.0.0.1:{server.server_address[1]}/"

        def action(name, **args):
            started = time.perf_counter()
            reply = stack_post(stack, "/extension-actions", {"action": {"name": name, **args}, "browserWindowId": window,
                                                            "actionExecutionId": f"bench-{time.time_ns()}"})
            if reply["status"] != "success":
                raise RuntimeError(f"{name} failed: {reply['error']}")
            return (time.perf_counter() - started) * 1000

        action("go_to_url", url=page, new_tab=False)
        debugger, path = _devtools_page(stack, session)
        direct = devtools_websocket(debugger, path, timeout=60)
        action_ms, direct_ms = [], []
        for round_ in range(ACTIONS + 3):  # the first three warm up (the worker's first attach, imports)
            ms = action("get_url")
            started = time.perf_counter()
            _call(direct, 100 + round_, "Runtime.evaluate", {"expression": "location.href", "returnByValue": True})
            if round_ >= 3:
                action_ms.append(ms)
                direct_ms.append((time.perf_counter() - started) * 1000)
        direct.close()
    finally:
        stack_post(stack, "/cloud-browser/stop-cloud-browser-session", {"session_id": session["session_id"]})
        stack.stop(worker)
        server.shutdown()
    p50, floor = common.percentile(action_ms, 50), common.percentile(direct_ms, 50)
    print(f"direct action in a kept session: get_url p50 {p50:.1f} ms (p90 {common.percentile(action_ms, 90):.1f}), "
          f"the same read over CDP {floor:.2f} ms", flush=True)
    return [Row(SECTION, "direct action get_url in a kept session, round trip (ms, p50)", p50,
                "Runtime.evaluate straight to the browser's DevTools (ms, p50)", floor,
                note=f"{ACTIONS} actions, p90 {common.percentile(action_ms, 90):.1f} ms")]


def _devtools_page(stack, session):
    """(host:port of the session browser's DevTools, the WebSocket path of its first page)."""
    [(debugger,)] = stack.sql("SELECT debugger_address FROM cloud_sessions WHERE id = :id", id=session["session_id"])
    pages = devtools_json(debugger, "/json/list")
    return debugger, "/devtools/" + next(p for p in pages if p["type"] == "page")["webSocketDebuggerUrl"].split(
        "/devtools/")[1]


def _call(ws, call_id, method, params):
    """Send one command and return its reply's raw text (events in between are read and dropped)."""
    ws.send(json.dumps({"id": call_id, "method": method, "params": params}))
    while True:
        text = ws.recv()
        if text.startswith(f'{{"id":{call_id},') or json.loads(text).get("id") == call_id:
            if '"error"' in text[:200]:
                raise RuntimeError(f"{method} failed: {text[:300]}")
            return text


STOPS = common.scaled(6, 2)


def measure_remote_stop(stack):
    """A stop that reached only the session's row (as one made on another machine does) against a stop through the
    API of the machine holding the browser: time to the open CDP connection cut, a new one refused, every
    process of the browser gone."""
    import websocket

    from app.sessions.browsers import profile_processes

    remote, local = {"cut": [], "refused": [], "gone": []}, []
    stack.tasks_worker  # noqa: B018  (starts the sessions' browsers; its holder ends them once their rows say so)
    for round_ in range(STOPS):
        session = stack_post(stack, "/cloud-browser/create-cloud-browser-session", {})
        [(profile,)] = stack.sql("SELECT profile_dir FROM cloud_sessions WHERE id = :id", id=session["session_id"])
        headers = [f"{name}: {value}" for name, value in session["cdp_auth_headers"].items()]
        if round_ % 2:  # the baseline: a stop through this machine's API
            started = time.perf_counter()
            stack_post(stack, "/cloud-browser/stop-cloud-browser-session", {"session_id": session["session_id"]})
            _until(lambda: not profile_processes(profile))
            local.append((time.perf_counter() - started) * 1000)
            continue
        ws = websocket.create_connection(session["cdp_websocket_url"], header=headers, timeout=30)
        started = time.perf_counter()
        stack.sql("UPDATE cloud_sessions SET status = 'ended', end_reason = 'complete', ended_at = now(), "
                  "cdp_token_sealed = NULL WHERE id = :id", id=session["session_id"])
        times = remote["cut"], remote["refused"], remote["gone"]
        checks = [lambda: _cut(ws), lambda: _refused(session["cdp_websocket_url"], headers),
                  lambda: not profile_processes(profile)]
        while checks:
            for check, into in list(zip(checks, times)):
                if check():
                    into.append((time.perf_counter() - started) * 1000)
                    times = tuple(t for t in times if t is not into)
                    checks.remove(check)
            time.sleep(0.02)
    median = statistics.median
    print(f"stop from another machine: open CDP cut {median(remote['cut']):.0f} ms, new CDP refused "
          f"{median(remote['refused']):.0f} ms, browser gone {median(remote['gone']):.0f} ms; stop through this "
          f"machine's API: browser gone {median(local):.0f} ms", flush=True)
    return [Row(SECTION, "stop written by another machine → open CDP connection cut (ms, median)",
                median(remote["cut"]), "stop through the holding machine's API → browser gone (ms)", median(local)),
            Row(SECTION, "stop written by another machine → a new CDP connection refused (ms, median)",
                median(remote["refused"]), "stop through the holding machine's API → browser gone (ms)", median(local)),
            Row(SECTION, "stop written by another machine → every browser process gone (ms, median)",
                median(remote["gone"]), "stop through the holding machine's API → browser gone (ms)", median(local))]


def _until(condition, timeout=60):
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise RuntimeError("timed out")
        time.sleep(0.02)


def _cut(ws):
    """True once the relay has closed this connection (a command gets no answer but the close)."""
    import websocket

    try:
        ws.settimeout(0.05)
        ws.send('{"id": 1, "method": "Browser.getVersion"}')
        while True:
            if not ws.recv():
                return True
    except websocket.WebSocketTimeoutException:
        return False
    except (websocket.WebSocketConnectionClosedException, ConnectionError):
        return True


def _refused(url, headers):
    import websocket

    try:
        websocket.create_connection(url, header=headers, timeout=5).close()
        return False
    except (websocket.WebSocketBadStatusException, ConnectionError):
        return True


def stack_post(stack, path, body):
    reply = common.http().post(f"{stack.web.url}/fast/v2{path}", json=body, timeout=120,
                               headers={"x-api-key": stack.api_key})
    reply.raise_for_status()
    return reply.json()


def run(stack, body):
    """Submit and wait for success; returns submit → completedAt as the caller sees it (ms)."""
    started = time.perf_counter()
    request_id = stack_post(stack, "/remote-dispatch", body)["requestId"]
    if stack.wait_finished([request_id], 120) != 1:
        raise RuntimeError(f"task {request_id} did not finish")
    elapsed = (time.perf_counter() - started) * 1000
    [(status, error)] = stack.sql("SELECT status, error FROM tasks WHERE id = :id", id=request_id)
    if status != "success":
        raise RuntimeError(f"task {request_id} ended {status}: {error}")
    return elapsed


if __name__ == "__main__":
    only = {"cdp": [measure_cdp], "actions": [measure_direct_actions], "stop": [measure_remote_stop]}
    common.main(*only.get(sys.argv[1] if sys.argv[1:] else "",
                          [measure, measure_cdp, measure_direct_actions, measure_remote_stop]))
