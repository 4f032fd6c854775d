"""The webhook receiver is down for the first attempts: every event arrives once, same webhook-id."""
import json

from app.extensions import db
from app.models import WebhookAttempt
from tests.conftest import delivery_of, wait_until
from tests.reliability.conftest import REPORT, submit_http, wait_all_terminal

TASKS = 5


def test_events_survive_a_receiver_outage(stack, dev_key, receiver):
    receiver.stop()
    ids = [submit_http(stack.base, dev_key, {"prompt": f"answer event {n}", "executionMode": "cloud",
                                            "callbackUrl": receiver.url}).json()["requestId"]
           for n in range(TASKS)]
    assert len(wait_all_terminal(stack.base, dev_key, ids)) == TASKS
    # beat's sweep retries on the compressed schedule; let every delivery fail a few times
    wait_until(lambda: db.session.query(WebhookAttempt).count() >= 3 * TASKS, "three failed attempts each")
    receiver.start()
    wait_until(lambda: all((d := delivery_of(i)) and d.state == "delivered" for i in ids),
               "every delivery after the receiver came back", timeout=60)
    by_task = {}
    for received in receiver.received:
        by_task.setdefault(json.loads(received.body)["requestId"], []).append(received.header("webhook-id"))
    REPORT["webhook outage: events / delivered / duplicated"] = (
        f"{TASKS} / {len(by_task)} / {sum(len(v) - 1 for v in by_task.values())}")
    assert sorted(by_task) == sorted(ids)
    assert all(len(v) == 1 and v[0] == delivery_of(i).id for i, v in by_task.items())
