"""A pause that keeps the browser: what a paused task costs while it waits (memory per kept browser, worker slots,
rows), answer → next action with the browser kept vs restored from the snapshot (p50), and the snapshot itself (size,
time to take, time to restore).

Against the test services, like the suite: `TEST_DB=... TEST_VHOST=... .venv/bin/python -m bench.pause`
(`RUNS=` answers per way, default 5)."""
import json
import os
import statistics
import time
from datetime import datetime

import tests.conftest as suite  # the test services' settings, as the suite sets them, and its migrated app
from tests.page_server import PageServer
from tests.processes import WorkerProcess
from tests.test_pause_keeps_browser import ACCOUNT, CHECK, LOGIN

RUNS = int(os.environ.get("RUNS", "5"))
PROMPT = ["/Operator", "go to {base}/login", 'click "Sign in"', 'type "draft" into "Note"',
          "ask What is the code from your phone?", 'click "Save note"', "extract #state"]


def _stamp(ts):
    return datetime.fromisoformat(ts.replace("Z", "+00:00")).timestamp()


class Bench:
    def __init__(self, app, site):
        self.app, self.site, self.client = app, site, app.test_client()
        self.key = suite.make_key("bench")
        self.base = site.url().rstrip("/")

    def submit(self):
        reply = self.client.post("/fast/v2/remote-dispatch", headers={"x-api-key": self.key}, json={
            "prompt": "\n".join(PROMPT).format(base=self.base), "executionMode": "cloud_browser",
            "allowedDomains": [self.base.split("//")[1]]})
        return reply.get_json()["requestId"]

    def poll(self, request_id):
        return self.client.get(f"/fast/v2/remote-dispatch/responses/{request_id}",
                               headers={"x-api-key": self.key}).get_json()

    def until(self, request_id, statuses, timeout=120):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            body = self.poll(request_id)
            if body["status"] in statuses:
                return body
            time.sleep(0.05)
        raise RuntimeError(f"{request_id} still {body['status']}")

    def answer(self, request_id, body):
        answered = time.time()
        self.client.post(f"/fast/v2/remote-dispatch/responses/{request_id}/input", headers={"x-api-key": self.key},
                         json={"inputId": body["hitlInputMetadata"]["inputId"], "answer": "123456"})
        return answered

    def pause_and_answer(self):
        """(answer → the next action's end in seconds, the resume entry's ms, sealed snapshot chars, text)."""
        request_id = self.submit()
        asked = self.until(request_id, ("input-required", "error"))
        sealed = self.sealed(request_id)
        answered = self.answer(request_id, asked)
        body = self.until(request_id, ("success", "error"))
        trace = body["response"]["actionTrace"]
        at = next(i for i, entry in enumerate(trace) if entry["action"].startswith("resumed"))
        return (_stamp(trace[at + 1]["endTs"]) - answered, trace[at]["durationMs"], sealed,
                body["response"]["text"], trace[at]["action"])

    def sealed(self, request_id):
        from sqlalchemy import text

        from app.extensions import db

        with self.app.app_context():
            value = db.session.execute(text("SELECT pause_snapshot FROM tasks WHERE id = :id"),
                                       {"id": request_id}).scalar()
            db.session.remove()
        return len(value or "")


def kept_memory(bench):
    """Three tasks paused at once: the PSS of each kept browser (its sandbox's processes and its egress proxy)."""
    from workers.browser import parking, pool

    ids = [bench.submit() for _ in range(3)]
    asked = {request_id: bench.until(request_id, ("input-required", "error")) for request_id in ids}
    root = parking.parked_root(os.environ["VAR_DIR"])
    boxes = [pool.PooledBox(**json.loads((root / f"{request_id}.json").read_text())["box"]) for request_id in ids]
    mib = [pool.pss_mib(box) for box in boxes]
    for request_id in ids:
        bench.answer(request_id, asked[request_id])
    for request_id in ids:
        bench.until(request_id, ("success", "error"))
    return mib


def snapshot_times(app, site):
    """Take a snapshot of a signed-in browser and restore it into a fresh one, in this process (no worker)."""
    from workers.browser.egress import BrowserEgressProxy
    from workers.browser.selenium_driver import SeleniumBrowser

    take, restore, size = [], [], []
    for _ in range(RUNS):
        proxies = [BrowserEgressProxy(app.config, "bench-pause").start().wait_ready() for _ in range(2)]
        one = SeleniumBrowser(label="bench-pause-a", proxy=proxies[0].address)
        two = SeleniumBrowser(label="bench-pause-b", proxy=proxies[1].address)
        try:
            one.open(site.url("/login"))
            one.click("Sign in")
            began = time.perf_counter()
            state = one.snapshot()
            take.append(time.perf_counter() - began)
            size.append(len(json.dumps(state)))
            began = time.perf_counter()
            two.restore(state)
            restore.append(time.perf_counter() - began)
        finally:
            one.close()
            two.close()
            for proxy in proxies:
                proxy.stop()
    return statistics.median(take), statistics.median(restore), statistics.median(size)


def main():
    app = suite.migrated_app()
    site = PageServer({"/login": LOGIN, "/account": ACCOUNT, "/check": CHECK})
    with app.app_context():
        bench = Bench(app, site)
    figures = Figures()
    for way, keep in (("kept", "900"), ("restored", "0")):
        worker = WorkerProcess(queues="tasks", concurrency=2, env={"INPUT_KEEP_BROWSER_SECONDS": keep},
                               name=f"bench-{way}")
        try:
            with app.app_context():
                runs = [bench.pause_and_answer() for _ in range(RUNS)]
                if way == "kept":
                    figures["kept browser PSS MiB (3 paused at once)"] = [round(m) for m in kept_memory(bench)]
        finally:
            worker.stop()
        assert all(text.startswith("cookie=yes local=yes session=yes") for _, _, _, text, _ in runs), runs
        figures[f"answer -> next action p50 s ({way})"] = round(statistics.median(r[0] for r in runs), 3)
        figures[f"resume entry p50 ms ({way})"] = statistics.median(r[1] for r in runs)
        figures["sealed snapshot chars (in the task row)"] = runs[0][2]
    take, restore, size = snapshot_times(app, site)
    figures["snapshot take p50 ms"] = round(take * 1000, 1)
    figures["snapshot restore p50 ms (cookies, storage, its tab loaded)"] = round(restore * 1000, 1)
    figures["snapshot JSON bytes"] = size
    site.close()


class Figures(dict):
    """Printed as each is measured."""

    def __setitem__(self, name, value):
        print(f"{name}: {value}", flush=True)
        super().__setitem__(name, value)


if __name__ == "__main__":
    main()
