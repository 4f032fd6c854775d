"""The warm browser pool (docs/browser-pool.md): pooled browsers give the same results as cold ones, each serves one
task and shows it nothing of another's, waits with the recorder its task adopts, a task's fence holds on them, a burst
beyond the pool starts cold, a dead pooled browser is never handed out, and none is left after its worker is stopped
or SIGKILLed."""
import json
import os
import re
import signal

import pytest

from app.sandbox import processes as sandbox_processes
from tests.browser_pages import Canary, RecordingServer
from tests.conftest import submit, wait_for_status, wait_until
from tests.identity_pages import STILL_SEEN, IdentityServer, detect_steps, detections
from tests.processes import WorkerProcess
from tests.upstream_proxies import BasicAuthProxy
from workers.browser.egress import our_proxies
from workers.browser.pool import _add_recorder, pool_root, ready_boxes

pytestmark = pytest.mark.slow
POOL_SIZE = 2
CHECK = """<html><head><title>Check</title><script src="/cached.js"></script></head><body><p id="state"></p>
<script>document.getElementById("state").textContent = "cookies=[" + document.cookie + "] storage=" +
  localStorage.length + " history=" + history.length + " cached=" + (window.cachedRuns || 0) +
  " zone=" + Intl.DateTimeFormat().resolvedOptions().timeZone;</script></body></html>"""
SET = """<html><head><title>Set</title><script src="/cached.js"></script></head><body><p>set</p><script>
localStorage.setItem("rd-left", "task one"); document.cookie = "rd_js=one; max-age=3600";
history.pushState({}, "", "/set#pushed");</script></body></html>"""
# The recorders the page can see (rrweb.js names its object __rd<random>, in an isolated world): none
RECORDER = """<html><head><title>Recorder</title></head><body><p id="state"></p><script>
document.getElementById("state").textContent = Object.getOwnPropertyNames(window).filter(function (name) {
  return name.indexOf("__rd") === 0; }).join(",") || "none";</script></body></html>"""
# chromedriver's blank first page, then the check page, in the default time zone of a task
FRESH = "cookies=[] storage=0 history=2 cached=1 zone=America/Los_Angeles"


@pytest.fixture(scope="module")
def pages():
    server = RecordingServer({
        "/check": CHECK, "/set": (200, {"Set-Cookie": "rd_server=one; Max-Age=3600; Path=/"}, SET),
        "/cached.js": (200, {"Content-Type": "application/javascript", "Cache-Control": "max-age=3600"},
                       "window.cachedRuns = (window.cachedRuns || 0) + 1;"),
        "/recorder": RECORDER,
        "/reach-out": "<html><head><title>Reach out</title></head><body><p>inside</p></body></html>",
        "/download": "<html><head><title>Download</title></head><body>"
                     "<a href='/reach-out' download='notes.html'>Get the notes</a></body></html>"})
    yield server
    server.close()


def pooled_browsers():
    """Ready pooled boxes: {folder name: PooledBox}."""
    return ready_boxes(os.environ["VAR_DIR"])


def pool_processes():
    """Processes of pooled browsers (ready or handed out) under this run's VAR_DIR."""
    root = str(pool_root(os.environ["VAR_DIR"]))
    return sandbox_processes.processes_under(root)


def pool_full():
    return len(pooled_browsers()) == POOL_SIZE


def taken(worker):
    """Names of the pooled boxes the worker's tasks took, in order."""
    return re.findall(r"taken from the pool \((\w+)\)", worker.output())


def run(client, api_key, prompt, **extra):
    request_id = submit(client, api_key, {"executionMode": "cloud_browser", "prompt": prompt, **extra}
                        ).get_json()["requestId"]
    return wait_for_status(client, api_key, request_id, timeout=120)


def check_prompt(pages, first=()):
    return "\n".join(["/Operator", *first, f"go to {pages.url('/check')}", "extract #state"])


@pytest.fixture(scope="module")
def pool_worker(app):
    worker = WorkerProcess(queues="tasks", concurrency=2, name="pool",
                           env={"BROWSER_POOL_SIZE": str(POOL_SIZE)})
    wait_until(pool_full, what="the pool to fill", timeout=90)
    yield worker
    worker.stop()
    # Stopped: its pooled browsers end with it.
    wait_until(lambda: not pool_processes(), what="the pooled browsers to end with their worker", timeout=30)


def downloaded(client, api_key, body):
    """The task's downloads, as files of the key (the worker's disk keeps none of them)."""
    folder = os.path.join(os.environ["VAR_DIR"], "downloads", "remote-dispatch", body["requestId"])
    assert not os.path.exists(folder)
    return {item["filename"]: client.get(f"/fast/v2/files/{item['key']}", headers={"x-api-key": api_key}).text
            for item in body["response"]["files"]}


def test_a_pooled_task_gives_what_a_cold_one_gives_and_size_0_is_today(client, api_key, pages, request):
    prompt = check_prompt(pages, [f"go to {pages.url('/download')}", 'click "Get the notes"', "wait 1"])
    cold = WorkerProcess(queues="tasks", concurrency=1, name="pool-off", env={"BROWSER_POOL_SIZE": "0"})
    try:
        cold_body = run(client, api_key, prompt, timeZone="Europe/Paris")
        assert not pool_root(os.environ["VAR_DIR"]).exists() or not pooled_browsers()
        assert "taken from the pool" not in cold.output()
    finally:
        cold.stop()
    worker = request.getfixturevalue("pool_worker")
    pooled_body = run(client, api_key, prompt, timeZone="Europe/Paris")
    assert len(taken(worker)) == 1
    for body in (cold_body, pooled_body):
        assert body["status"] == "success", body
        assert body["response"]["text"] == FRESH.replace("history=2", "history=3").replace(
            "America/Los_Angeles", "Europe/Paris")
        assert downloaded(client, api_key, body) == {"notes.html": pages.pages["/reach-out"]}
    assert [(e["action"], e["url"]) for e in cold_body["response"]["actionTrace"]] == \
        [(e["action"], e["url"]) for e in pooled_body["response"]["actionTrace"]]
    wait_until(pool_full, what="the pool to refill", timeout=60)


def test_two_tasks_in_a_row_through_the_pool_see_nothing_of_each_other(client, api_key, pages, pool_worker):
    before = len(taken(pool_worker))
    first = run(client, api_key, check_prompt(pages, [f"go to {pages.url('/set')}"]))
    assert first["status"] == "success", first
    state = first["response"]["text"]
    assert "rd_server=one" in state and "rd_js=one" in state and "storage=1" in state, state
    wait_until(pool_full, what="the pool to refill", timeout=60)
    second = run(client, api_key, check_prompt(pages))
    assert second["status"] == "success", second
    assert second["response"]["text"] == FRESH  # no cookie, storage, history or cached script of the first
    names = taken(pool_worker)[before:]
    assert len(names) == 2 and names[0] != names[1]
    assert [path for path, _ in pages.requests].count("/cached.js") >= 3  # fetched again by the second task


def test_a_pooled_browser_waits_with_its_recorder_and_its_task_adopts_it(client, api_key, pages, pool_worker):
    ready = wait_until(lambda: pool_full() and pooled_browsers(), what="the pool to fill", timeout=60)
    names = {box.recorder["name"] for box in ready.values()}  # added while it waited, each under a name of its own
    assert len(names) == POOL_SIZE and all(name.startswith("__rd") for name in names)
    body = run(client, api_key, "\n".join(["/Operator", f"go to {pages.url('/recorder')}", "extract #state"]))
    assert body["status"] == "success", body
    assert body["response"]["text"] == "none"  # the pool's recorder runs where the page cannot see it...
    recording = client.get(f"/fast/v2/remote-dispatch/responses/{body['requestId']}/recording",
                           headers={"x-api-key": api_key}).get_json()
    assert 2 in {e["type"] for e in recording["events"]}  # ...and recorded the first page's full snapshot
    assert '"none"' in json.dumps(recording["events"])
    assert [m["action"] for m in recording["markers"]][:2] == ["go_to", "extract"]


def test_with_recordings_off_a_pooled_browser_gets_no_recorder():
    class NoCalls:
        def execute(self, *args):
            raise AssertionError(f"a WebDriver call: {args}")

    assert _add_recorder({"RECORDINGS": False, "RRWEB_DIR": "/nowhere"}, NoCalls()) is None
    assert _add_recorder({"RECORDINGS": True, "RRWEB_DIR": "/nowhere"}, NoCalls()) is None  # rrweb missing


def test_a_fenced_task_on_a_pooled_browser_is_fenced(client, api_key, pages, pool_worker):
    canary = Canary()
    try:
        wait_until(pool_full, what="the pool to fill", timeout=60)
        before = len(taken(pool_worker))
        body = run(client, api_key, "\n".join(["/Operator", f"go to {pages.url('/reach-out')}",
                                               f"go to http://127.0.0.1:{canary.port}/typed"]),
                   allowedDomains=[f"127.0.0.1:{pages.port}"])
        assert len(taken(pool_worker)) == before + 1
        assert body["status"] == "error", body
        assert "not in the task's allowedDomains" in body["response"]["text"], body["response"]["text"]
        assert canary.connections == []
        # The fence was this task's only: the next pooled browser is not fenced.
        wait_until(pool_full, what="the pool to refill", timeout=60)
        open_body = run(client, api_key, "\n".join(["/Operator", f"go to http://127.0.0.1:{canary.port}/typed"]))
        assert canary.connections, open_body
    finally:
        canary.close()


def test_a_task_with_a_proxy_on_a_pooled_browser_goes_through_it(client, api_key, pages, pool_worker):
    """The pooled browser's egress proxy started before its task: the task's proxy reaches it at the claim."""
    caller = BasicAuthProxy("pool", "pooled-secret")
    try:
        wait_until(pool_full, what="the pool to fill", timeout=60)
        before = len(taken(pool_worker))
        body = run(client, api_key, check_prompt(pages),
                   proxy={"server": caller.server, "username": "pool", "password": "pooled-secret"})
        assert len(taken(pool_worker)) == before + 1
        assert body["status"] == "success" and body["response"]["text"] == FRESH, body
        assert [e["target"] for e in caller.forwarded()][:1] == [pages.url("/check")], caller.log
        # The proxy was this task's only: the next pooled browser connects directly.
        wait_until(pool_full, what="the pool to refill", timeout=60)
        seen = len(caller.log)
        assert run(client, api_key, check_prompt(pages))["status"] == "success"
        assert len(caller.log) == seen
    finally:
        caller.close()


def test_a_burst_of_three_times_the_pool_all_succeed(client, api_key, pages, pool_worker):
    wait_until(pool_full, what="the pool to fill", timeout=60)
    before = len(taken(pool_worker))
    ids = [submit(client, api_key, {"executionMode": "cloud_browser", "prompt": check_prompt(pages)}
                  ).get_json()["requestId"] for _ in range(3 * POOL_SIZE)]
    bodies = [wait_for_status(client, api_key, request_id, timeout=180) for request_id in ids]
    assert [b["status"] for b in bodies] == ["success"] * len(ids), bodies
    assert {b["response"]["text"] for b in bodies} == {FRESH}
    names = taken(pool_worker)[before:]
    assert len(names) == len(set(names)) >= POOL_SIZE  # each pooled browser once; the rest started cold


def test_a_pooled_browser_that_died_is_noticed_and_never_handed_out(client, api_key, pages, pool_worker):
    ready = wait_until(lambda: pool_full() and pooled_browsers(), what="the pool to fill", timeout=60)
    for box in ready.values():
        os.kill(box.chromium_pid, signal.SIGKILL)
    body = run(client, api_key, check_prompt(pages))
    assert body["status"] == "success" and body["response"]["text"] == FRESH, body
    assert not set(ready) & set(taken(pool_worker))
    # Replaced: the pool fills again with new browsers, and the dead ones' folders are gone.
    wait_until(lambda: pool_full() and not set(ready) & set(pooled_browsers()), what="new pooled browsers",
               timeout=60)
    assert not any((pool_root(os.environ["VAR_DIR"]) / name).exists() for name in ready)


def test_a_pooled_browser_shows_the_detectors_no_automation(client, api_key, pool_worker):
    """BotD and fpscanner in a pooled browser's page, as in a cold one's (docs/browser-identity.md)."""
    site = IdentityServer()
    try:
        before = len(taken(pool_worker))
        body = run(client, api_key, detect_steps(site))
        assert body["status"] == "success", body
        assert len(taken(pool_worker)) == before + 1
        found = site.wait("detect")
        assert set(detections(found)) == STILL_SEEN and found["botd"] == {"bot": False}
    finally:
        site.close()


def test_after_a_sigkill_of_the_worker_and_a_restart_no_pooled_browser_remains(app, pool_worker):
    pool_worker.stop()  # the module's worker is done; this test has its own
    doomed = WorkerProcess(queues="tasks", concurrency=1, name="pool-doomed", env={"BROWSER_POOL_SIZE": "2"})
    try:
        wait_until(pool_full, what="the pool to fill", timeout=90)
        pids = set(pool_processes())
        assert pids
    finally:
        doomed.kill()
    rescuer = WorkerProcess(queues="webhooks", concurrency=1, name="pool-rescuer", env={"BROWSER_POOL_SIZE": "0"})
    try:
        wait_until(lambda: not pool_processes(), what="every pooled browser process to end", timeout=60)
        assert not [pid for pid in pids if sandbox_processes.alive(pid)]
        wait_until(lambda: not [pid for pid, owner in our_proxies({"VAR_DIR": os.environ["VAR_DIR"]}).items()
                                if owner == doomed.proc.pid], what="the pool's egress proxies to end", timeout=60)
        wait_until(lambda: not os.listdir(pool_root(os.environ["VAR_DIR"])) or
                   os.listdir(pool_root(os.environ["VAR_DIR"])) == ["manager.lock"],
                   what="the pooled browsers' folders to be removed", timeout=60)
    finally:
        rescuer.stop()

