"""Benchmark 6b: the warm browser pools: a cloud_browser task's start pooled vs cold vs raw, a burst, its memory; a
kept session's create → usable, pooled vs cold (`python -m bench.pool sessions` for that one alone)."""
import json
import os
import sys
import time

from bench import browser, common
from bench.common import Row
from app.sessions import pool as session_pool
from workers.browser import pool

SECTION = "6b browser pool"
RUNS = common.scaled(10, 3)  # sequential tasks per way of starting (p50 / p99)
BURST = common.scaled(20, 6)  # tasks at once, worker concurrency 2
POOL_SIZE = 2
PROMPT = "/Operator\ngo to {base}/start"


def wait_pool_full(timeout=120):
    deadline = time.monotonic() + timeout
    while len(pool.ready_boxes(os.environ["VAR_DIR"])) < POOL_SIZE:
        if time.monotonic() > deadline:
            raise RuntimeError("the browser pool did not fill")
        time.sleep(0.05)


def first_page(stack, pages, **extra):
    """One short task (`extra`: more fields of its submit): claimed → its first page requested (s)."""
    mark = pages.mark()
    request_id = browser.submit_task(stack, PROMPT.format(base=pages.base), **extra)
    stack.wait_finished([request_id], 120)
    status, message, started, _ = browser.task_row(stack, request_id)
    if status != "success":
        raise RuntimeError(f"cloud_browser task ended {status}: {message[:300]}")
    first = [t for t, path, _ in pages.since(mark) if path == "/start"]
    return first[0] - started


def burst(stack, pages):
    began = time.monotonic()
    ids = [browser.submit_task(stack, PROMPT.format(base=pages.base)) for _ in range(BURST)]
    stack.wait_finished(ids, 60 * BURST)
    seconds = time.monotonic() - began
    ok = stack.sql("SELECT count(*) FROM tasks WHERE id = ANY(:ids) AND status = 'success'", ids=ids)[0][0]
    return BURST / seconds, ok


def worker(stack, name, size, pool="BROWSER_POOL_SIZE", **env):
    """The only consumer of the tasks queue while it runs (the stack's own worker is stopped first), with the warm
    pool `pool` (the tasks' browsers', or the kept sessions') of `size`; `env`: more settings of its own."""
    if "tasks_worker" in stack.__dict__:
        stack.stop(stack.__dict__.pop("tasks_worker"))
    return stack.start(common.start_celery(name, "workers", "tasks", env={pool: str(size), **env}))


def measure(stack):
    pages = browser.PageServer()
    try:
        browser.raw_run(pages)  # warm-up (disk cache, fonts)
        cold_worker = worker(stack, "pool-off-worker", 0)
        first_page(stack, pages)  # its first task imports what the next ones reuse
        cold, raw = [], []
        for _ in range(RUNS):
            cold.append(first_page(stack, pages) * 1000)
            raw.append(browser.raw_run(pages)[2] * 1000)
        cold_rate, cold_ok = burst(stack, pages)
        stack.stop(cold_worker)

        pool_worker = worker(stack, "pool-worker", POOL_SIZE)
        wait_pool_full()
        first_page(stack, pages)
        pooled = []
        for _ in range(RUNS):
            wait_pool_full()  # the steady state the pool is for: a task arrives, a ready browser waits
            pooled.append(first_page(stack, pages) * 1000)
        wait_pool_full()
        memory = [pool.pss_mib(box) for box in pool.ready_boxes(os.environ["VAR_DIR"]).values()]
        pool_rate, pool_ok = burst(stack, pages)
        stack.stop(pool_worker)
    finally:
        pages.close()
    what = "start: cloud_browser task claimed → first page requested"
    rows = common.latency_rows(SECTION, what + ", pooled", pooled, "raw webdriver.Chrome() + get()", raw)
    rows += common.latency_rows(SECTION, what + ", pooled", pooled, "the same task, cold (BROWSER_POOL_SIZE=0)", cold)
    rows += common.latency_rows(SECTION, what + ", cold", cold, "raw webdriver.Chrome() + get()", raw)
    note = "" if pool_ok == cold_ok == BURST else f"succeeded: pooled {pool_ok}, cold {cold_ok} of {BURST}"
    rows += [
        Row(SECTION, f"throughput, {BURST} one-page tasks at once, concurrency 2, pool {POOL_SIZE} (tasks/s)",
            pool_rate, "the same, BROWSER_POOL_SIZE=0", cold_rate, note),
        Row(SECTION, "PSS of one idle pooled browser, sandbox + egress proxy (MiB)",
            sum(memory) / len(memory) if memory else None),
        Row(SECTION, f"PSS of the idle pool at its default size {POOL_SIZE} (MiB)", sum(memory) if memory else None),
    ]
    return rows


SESSION_RUNS = common.scaled(10, 3)


def session_usable(base, api_key, page):
    """Create a kept session with CDP, then one Page.navigate answered through its relay: (ms, session id)."""
    import websocket

    http = common.http()
    headers = {"x-api-key": api_key}
    started = time.perf_counter()
    reply = http.post(f"{base}/fast/v2/cloud-browser/create-cloud-browser-session", json={}, headers=headers,
                      timeout=120)
    reply.raise_for_status()
    session = reply.json()
    ws = websocket.create_connection(session["cdp_websocket_url"], timeout=60, suppress_origin=True,
                                     header=[f"{k}: {v}" for k, v in session["cdp_auth_headers"].items()])
    try:
        def cdp(call_id, method, params, page_session=None):
            ws.send(json.dumps({"id": call_id, "method": method, "params": params,
                                **({"sessionId": page_session} if page_session else {})}))
            while True:
                message = json.loads(ws.recv())
                if message.get("id") == call_id:
                    if "error" in message:
                        raise RuntimeError(f"{method}: {message['error']}")
                    return message["result"]

        target = next(t for t in cdp(1, "Target.getTargets", {})["targetInfos"] if t["type"] == "page")
        attached = cdp(2, "Target.attachToTarget", {"targetId": target["targetId"], "flatten": True})["sessionId"]
        cdp(3, "Page.navigate", {"url": page}, attached)
        elapsed = (time.perf_counter() - started) * 1000
    finally:
        ws.close()
        http.post(f"{base}/fast/v2/cloud-browser/stop-cloud-browser-session", json={"session_id": session["session_id"]},
                  headers=headers, timeout=120)
    return elapsed, session["session_id"]


def wait_session_pool_full(size, timeout=120):
    deadline = time.monotonic() + timeout
    while len(session_pool.ready({"VAR_DIR": os.environ["VAR_DIR"]})) < size:
        if time.monotonic() > deadline:
            raise RuntimeError("the session pool did not fill")
        time.sleep(0.05)


def measure_sessions(stack):
    """Kept session create → usable (HTTP answer, then a CDP Page.navigate answered through its relay), the worker's
    session pool at its default size (1, each round waits for it to be refilled) against SESSION_POOL_SIZE=0; the
    worker starts the browser, the web waits for it."""
    pages = browser.PageServer()
    page = f"{pages.base}/start"
    try:
        cold_worker = worker(stack, "session-pool-off-worker", 0, "SESSION_POOL_SIZE")
        session_usable(stack.web.url, stack.api_key, page)  # warm-up: imports, disk cache
        cold = [session_usable(stack.web.url, stack.api_key, page)[0] for _ in range(SESSION_RUNS)]
        stack.stop(cold_worker)
        pool_worker = worker(stack, "session-pool-worker", 1, "SESSION_POOL_SIZE")
        try:
            pooled = []
            for _ in range(SESSION_RUNS + 1):
                wait_session_pool_full(1)
                ready = set(session_pool.ready({"VAR_DIR": os.environ["VAR_DIR"]}))
                elapsed, session_id = session_usable(stack.web.url, stack.api_key, page)
                if session_id not in ready:
                    raise RuntimeError("a session did not come from the full pool")
                pooled.append(elapsed)
            pooled = pooled[1:]  # the first was the pooled worker's warm-up
            wait_session_pool_full(1)
            memory = [session_pool.pss_mib({"VAR_DIR": os.environ["VAR_DIR"]}, box)
                      for box in session_pool.ready({"VAR_DIR": os.environ["VAR_DIR"]}).values()]
        finally:
            stack.stop(pool_worker)
    finally:
        pages.close()
    return common.latency_rows(SECTION, "kept session create → CDP Page.navigate answered, pooled", pooled,
                               "the same, cold (SESSION_POOL_SIZE=0)", cold) + [
        Row(SECTION, "PSS of one idle pooled session browser, sandbox + egress proxy (MiB)",
            memory[0] if memory else None)]


if __name__ == "__main__":
    common.main(*([measure_sessions] if sys.argv[1:] == ["sessions"] else [measure, measure_sessions]))
