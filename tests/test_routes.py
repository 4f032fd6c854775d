"""Routes once (app/broker.py ROUTES): every task a worker runs has its queue in the one table, Celery routes by it,
and what the web and beat publish lands in the queue the table names, read back from RabbitMQ itself. No worker
runs here, so each message waits in its queue to be read."""
import json
import subprocess
import sys

import pytest

from app.broker import QUEUES, ROUTES
from tests.conftest import submit, wait_until
from tests.processes import ROOT, BeatProcess

CELERY_ROUTES = """
import json
from workers.celery import app
print(json.dumps({"registered": sorted(n for n in app.tasks if not n.startswith("celery.")),
                  "routed": {n: app.amqp.router.route({}, n)["queue"].name for n in app.tasks},
                  "beat": sorted({entry["task"] for entry in app.conf.beat_schedule.values()})}))
"""


def waiting(app, queue, timeout=1):
    """The task names of the messages waiting in `queue`, taken off it (acknowledged): until none comes for `timeout`
    seconds, or (timeout 0) those there now."""
    names = []
    with app.extensions["broker"].connection() as conn:
        with conn.SimpleQueue(queue) as simple:
            while True:
                try:
                    message = simple.get(timeout=timeout) if timeout else simple.get_nowait()
                except simple.Empty:
                    return names
                names.append(message.headers["task"])
                message.ack()


@pytest.fixture(scope="module")
def celery():
    """What Celery itself makes of the workers' app: its tasks, the queue it routes each to, beat's schedule."""
    done = subprocess.run([sys.executable, "-c", CELERY_ROUTES], cwd=ROOT, capture_output=True, text=True,
                          timeout=120, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_every_task_a_worker_runs_is_routed_by_the_one_table(celery):
    assert set(celery["registered"]) == set(ROUTES)  # no task without a queue, no queue for a task gone
    assert {name: celery["routed"][name] for name in ROUTES} == ROUTES
    assert set(ROUTES.values()) == set(QUEUES)
    # beat's sweeps are short work: none waits behind an agent's run or a slow webhook receiver
    assert {ROUTES[name] for name in celery["beat"]} == {"control"}


def test_what_the_web_publishes_waits_in_the_queue_of_its_work(app, client, api_key):
    from app.sessions.service import publish_action
    from app.webhooks.outbox import publish
    from app.windows.service import WORKBOOK_TASK

    assert submit(client, api_key, {"prompt": "answer routed", "executionMode": "cloud"}).status_code == 202
    assert publish("whd_routed")
    publish_action(WORKBOOK_TASK, ["cmd_routed"])
    assert {queue: waiting(app, queue) for queue in QUEUES} == {
        "tasks": ["workers.run_task"], "webhooks": ["workers.deliver_webhook"], "control": [WORKBOOK_TASK]}


def test_beats_sweeps_wait_in_the_control_queue_only(app, celery):
    def messages(queue):
        with app.extensions["broker"].connection() as conn:
            try:
                return conn.default_channel.queue_declare(queue=queue, passive=True)[1]
            except conn.channel_errors:  # not declared yet: beat has sent nothing there
                return 0

    swept = []

    def read_until_the_dispatch_sweep():
        swept.extend(waiting(app, "control", timeout=0))  # beat keeps sending: take what is there
        return "workers.sweep_undispatched" in swept

    beat = BeatProcess(env={"SWEEP_INTERVAL_SECONDS": "1"})
    try:
        # Beat declares the queue with its first message; which sweep it sends first is its own order.
        wait_until(lambda: messages("control") >= 1, "beat's first sweep in the control queue", timeout=30)
        wait_until(read_until_the_dispatch_sweep, "the dispatch sweep in the control queue", timeout=30)
    finally:
        beat.stop()
    swept.extend(waiting(app, "control"))
    assert set(swept) <= set(celery["beat"])
    assert waiting(app, "tasks") == [] and waiting(app, "webhooks") == []
