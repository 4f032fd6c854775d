"""Benchmark 6: kept cloud browser sessions (`make bench-sessions`): create-and-initialize → usable session, and a
task in a warm session against the same task in a fresh `cloud_browser` browser, measured in the same run."""
import statistics
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from bench import common
from bench.common import Row

ROUNDS = common.scaled(8, 3)
SECTION = "6 sessions"


class _Page(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def do_GET(self):
        data = b"<html><head><title>Bench</title></head><body><h1>ready</h1><p>a page</p></body></html>"
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
    common.main(measure)
