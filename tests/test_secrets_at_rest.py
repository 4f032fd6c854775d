"""Secrets and credentials at rest: every form of a secret redacted, webhook payloads sealed, callback
headers HTTP cannot carry refused, delivery errors recorded as attempts, webhook routes rate-limited."""
import json
from pathlib import Path
from urllib.parse import quote

import pytest
from sqlalchemy import text, update

from app import lifecycle
from app.crypto import seal
from app.extensions import db
from app.models import Task, WebhookDelivery
from app.webhooks import outbox
from tests.agent_support import run
from tests.conftest import attempts_of, delivery_of, make_key, poll, submit
from tests.page_server import PageServer
from tests.processes import WorkerProcess
from workers import webhooks
from workers.agent.secrets import Secrets

CLOUD = {"executionMode": "cloud"}
HOST_SECRET = "PwSecretHost7Q"  # comes back lowercased in "cannot resolve host ..."
ENCODED_SECRET = "Zk%41b%2Fq9-secret"  # comes back decoded ("ZkAb/q9-secret") from the page that echoes it


@pytest.mark.parametrize("stored", [
    "cannot resolve host 'pwsecrethost7q.invalid'", "PWSECRETHOST7Q", "pwsecrethost7q",
    "echo: ZkAb/q9-secret", "zkab/q9-secret", "Zk%2541b%252Fq9-secret", "ZK%41B%2FQ9-SECRET",
])
def test_every_form_of_a_secret_is_redacted(stored):
    secrets = Secrets({"HOST": HOST_SECRET, "CODE": ENCODED_SECRET})
    redacted = secrets.redact(stored)
    assert "${HOST}" in redacted or "${CODE}" in redacted, redacted
    for form in ("pwsecrethost7q", "zkab/q9-secret", "zk%41b%2fq9", "zk%2541b"):
        assert form not in redacted.lower()


def test_html_escaped_and_percent_encoded_forms():
    secrets = Secrets({"PW": "a<b>&'c d"})
    for stored in ("a&lt;b&gt;&amp;&#x27;c d", "a&lt;b&gt;&amp;'c d", quote("a<b>&'c d", safe=""),
                   "a%3Cb%3E%26%27c+d", "A<B>&'C D"):
        assert secrets.redact(f"[{stored}]") == "[${PW}]", stored


def test_short_and_unrelated_text_is_left_alone():
    assert Secrets({"PW": "hunter2"}).redact("hunter 2 / HUNTER3 / Hunter2") == "hunter 2 / HUNTER3 / ${PW}"


# End to end: a real task on a worker, its webhook to a real HTTPS receiver.

@pytest.fixture(scope="module")
def pages():
    server = PageServer()
    yield server
    server.close()


@pytest.fixture
def webhook_worker(app, webhook_ca):
    """Only while its test runs: the other tests here deliver in-process."""
    proc = WorkerProcess(name="secrets", env={"WEBHOOK_CA_BUNDLE": webhook_ca[1], "WEBHOOK_RETRY_SCHEDULE": "0,0,0"})
    yield proc
    proc.stop()


def _every_table_as_text():
    db.session.rollback()
    return "\n".join(row for table in db.metadata.sorted_tables for row in db.session.execute(
        text(f"SELECT row_to_json(t)::text FROM {table.name} t")).scalars().all())


def test_secrets_in_a_url_host_and_percent_encoded_reach_nothing_stored_or_returned(
        client, api_key, pages, receiver, webhook_worker):
    request_id, body = run(client, api_key, {
        "prompt": f"/Operator go to {pages.url('/echo')}?code=${{CODE}}\nextract .param\n"
                  "go to http://${HOST}.invalid/",
        "secretVariables": {"HOST": HOST_SECRET, "CODE": ENCODED_SECRET},
        "callbackUrl": receiver.url, "callbackSecret": "cb-secret-9Xk"})
    # The secrets were used: the page got the encoded value, and the host was looked up.
    assert "/echo?code=ZkAb%2Fq9-secret" in pages.requests  # as the client normalised it (%41 is "A")
    assert body["status"] == "error" and "cannot resolve host '${HOST}.invalid'" in body["response"]["text"], body
    trace = json.dumps(body["response"]["actionTrace"])
    assert "code=${CODE}" in trace, trace  # the echoed (decoded) value, redacted
    [delivered] = receiver.wait_for(1)
    listed = client.get("/fast/v2/remote-dispatch/responses", headers={"x-api-key": api_key}).get_json()
    texts = {"poll": json.dumps(poll(client, api_key, request_id).get_json()), "list": json.dumps(listed),
             "database": _every_table_as_text(), "webhook": delivered.body.decode(),
             "worker log": Path(webhook_worker.log.name).read_text()}
    for where, stored in texts.items():
        for form in (HOST_SECRET, ENCODED_SECRET, "ZkAb/q9-secret", "ZkAb%2Fq9-secret"):  # any case
            assert form.lower() not in stored.lower(), (where, form)
    assert "cb-secret-9Xk" in texts["webhook"] and "cb-secret-9Xk" not in texts["database"]


# Sealed delivery payloads, sent byte for byte the same on every attempt.

@pytest.fixture
def webhook_settings(app, monkeypatch, webhook_ca):
    monkeypatch.setitem(app.config, "WEBHOOK_CA_BUNDLE", webhook_ca[1])
    monkeypatch.setitem(app.config, "WEBHOOK_RETRY_SCHEDULE", (0, 0, 0, 0))
    monkeypatch.setitem(app.config, "WEBHOOK_RETRY_JITTER", 0.0)


HELLO = {"output": {"type": "text", "content": "Hello"}, "actionTrace": [], "text": "Hello", "structuredOutput": None}


def finished(client, key, receiver, **fields):
    body = {"prompt": "answer Hello", **CLOUD, "callbackUrl": receiver.url, "callbackSecret": "cb-Sec-41", **fields}
    request_id = submit(client, key, body).get_json()["requestId"]
    assert lifecycle.finish(request_id, "success", HELLO, {"actions": 1, "credits": 1.0})
    return request_id, delivery_of(request_id).id


def test_delivery_payloads_are_sealed_and_resent_identically(client, api_key, receiver, webhook_settings):
    request_id, webhook_id = finished(client, api_key, receiver)
    raw = db.session.execute(text("SELECT row_to_json(d)::text FROM webhook_deliveries d")).scalar_one()
    assert "cb-Sec-41" not in raw and "Hello" not in raw and request_id not in json.loads(raw)["payload"]
    receiver.respond(500, 200)
    assert webhooks.deliver(webhook_id).status_code == 500
    assert webhooks.deliver(webhook_id).status_code == 200
    first, second = receiver.received
    assert first.body == second.body and json.loads(first.body)["secret"] == "cb-Sec-41"


def test_rows_written_before_sealing_are_still_delivered(client, api_key, receiver, webhook_settings):
    request_id, webhook_id = finished(client, api_key, receiver)
    plain = outbox.body(delivery_of(request_id)).decode()
    db.session.execute(update(WebhookDelivery).where(WebhookDelivery.id == webhook_id).values(payload=plain))
    db.session.commit()
    assert webhooks.deliver(webhook_id).status_code == 200
    assert receiver.received[0].body.decode() == plain


# callbackHeaders that HTTP cannot carry.

@pytest.mark.parametrize("value", ["a\r\nX-Injected: 1", "a\nb", "a\rb", "nul\x00", "snow \u2603", " leading"])
def test_unsendable_callback_header_values_are_refused_naming_the_header(client, api_key, value):
    response = submit(client, api_key, {"prompt": "answer hi", **CLOUD, "callbackUrl": "https://127.0.0.1:9/h",
                                        "callbackHeaders": {"X-Fine": "ok", "X-Bad": value}})
    assert response.status_code == 400
    body = response.get_json()
    assert body["error"] == "Invalid Request" and body["message"].startswith("callbackHeaders.X-Bad: ")
    assert value == "nul\x00" or body == {"error": "Invalid Request", "message": (
        "callbackHeaders.X-Bad: the value of header 'X-Bad' cannot be sent: it must be Latin-1 text without "
        "control characters (CR, LF, NUL) or leading whitespace.")}


def test_latin1_callback_header_values_are_accepted(client, api_key):
    response = submit(client, api_key, {"prompt": "answer hi", **CLOUD, "callbackUrl": "https://127.0.0.1:9/h",
                                        "callbackHeaders": {"X-Name": "Zoë\tand co"}})
    assert response.status_code == 202, response.get_json()


def test_a_delivery_that_raises_is_a_logged_retried_attempt_not_a_stuck_lease(
        client, api_key, receiver, webhook_settings):
    """A row accepted before the header check: sending it raises inside the HTTP client."""
    request_id, webhook_id = finished(client, api_key, receiver)
    db.session.execute(update(Task).where(Task.id == request_id).values(
        callback_sealed=seal({"secret": "cb-Sec-41", "headers": {"X-Bad": "a\r\nX-Injected: 1"}})))
    db.session.commit()
    outcome = webhooks.deliver(webhook_id)
    assert outcome.status_code is None and outcome.error.startswith("cannot send the request: ")
    assert receiver.received == []
    logged = client.get(f"/fast/v2/remote-dispatch/responses/{request_id}/webhooks",
                        headers={"x-api-key": api_key}).get_json()
    assert outcome.error in json.dumps(logged) and "a\\r\\nX-Injected" not in json.dumps(logged)
    row = delivery_of(request_id)
    assert row.lease_owner is None and row.state == "pending" and row.next_attempt_at is not None
    assert [a.error for a in attempts_of(webhook_id)] == [outcome.error]
    assert webhooks.deliver(webhook_id).error == outcome.error  # retried on schedule, not stuck
    assert len(attempts_of(webhook_id)) == 2


# The webhook routes count in the key's `requests` budget.

def test_webhook_log_and_redeliver_are_rate_limited(app, client, receiver, webhook_settings, monkeypatch):
    plans = {**app.config["RATE_LIMIT_PLANS"], "tiny": {"requests": "3/hour", "polls": "50/hour"}}
    monkeypatch.setitem(app.config, "RATE_LIMIT_PLANS", plans)
    key = make_key("tiny-webhooks", "tiny")
    request_id, _ = finished(client, key, receiver)  # the submit is 1 of 3
    headers = {"x-api-key": key}
    log_url = f"/fast/v2/remote-dispatch/responses/{request_id}/webhooks"
    assert client.get(log_url, headers=headers).status_code == 200
    assert client.post(log_url + "/redeliver", json={}, headers=headers).status_code == 202
    for refused in (client.get(log_url, headers=headers), client.post(log_url + "/redeliver", json={}, headers=headers)):
        assert refused.status_code == 429
        assert refused.get_json()["error"] == "Too Many Requests" and "Retry-After" in refused.headers
    other = make_key("roomy", "tiny")
    assert client.get(log_url, headers={"x-api-key": other}).status_code == 404  # counted per key



def test_the_migration_seals_payloads_written_before_it(client, api_key, receiver, webhook_settings):
    from flask_migrate import downgrade, upgrade

    request_id, _ = finished(client, api_key, receiver)
    sent = outbox.body(delivery_of(request_id))
    db.session.remove()
    downgrade(revision="0006")  # back to plain JSON, as rows were before 0010
    assert delivery_of(request_id).payload.encode() == sent
    db.session.remove()
    upgrade()
    row = delivery_of(request_id)
    assert "cb-Sec-41" not in row.payload and outbox.body(row) == sent
