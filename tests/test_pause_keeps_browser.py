"""A pause keeps the browser: at `input-required` a cloud_browser task's browser is parked on its machine, holding no
worker slot, and the answer resumes that browser; once it is let go (INPUT_KEEP_BROWSER_SECONDS, a worker restart)
the answer resumes in a fresh browser with the pause's encrypted snapshot (cookies, storage, tabs) restored."""
import os
import time

import pytest
from sqlalchemy import select

from app.extensions import db
from app.models import Task
from tests.conftest import WorkerProcess, make_key, poll, submit, wait_for_status, wait_until
from tests.page_server import PageServer
from workers.browser.parking import parked_root

pytestmark = pytest.mark.slow
SID = "s3cr3t-session-id"
LOGIN = f"""<html><head><title>Sign in</title></head><body><h1>Sign in</h1>
<button onclick="document.cookie = 'sid={SID}; path=/'; localStorage.setItem('token', 't0k');
  sessionStorage.setItem('tab', 'one'); location.href = '/account';">Sign in</button></body></html>"""
ACCOUNT = """<html><head><title>Account</title></head><body><h1>Account</h1>
<label for="note">Note</label> <input id="note">
<button onclick="location.href = '/check?note=' + encodeURIComponent(document.getElementById('note').value)">Save note</button>
</body></html>"""
# The next page: what it sees of the sign-in (cookie, localStorage, sessionStorage) and of the form it was sent from.
CHECK = f"""<html><head><title>Check</title></head><body><h1>Check</h1><p id="state"></p><script>
document.getElementById('state').textContent =
  'cookie=' + (document.cookie.indexOf('sid={SID}') >= 0 ? 'yes' : 'no') +
  ' local=' + (localStorage.getItem('token') === 't0k' ? 'yes' : 'no') +
  ' session=' + (sessionStorage.getItem('tab') === 'one' ? 'yes' : 'no') +
  ' note=' + new URLSearchParams(location.search).get('note');
</script></body></html>"""
KEPT = "resumed in the browser kept since the pause (same tabs, page, cookies and storage)"
RESTORED = ("resumed in a fresh browser with the pause's snapshot restored (cookies, storage, tabs): "
            "the kept browser had been let go")


@pytest.fixture(scope="module")
def site():
    server = PageServer({"/login": LOGIN, "/account": ACCOUNT, "/check": CHECK})
    yield server
    server.close()


def sign_in_and_ask(client, api_key, site, note="draft"):
    """Sign in (cookie, localStorage, sessionStorage), type into a form, ask; after the answer, send the form."""
    port = site.url().rsplit(":", 1)[1].strip("/")
    prompt = "\n".join(["/Operator", f"go to {site.url('/login')}", 'click "Sign in"', f'type "{note}" into "Note"',
                        "ask What is the code from your phone?", 'click "Save note"', "extract #state"])
    request_id = submit(client, api_key, {"prompt": prompt, "executionMode": "cloud_browser",
                                          "allowedDomains": [f"127.0.0.1:{port}"]}).get_json()["requestId"]
    return request_id


def paused(client, api_key, request_id):
    body = wait_for_status(client, api_key, request_id, statuses=("input-required", "success", "error"), timeout=90)
    assert body["status"] == "input-required", body
    return body


def answer(client, api_key, request_id, body, text="123456"):
    reply = client.post(f"/fast/v2/remote-dispatch/responses/{request_id}/input", headers={"x-api-key": api_key},
                        json={"inputId": body["hitlInputMetadata"]["inputId"], "answer": text})
    assert reply.status_code == 202, reply.get_json()


def stored(request_id):
    db.session.remove()
    return db.session.execute(select(Task).where(Task.id == request_id)).scalar_one()


def parked(request_id):
    return (parked_root(os.environ["VAR_DIR"]) / f"{request_id}.json").exists()


def actions(body):
    return [entry["action"] for entry in body["response"]["actionTrace"]]


def test_the_answer_resumes_the_browser_kept_at_the_pause(client, api_key, site):
    worker = WorkerProcess(queues="tasks", concurrency=1, env={"BROWSER_POOL_SIZE": "1"}, name="pause")
    try:
        request_id = sign_in_and_ask(client, api_key, site)
        asked = paused(client, api_key, request_id)
        assert parked(request_id)
        task = stored(request_id)
        assert task.browser_node and task.browser_node.startswith("pause-")  # the worker that keeps it
        assert task.pause_snapshot and SID not in task.pause_snapshot  # sealed
        time.sleep(3)
        answer(client, api_key, request_id, asked)
        body = wait_for_status(client, api_key, request_id, timeout=90)
        assert body["status"] == "success", body
        # The same browser: the cookie and both storages, and the text typed into the form before the pause.
        assert body["response"]["text"] == "cookie=yes local=yes session=yes note=draft"
        assert KEPT in actions(body)
        assert not parked(request_id)
        task = stored(request_id)
        assert task.pause_snapshot is None and task.browser_node is None  # deleted when the task ended
        assert SID not in worker.output()
    finally:
        worker.stop()


def test_an_answer_after_the_browser_was_let_go_resumes_from_the_snapshot(client, api_key, site):
    worker = WorkerProcess(queues="tasks", concurrency=1, env={"INPUT_KEEP_BROWSER_SECONDS": "2"}, name="letgo")
    try:
        request_id = sign_in_and_ask(client, api_key, site)
        asked = paused(client, api_key, request_id)
        # The machine's sweep lets the browser go and says so: the answer may go to any worker now.
        wait_until(lambda: not parked(request_id) and stored(request_id).browser_node is None,
                   what="the kept browser to be let go", timeout=30)
        assert stored(request_id).pause_snapshot
        site.requests.clear()
        answer(client, api_key, request_id, asked)
        body = wait_for_status(client, api_key, request_id, timeout=90)
        assert body["status"] == "success", body
        # A fresh browser: the sign-in is back (cookie, localStorage, sessionStorage) on the page of the pause; what
        # was typed into the form was in the old page only.
        assert body["response"]["text"] == "cookie=yes local=yes session=yes note="
        assert [path for path in site.requests if path != "/favicon.ico"][:2] == ["/account", "/check?note="]
        assert RESTORED in actions(body)
        assert stored(request_id).pause_snapshot is None
        assert SID not in worker.output()
    finally:
        worker.stop()


def test_a_restart_of_the_worker_while_the_task_waits_resumes_from_the_snapshot(client, api_key, site):
    worker = WorkerProcess(queues="tasks", concurrency=1, name="before")
    try:
        request_id = sign_in_and_ask(client, api_key, site)
        asked = paused(client, api_key, request_id)
        assert parked(request_id)
    finally:
        worker.stop()
    worker = WorkerProcess(queues="tasks", concurrency=1, name="after")
    try:
        answer(client, api_key, request_id, asked)
        body = wait_for_status(client, api_key, request_id, timeout=90)
        assert body["status"] == "success", body
        assert body["response"]["text"] == "cookie=yes local=yes session=yes note="
        assert RESTORED in actions(body)
    finally:
        worker.stop()


def test_paused_tasks_hold_no_worker_slot(client, api_key, site):
    worker = WorkerProcess(queues="tasks", concurrency=2, name="slots", env={"PARKED_BROWSERS_PER_KEY": "3"})
    try:
        waiting = [sign_in_and_ask(client, api_key, site, note=f"draft{n}") for n in range(3)]
        asked = {request_id: paused(client, api_key, request_id) for request_id in waiting}
        assert all(parked(request_id) for request_id in waiting)
        # Three browsers kept, and a worker of concurrency 2 runs another task at once (in a browser of its own).
        other = submit(client, api_key, {"prompt": f"/Operator\ngo to {site.url('/check')}\nextract #state",
                                         "executionMode": "cloud_browser"}).get_json()["requestId"]
        body = wait_for_status(client, api_key, other, timeout=90)
        assert body["status"] == "success", body
        assert body["response"]["text"] == "cookie=no local=no session=no note=null"
        assert all(poll(client, api_key, request_id).get_json()["status"] == "input-required" for request_id in waiting)
        for request_id in waiting:
            answer(client, api_key, request_id, asked[request_id])
        for n, request_id in enumerate(waiting):
            body = wait_for_status(client, api_key, request_id, timeout=120)
            assert body["status"] == "success", body
            assert body["response"]["text"] == f"cookie=yes local=yes session=yes note=draft{n}"
            assert KEPT in actions(body)
    finally:
        worker.stop()


def test_the_answer_goes_to_the_machine_that_keeps_the_browser(client, api_key, site, tmp_path):
    keeper = WorkerProcess(queues="tasks", concurrency=1, name="keeper")
    other = None
    try:
        request_id = sign_in_and_ask(client, api_key, site)
        asked = paused(client, api_key, request_id)
        # Another machine (a VAR_DIR of its own: it cannot see this one's browsers), idle, consuming the same queue.
        other = WorkerProcess(queues="tasks", concurrency=1, env={"VAR_DIR": str(tmp_path)}, name="elsewhere")
        answer(client, api_key, request_id, asked)
        body = wait_for_status(client, api_key, request_id, timeout=90)
        assert body["status"] == "success", body
        assert body["response"]["text"] == "cookie=yes local=yes session=yes note=draft"
        assert KEPT in actions(body)
        assert request_id not in other.output()
    finally:
        keeper.stop()
        if other is not None:
            other.stop()


def test_a_task_cancelled_while_it_waits_lets_its_kept_browser_go(client, api_key, site):
    from workers.browser.reaper import our_browser_processes

    worker = WorkerProcess(queues="tasks", concurrency=1, name="cancel")
    try:
        request_id = sign_in_and_ask(client, api_key, site)
        paused(client, api_key, request_id)
        assert parked(request_id) and our_browser_processes(os.environ["VAR_DIR"])
        reply = client.post(f"/fast/v2/remote-dispatch/responses/{request_id}/cancel", headers={"x-api-key": api_key})
        assert reply.status_code in (200, 202), reply.get_json()
        assert poll(client, api_key, request_id).get_json()["status"] == "error"
        wait_until(lambda: not parked(request_id) and not our_browser_processes(os.environ["VAR_DIR"]),
                   what="the kept browser to be let go", timeout=30)
        assert stored(request_id).pause_snapshot is None
    finally:
        worker.stop()


def test_parked_browsers_are_capped_per_key_and_per_machine(client, api_key, other_key, site):
    """One key's unanswered questions cannot hold a machine's memory: past PARKED_BROWSERS_PER_KEY (a key's) or
    PARKED_BROWSERS_MAX (the machine's), a pause keeps its snapshot and lets the browser go at once."""
    third_key = make_key("carol")
    worker = WorkerProcess(queues="tasks", concurrency=1, name="parkcap",
                           env={"PARKED_BROWSERS_PER_KEY": "1", "PARKED_BROWSERS_MAX": "2"})
    try:
        first = sign_in_and_ask(client, api_key, site)
        paused(client, api_key, first)
        assert parked(first) and stored(first).browser_node
        second = sign_in_and_ask(client, api_key, site)  # the same key's second: past its own cap
        asked = paused(client, api_key, second)
        assert not parked(second) and stored(second).browser_node is None and stored(second).pause_snapshot
        theirs = sign_in_and_ask(client, other_key, site)  # another key's first: kept (the machine holds two)
        paused(client, other_key, theirs)
        assert parked(theirs)
        third = sign_in_and_ask(client, third_key, site)  # a third key's first: past the machine's cap
        paused(client, third_key, third)
        assert not parked(third) and stored(third).browser_node is None
        # The browser let go at the pause: the answer resumes from the snapshot, signed in.
        answer(client, api_key, second, asked)
        body = wait_for_status(client, api_key, second, timeout=90)
        assert body["status"] == "success", body
        assert body["response"]["text"] == "cookie=yes local=yes session=yes note="
        assert RESTORED in actions(body)
    finally:
        worker.stop()
