"""Webhooks end to end: a real task on a real worker, its webhook on the webhooks queue."""
import json
import time

import pytest
from standardwebhooks.webhooks import Webhook

from tests.conftest import WorkerProcess, attempts_of, delivery_of, poll, submit, wait_for_status, wait_until
from workers import sweeps

CLOUD = {"executionMode": "cloud"}
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def webhook_worker(app, webhook_ca):
    """Both queues; trusts the test CA; six attempts with no wait between them (beat's sweep,
    run by the tests themselves, decides when a retry goes out)."""
    proc = WorkerProcess(name="webhooks", env={
        "WEBHOOK_CA_BUNDLE": webhook_ca[1], "WEBHOOK_RETRY_SCHEDULE": "0,0,0,0,0,0",
        "WEBHOOK_RETRY_JITTER": "0"})
    yield proc
    proc.stop()


def _sweep_until(predicate, what):
    """Run beat's sweep (it publishes each retry as it falls due) until `predicate` holds."""
    return wait_until(lambda: sweeps.publish_due_webhooks() >= 0 and predicate(), what, timeout=60)


def _run(client, key, receiver, **fields):
    body = {"prompt": "answer Hello from the worker", **CLOUD, "callbackUrl": receiver.url, **fields}
    request_id = submit(client, key, body).get_json()["requestId"]
    assert wait_for_status(client, key, request_id)["status"] == "success"
    return request_id


def test_finished_task_is_delivered_signed_by_the_webhooks_worker(app, client, api_key, receiver,
                                                                   webhook_worker):
    request_id = _run(client, api_key, receiver, callbackSecret="s3cret",
                      callbackHeaders={"Authorization": "Bearer tok"})
    [received] = receiver.wait_for(1)
    secret = app.test_cli_runner().invoke(args=["keys", "webhook-secret", "alice"]).output.strip()
    body = Webhook(secret).verify(received.body, dict(received.headers))
    task = poll(client, api_key, request_id).get_json()
    assert body == {"requestId": request_id, "secret": "s3cret", "status": "success", "browserWindowId": None,
                    "response": {"text": "Hello from the worker"}, "createdAt": task["createdAt"],
                    "completedAt": task["completedAt"], "usage": task["usage"], "trigger": "api"}
    assert received.header("Authorization") == "Bearer tok"
    row = wait_until(lambda: (r := delivery_of(request_id)) and r.state == "delivered" and r, "delivered")
    assert received.header("webhook-id") == row.id


def test_receiver_down_for_several_attempts_then_up_gets_it_exactly_once(client, api_key, receiver,
                                                                         webhook_worker):
    receiver.stop()
    request_id = _run(client, api_key, receiver)
    webhook_id = wait_until(lambda: delivery_of(request_id), "the outbox row").id
    _sweep_until(lambda: len(attempts_of(webhook_id)) >= 3, "three failed attempts")
    receiver.start()
    _sweep_until(lambda: delivery_of(request_id).state == "delivered", "delivery after the receiver came back")
    for _ in range(3):  # later sweeps and stray messages send nothing more
        assert sweeps.publish_due_webhooks() == 0
    time.sleep(0.5)
    [received] = receiver.received
    assert received.header("webhook-id") == webhook_id
    attempts = attempts_of(webhook_id)
    assert all(a.status_code is None and "Connection refused" in a.error for a in attempts[:-1])
    assert len(attempts) >= 4 and attempts[-1].status_code == 200
    assert poll(client, api_key, request_id).get_json()["status"] == "success"


def test_failed_delivery_leaves_the_task_successful(client, api_key, receiver, webhook_worker):
    receiver.respond(410)
    request_id = _run(client, api_key, receiver)
    wait_until(lambda: (r := delivery_of(request_id)) and r.state == "failed", "the delivery to fail")
    assert len(receiver.received) == 1
    body = poll(client, api_key, request_id).get_json()
    assert body["status"] == "success" and body["response"]["text"] == "Hello from the worker"
    log = client.get(f"/fast/v2/remote-dispatch/responses/{request_id}/webhooks",
                     headers={"x-api-key": api_key}).get_json()
    assert [a["statusCode"] for a in log["deliveries"][0]["attempts"]] == [410]
    assert json.loads(receiver.received[0].body)["status"] == "success"


def test_deliveries_go_to_the_webhooks_queue_and_tasks_to_the_tasks_queue(app):
    from app.extensions import celery_init_app

    router = celery_init_app(app).amqp.router  # the workers' Celery: beat's sweeps route by task name
    assert router.route({}, "workers.deliver_webhook")["queue"].name == "webhooks"
    assert router.route({}, "workers.sweep_webhooks")["queue"].name == "control"  # beat's sweeps: app/broker.py ROUTES
    assert router.route({}, "workers.run_task")["queue"].name == "tasks"
