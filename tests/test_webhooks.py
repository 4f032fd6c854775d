"""Webhook delivery against a real HTTPS receiver: payload, signatures, retries, log, redelivery.

Deliveries run in this process through the same function the Celery task wraps; the
end-to-end path through a worker is in test_webhook_pipeline.py.
"""
import json
import threading
from datetime import timedelta

import pytest
from sqlalchemy import select, update
from standardwebhooks.webhooks import Webhook

from app import lifecycle
from app.extensions import db
from app.models import ApiKey, Task, WebhookDelivery, now_plus
from app.webhooks import delivery
from tests.conftest import attempts_of, delivery_of, make_key, poll, submit
from workers import sweeps, webhooks

CLOUD = {"executionMode": "cloud"}
HELLO = {"output": {"type": "text", "content": "Hello"}, "actionTrace": [], "text": "Hello",
         "structuredOutput": None}
USAGE = {"actions": 1, "credits": 1.0}


@pytest.fixture(autouse=True)
def webhook_settings(app, monkeypatch, webhook_ca):
    monkeypatch.setitem(app.config, "WEBHOOK_CA_BUNDLE", webhook_ca[1])
    monkeypatch.setitem(app.config, "WEBHOOK_RETRY_SCHEDULE", (0, 0, 0, 0))
    monkeypatch.setitem(app.config, "WEBHOOK_RETRY_JITTER", 0.0)


def finished(client, key, receiver, status="success", response=HELLO, **fields):
    """A task submitted with a callback and finished; returns (requestId, webhook-id)."""
    body = {"prompt": "answer Hello", **CLOUD, "callbackUrl": receiver.url, **fields}
    request_id = submit(client, key, body).get_json()["requestId"]
    assert lifecycle.finish(request_id, status, response, USAGE)
    return request_id, delivery_of(request_id).id


def signing_secret(app, name="alice"):
    result = app.test_cli_runner().invoke(args=["keys", "webhook-secret", name])
    assert result.exit_code == 0, result.output
    return result.output.strip()


def test_payload_and_headers_match_the_spec_byte_for_byte(app, client, api_key, receiver):
    request_id, webhook_id = finished(
        client, api_key, receiver, callbackSecret="s3cret",
        callbackHeaders={"Authorization": "Bearer tok", "X-Trace": "abc"})
    outcome = webhooks.deliver(webhook_id)
    assert outcome.status_code == 200 and outcome.error is None

    [received] = receiver.received
    task = poll(client, api_key, request_id).get_json()
    assert received.body == json.dumps({
        "requestId": request_id, "secret": "s3cret", "status": "success", "browserWindowId": None,
        "response": {"text": "Hello"}, "createdAt": task["createdAt"],
        "completedAt": task["completedAt"], "usage": USAGE, "trigger": "api",
    }, separators=(",", ":")).encode()
    assert received.method == "POST" and received.path == "/hook?source=remote-dispatch"
    headers = dict(received.headers)
    assert set(headers) == {"Host", "Accept-Encoding", "Content-Length", "User-Agent", "Authorization",
                            "X-Trace", "Content-Type", "webhook-id", "webhook-timestamp",
                            "webhook-signature"}
    assert headers["Authorization"] == "Bearer tok" and headers["X-Trace"] == "abc"
    assert headers["Content-Type"] == "application/json"
    assert headers["Host"] == f"127.0.0.1:{receiver.port}"
    assert headers["webhook-id"] == webhook_id and webhook_id.startswith("msg_")
    assert headers["webhook-timestamp"].isdigit()
    assert headers["webhook-signature"].startswith("v1,") and " " not in headers["webhook-signature"]
    # The independent Standard Webhooks implementation accepts it with the key's secret...
    assert Webhook(signing_secret(app)).verify(received.body, headers) == json.loads(received.body)
    # ...and not with another key's.
    make_key("mallory")
    with pytest.raises(Exception, match="No matching signature"):
        Webhook(signing_secret(app, "mallory")).verify(received.body, headers)

    row = delivery_of(request_id)
    assert row.state == "delivered" and row.delivered_at is not None and row.next_attempt_at is None
    [attempt] = attempts_of(webhook_id)
    assert attempt.status_code == 200 and attempt.error is None and attempt.next_attempt_at is None


def test_payload_without_a_secret_or_callback_headers(client, api_key, receiver):
    request_id, webhook_id = finished(client, api_key, receiver)
    webhooks.deliver(webhook_id)
    [received] = receiver.received
    assert json.loads(received.body)["secret"] is None
    assert not {"Authorization", "X-Trace"} & {name for name, _ in received.headers}


STRUCTURED = {"output": {"type": "structured", "content": {"city": "Paris"}}, "actionTrace": [],
              "text": '{"city": "Paris"}', "structuredOutput": {"city": "Paris"}}
FORMAT = {"type": "jsonSchema", "jsonSchema": {"type": "object"}}


@pytest.mark.parametrize("status, response, fields, expected", [
    ("success", STRUCTURED, {"responseFormat": FORMAT},
     {"text": '{"city": "Paris"}', "structuredOutput": {"city": "Paris"}}),
    ("error", lifecycle.failure_response("boom"), {}, {"text": "boom"}),
    ("error", lifecycle.failure_response("boom"), {"responseFormat": FORMAT},
     {"text": "boom", "structuredOutput": None}),
    ("input-required", {"output": {"type": "text", "content": "Which city?"}, "text": "Which city?",
                        "structuredOutput": None, "actionTrace": []}, {}, {"text": "Which city?"}),
])
def test_every_event_status_carries_the_spec_fields(client, api_key, receiver, status, response,
                                                    fields, expected):
    request_id, webhook_id = finished(client, api_key, receiver, status, response, **fields)
    webhooks.deliver(webhook_id)
    body = json.loads(receiver.received[0].body)
    assert list(body) == ["requestId", "secret", "status", "browserWindowId", "response", "createdAt",
                          "completedAt", "usage", "trigger"]
    assert body["status"] == status and body["response"] == expected
    # completedAt is a timestamp on every event (a paused task: the time it paused).
    assert body["completedAt"].endswith("Z") and body["completedAt"] >= body["createdAt"]


def test_failures_are_retried_with_the_same_webhook_id_until_delivered_once(client, api_key, receiver):
    request_id, webhook_id = finished(client, api_key, receiver)
    receiver.respond(500, 503)
    assert webhooks.deliver(webhook_id).status_code == 500
    assert delivery_of(request_id).state == "pending"
    assert webhooks.deliver(webhook_id).status_code == 503
    assert webhooks.deliver(webhook_id).status_code == 200
    assert webhooks.deliver(webhook_id) is None  # delivered: nothing more is sent
    assert [r.header("webhook-id") for r in receiver.received] == [webhook_id] * 3
    assert len({r.body for r in receiver.received}) == 1
    attempts = attempts_of(webhook_id)
    assert [(a.status_code, a.error) for a in attempts] == [(500, "HTTP 500"), (503, "HTTP 503"), (200, None)]
    assert attempts[0].next_attempt_at is not None and attempts[2].next_attempt_at is None
    assert delivery_of(request_id).state == "delivered"


def test_after_the_last_attempt_the_delivery_is_failed(app, client, api_key, receiver, monkeypatch):
    monkeypatch.setitem(app.config, "WEBHOOK_RETRY_SCHEDULE", (0, 0))
    request_id, webhook_id = finished(client, api_key, receiver)
    receiver.respond(500, 500)
    webhooks.deliver(webhook_id)
    webhooks.deliver(webhook_id)
    assert webhooks.deliver(webhook_id) is None
    row = delivery_of(request_id)
    assert row.state == "failed" and row.next_attempt_at is None and row.attempts == 2
    assert len(receiver.received) == 2


def test_410_gone_stops_retries(client, api_key, receiver):
    request_id, webhook_id = finished(client, api_key, receiver)
    receiver.respond(410)
    outcome = webhooks.deliver(webhook_id)
    assert outcome.status_code == 410 and outcome.stop
    assert webhooks.deliver(webhook_id) is None
    assert delivery_of(request_id).state == "failed"
    assert len(receiver.received) == 1


def test_redirects_are_failures_and_not_followed(client, api_key, receiver):
    request_id, webhook_id = finished(client, api_key, receiver)
    receiver.respond((307, {"Location": receiver.url + "&moved=1"}))
    outcome = webhooks.deliver(webhook_id)
    assert outcome.status_code == 307
    assert outcome.error == f"HTTP 307: redirect to {receiver.url + '&moved=1'!r} not followed"
    assert len(receiver.received) == 1
    assert delivery_of(request_id).state == "pending"


def test_retry_after_is_honoured(app, client, api_key, receiver, monkeypatch):
    monkeypatch.setitem(app.config, "WEBHOOK_RETRY_SCHEDULE", (0, 1, 7200))
    request_id, webhook_id = finished(client, api_key, receiver)
    receiver.respond((429, {"Retry-After": "3600"}))
    assert webhooks.deliver(webhook_id).retry_after == 3600
    [attempt] = attempts_of(webhook_id)
    assert attempt.next_attempt_at - attempt.attempted_at >= timedelta(seconds=3600)
    assert webhooks.deliver(webhook_id) is None  # not due yet
    assert len(receiver.received) == 1


def test_retry_after_is_capped_at_the_longest_step_and_parses_http_dates(app):
    assert delivery.retry_delay((0, 5, 300), 1, retry_after=10 ** 9) == 300
    assert delivery.retry_delay((0, 5, 300), 1, retry_after=1) == 5
    assert webhooks.retry_after("120") == 120
    assert webhooks.retry_after("Wed, 21 Oct 2015 07:28:00 GMT") == 0
    assert webhooks.retry_after("soon") is None


def test_receiver_down_is_a_failed_attempt(client, api_key, receiver):
    request_id, webhook_id = finished(client, api_key, receiver)
    receiver.stop()
    outcome = webhooks.deliver(webhook_id)
    assert outcome.status_code is None and "Connection refused" in outcome.error
    receiver.start()
    assert webhooks.deliver(webhook_id).status_code == 200
    assert len(receiver.received) == 1


def test_an_untrusted_certificate_is_a_failed_attempt(app, client, api_key, receiver, monkeypatch):
    request_id, webhook_id = finished(client, api_key, receiver)
    monkeypatch.setitem(app.config, "WEBHOOK_CA_BUNDLE", None)  # the public bundle: not our test CA
    outcome = webhooks.deliver(webhook_id)
    assert outcome.status_code is None and "CERTIFICATE_VERIFY_FAILED" in outcome.error
    assert receiver.received == []


# The refusal says how to allow private addresses in development.
HINT = "; in development, ALLOW_PRIVATE_URLS=true or EGRESS_ALLOW_HOSTS=host:port allows it"


def test_private_callback_is_refused_at_submit(app, client, api_key, receiver, monkeypatch):
    monkeypatch.setitem(app.config, "ALLOW_PRIVATE_URLS", False)
    for url, reason in [(receiver.url, "host '127.0.0.1' resolves to a non-public address (127.0.0.1)" + HINT),
                        ("https://10.0.0.7/hook", "host '10.0.0.7' resolves to a non-public address (10.0.0.7)" + HINT),
                        ("https://169.254.169.254/", "host '169.254.169.254' resolves to a non-public "
                                                     "address (169.254.169.254)" + HINT)]:
        response = submit(client, api_key, {"prompt": "answer hi", **CLOUD, "callbackUrl": url})
        assert response.status_code == 400
        assert response.get_json() == {"error": "Invalid Request", "message": f"callbackUrl: {reason}."}


def test_private_callback_is_refused_again_atdelivery_of(app, client, api_key, receiver, monkeypatch):
    """The name was public when the task was accepted; by delivery time it resolves privately."""
    request_id, webhook_id = finished(client, api_key, receiver)
    monkeypatch.setitem(app.config, "ALLOW_PRIVATE_URLS", False)
    outcome = webhooks.deliver(webhook_id)
    assert outcome.error == "refused: host '127.0.0.1' resolves to a non-public address (127.0.0.1)" + HINT
    assert receiver.received == []
    [attempt] = attempts_of(webhook_id)
    assert attempt.status_code is None and attempt.error == outcome.error
    assert poll(client, api_key, request_id).get_json()["status"] == "success"


def test_failed_delivery_never_changes_the_task(app, client, api_key, receiver, monkeypatch):
    monkeypatch.setitem(app.config, "WEBHOOK_RETRY_SCHEDULE", (0,))
    request_id, webhook_id = finished(client, api_key, receiver)
    before = poll(client, api_key, request_id).get_json()
    receiver.respond(500)
    webhooks.deliver(webhook_id)
    assert delivery_of(request_id).state == "failed"
    assert poll(client, api_key, request_id).get_json() == before


def test_concurrent_workers_send_an_attempt_once(app, client, api_key, receiver):
    request_id, webhook_id = finished(client, api_key, receiver)
    outcomes, start = [], threading.Barrier(6)

    def work():
        with app.app_context():
            start.wait()
            outcomes.append(webhooks.deliver(webhook_id))
            db.session.remove()

    threads = [threading.Thread(target=work) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(receiver.received) == 1
    assert sum(1 for outcome in outcomes if outcome is not None) == 1
    assert len(attempts_of(webhook_id)) == 1


def test_a_request_that_cannot_be_prepared_is_a_logged_failed_attempt(client, api_key, receiver):
    request_id, webhook_id = finished(client, api_key, receiver)
    db.session.execute(update(Task).where(Task.id == request_id).values(callback_sealed="not-fernet"))
    db.session.commit()
    assert webhooks.deliver(webhook_id).error == "internal error preparing the request"
    assert receiver.received == []
    row = delivery_of(request_id)
    assert row.lease_owner is None and row.state == "pending"
    assert attempts_of(webhook_id)[0].error == "internal error preparing the request"


def test_a_claimed_delivery_cannot_be_claimed_again(client, api_key, receiver):
    _, webhook_id = finished(client, api_key, receiver)
    assert delivery.claim(webhook_id, "worker-a").attempt == 1
    assert delivery.claim(webhook_id, "worker-b") is None


def test_rotation_sends_both_signatures_during_the_grace_period(app, client, api_key, receiver):
    old = signing_secret(app)
    result = app.test_cli_runner().invoke(args=["keys", "rotate-webhook-secret", "alice", "--grace-hours", "24"])
    assert result.exit_code == 0, result.output
    new = signing_secret(app)
    assert new != old and result.output.strip() == f"webhook secret: {new}"
    _, webhook_id = finished(client, api_key, receiver)
    webhooks.deliver(webhook_id)
    received = receiver.received[0]
    headers = dict(received.headers)
    assert len(headers["webhook-signature"].split(" ")) == 2
    for secret in (new, old):  # receivers on either secret accept it
        Webhook(secret).verify(received.body, headers)

    # After the grace period only the new secret signs.
    db.session.execute(update(ApiKey).values(previous_webhook_secret_expires_at=now_plus(-1)))
    db.session.commit()
    _, second = finished(client, api_key, receiver)
    webhooks.deliver(second)
    headers = dict(receiver.received[1].headers)
    assert len(headers["webhook-signature"].split(" ")) == 1
    Webhook(new).verify(receiver.received[1].body, headers)
    with pytest.raises(Exception, match="No matching signature"):
        Webhook(old).verify(receiver.received[1].body, headers)


def test_rotation_grace_period_ends_in_the_future(app, api_key):
    result = app.test_cli_runner().invoke(args=["keys", "rotate-webhook-secret", "alice", "--grace-hours", "2"])
    assert result.exit_code == 0, result.output
    db.session.rollback()
    expires, db_now = db.session.execute(
        select(ApiKey.previous_webhook_secret_expires_at, db.func.now())).one()
    assert timedelta(hours=1, minutes=59) < expires - db_now <= timedelta(hours=2)


def _log(client, key, request_id):
    return client.get(f"/fast/v2/remote-dispatch/responses/{request_id}/webhooks", headers={"x-api-key": key})


def _redeliver(client, key, request_id, **body):
    return client.post(f"/fast/v2/remote-dispatch/responses/{request_id}/webhooks/redeliver",
                       json=body or None, headers={"x-api-key": key})


def test_delivery_log_listsattempts_of(client, api_key, receiver):
    request_id, webhook_id = finished(client, api_key, receiver)
    receiver.respond(500)
    webhooks.deliver(webhook_id)
    webhooks.deliver(webhook_id)
    response = _log(client, api_key, request_id)
    assert response.status_code == 200
    body = response.get_json()
    assert body["requestId"] == request_id
    [entry] = body["deliveries"]
    assert {k: entry[k] for k in ("webhookId", "status", "url", "state", "nextAttemptAt")} == {
        "webhookId": webhook_id, "status": "success", "url": receiver.url, "state": "delivered",
        "nextAttemptAt": None}
    assert entry["deliveredAt"].endswith("Z") and entry["createdAt"].endswith("Z")
    failed, ok = entry["attempts"]
    assert failed["statusCode"] == 500 and failed["error"] == "HTTP 500"
    assert failed["nextAttemptAt"].endswith("Z") and failed["attemptedAt"].endswith("Z")
    assert ok["statusCode"] == 200 and ok["error"] is None and ok["nextAttemptAt"] is None
    assert isinstance(ok["durationMs"], int)


def test_delivery_log_of_a_task_without_callback_is_empty(client, api_key):
    request_id = submit(client, api_key, {"prompt": "answer hi", **CLOUD}).get_json()["requestId"]
    assert _log(client, api_key, request_id).get_json() == {"requestId": request_id, "deliveries": []}
    response = _redeliver(client, api_key, request_id)
    assert response.status_code == 404
    assert response.get_json() == {
        "error": "Webhook Not Found",
        "message": f"Request '{request_id}' has no webhook deliveries (no callbackUrl, or not finished yet)."}


def test_redeliver_sends_the_same_webhook_again(client, api_key, receiver):
    request_id, webhook_id = finished(client, api_key, receiver)
    webhooks.deliver(webhook_id)
    response = _redeliver(client, api_key, request_id)
    assert response.status_code == 202
    body = response.get_json()
    assert body["webhookId"] == webhook_id and body["state"] == "pending"
    assert len(body["attempts"]) == 1  # the history stays
    assert webhooks.deliver(webhook_id).status_code == 200
    first, again = receiver.received
    assert again.header("webhook-id") == first.header("webhook-id") == webhook_id
    assert again.body == first.body
    assert _redeliver(client, api_key, request_id, webhookId=webhook_id).status_code == 202
    entry = _log(client, api_key, request_id).get_json()["deliveries"][0]
    assert entry["state"] == "pending" and len(entry["attempts"]) == 2


def test_redeliver_restarts_a_faileddelivery_of(app, client, api_key, receiver, monkeypatch):
    monkeypatch.setitem(app.config, "WEBHOOK_RETRY_SCHEDULE", (0,))
    request_id, webhook_id = finished(client, api_key, receiver)
    receiver.respond(500)
    webhooks.deliver(webhook_id)
    assert delivery_of(request_id).state == "failed"
    assert _redeliver(client, api_key, request_id).status_code == 202
    assert webhooks.deliver(webhook_id).status_code == 200
    assert delivery_of(request_id).state == "delivered"


def test_redeliver_while_an_attempt_is_in_flight_is_409(client, api_key, receiver):
    request_id, webhook_id = finished(client, api_key, receiver)
    delivery.claim(webhook_id, "busy-worker")
    response = _redeliver(client, api_key, request_id)
    assert response.status_code == 409
    assert response.get_json() == {
        "error": "Conflict", "message": f"Webhook '{webhook_id}' is being sent right now; retry shortly."}


def test_log_and_redeliver_are_for_the_same_key_only(client, api_key, other_key, receiver):
    request_id, webhook_id = finished(client, api_key, receiver)
    not_found = {"error": "Request Not Found", "message": f"No request '{request_id}' for this API key."}
    for response in (_log(client, other_key, request_id), _redeliver(client, other_key, request_id)):
        assert response.status_code == 404 and response.get_json() == not_found
    unknown = _redeliver(client, api_key, request_id, webhookId="msg_nope")
    assert unknown.status_code == 404
    assert unknown.get_json() == {"error": "Webhook Not Found",
                                  "message": f"Request '{request_id}' has no webhook 'msg_nope'."}
    assert _log(client, "rd_wrong", request_id).status_code == 401


def test_sweep_publishes_due_deliveries_once(app, client, api_key, receiver, monkeypatch):
    monkeypatch.setitem(app.config, "DISPATCH_GRACE_SECONDS", 0)
    broker = app.extensions["broker"]

    def broker_down(*args, **kwargs):
        raise ConnectionError("broker down")

    with monkeypatch.context() as patch:
        patch.setattr(broker, "send", broker_down)
        request_id, webhook_id = finished(client, api_key, receiver)
    assert delivery_of(request_id).dispatched_at is None  # the publish was lost
    assert sweeps.publish_due_webhooks() == 1
    assert sweeps.publish_due_webhooks() == 0  # published, not yet attempted: not again
    receiver.respond(500)
    webhooks.deliver(webhook_id)
    assert sweeps.publish_due_webhooks() == 1  # the retry is due
    # A worker that died mid-attempt: its lease runs out and the sweep publishes the delivery again.
    delivery.claim(webhook_id, "dead-worker")
    assert sweeps.publish_due_webhooks() == 0
    db.session.execute(update(WebhookDelivery).values(lease_expires_at=now_plus(-1)))
    db.session.commit()
    assert sweeps.publish_due_webhooks() == 1
    assert webhooks.deliver(webhook_id).status_code == 200

