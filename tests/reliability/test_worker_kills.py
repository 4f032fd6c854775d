"""SIGKILL tasks workers during a burst: every accepted task still reaches a terminal state."""
import threading
import time

from sqlalchemy import select

from app.extensions import db
from app.models import Task
from tests.reliability.conftest import REPORT, submit_http, wait_all_terminal

BURST = 40


def test_every_task_survives_repeated_worker_kills(stack, dev_key):
    ids = []

    def burst():
        for n in range(BURST):
            response = submit_http(stack.base, dev_key, {"prompt": f"wait 0.5\nanswer task {n}",
                                                         "executionMode": "cloud"})
            assert response.status_code == 202, response.text
            ids.append(response.json()["requestId"])
            time.sleep(0.05)

    submitter = threading.Thread(target=burst)
    submitter.start()
    for kill in range(3):
        time.sleep(1.5)
        stack.replace_worker(kill % len(stack.workers))
    submitter.join()

    done = wait_all_terminal(stack.base, dev_key, ids)
    lost = [request_id for request_id in ids if request_id not in done]
    succeeded = [body for body in done.values() if body["status"] == "success"]
    # Each task finished once, with its own answer: a task run again after finishing would
    # have been refused by the compare-and-swap, so the stored answer is the first one.
    rows = db.session.execute(select(Task.id, Task.attempt, Task.status, Task.response)).all()
    wrong_answer = [r.id for r in rows if r.status == "success"
                    and r.response["text"] != f"task {ids.index(r.id)}"]
    REPORT["worker kills: tasks submitted / terminal / success / lost"] = (
        f"{len(ids)} / {len(done)} / {len(succeeded)} / {len(lost)}")
    REPORT["worker kills: tasks retried after a kill"] = sum(1 for r in rows if r.attempt > 1)
    assert not lost, f"tasks never finished: {lost}"
    assert not wrong_answer
    assert len(succeeded) == BURST, [b["response"]["text"] for b in done.values() if b["status"] == "error"]
