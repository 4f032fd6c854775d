"""The webhook outbox: a delivery row written in the transaction that ends the task."""
import json
import logging
import secrets

from flask import current_app
from sqlalchemy import update

from ..crypto import seal_text, unseal, unseal_text
from ..task_queries import isoformat
from ..extensions import db
from ..models import WebhookDelivery, now
from ..schedules.runs import webhook_fields

log = logging.getLogger(__name__)

EVENT_STATUSES = ("success", "error", "input-required")


def payload(task, status, callback):
    """The body of the spec's Events table, serialised once so every retry sends the same bytes; with the task's
    trigger (and a schedule's run, its schedule's state)."""
    response = task.response or {}
    body = {"text": response.get("text", "")}
    if task.options.get("responseFormat"):
        body["structuredOutput"] = response.get("structuredOutput")
    if response.get("files"):  # as the poll shows them: the files the task's browser downloaded
        body["files"] = response["files"]
    return json.dumps({
        "requestId": task.id,
        "secret": (callback or {}).get("secret"),
        "status": status,
        "browserWindowId": task.browser_window_id,
        "response": body,
        "createdAt": isoformat(task.created_at),
        # A paused task has no completedAt yet; the event's time is when it paused.
        "completedAt": isoformat(task.completed_at or task.updated_at),
        "usage": task.usage,
        **webhook_fields(task),
    }, separators=(",", ":"))


def add_delivery(task, status):
    """Add the outbox row for this event to the current transaction; returns its id or None."""
    if not task.callback_url or status not in EVENT_STATUSES:
        return None
    db.session.flush()
    db.session.refresh(task)
    # Sealed at rest: the body carries the callbackSecret (and the task's output).
    delivery = WebhookDelivery(
        id="msg_" + secrets.token_hex(16), task_id=task.id, event_status=status, url=task.callback_url,
        payload=seal_text(payload(task, status, unseal(task.callback_sealed))),
    )
    db.session.add(delivery)
    return delivery.id


def body(row):
    """The exact bytes to send for a delivery row (rows written before sealing hold the JSON itself)."""
    return (row.payload if row.payload.startswith("{") else unseal_text(row.payload)).encode()


def publish(delivery_id):
    """Queue an attempt now; if the broker is down, the beat sweep finds the delivery due."""
    # Marked before sending: the attempt this message triggers, and the retry it schedules,
    # always come after the mark, so the sweep can tell "published" from "due again".
    _mark_dispatched(delivery_id, now())
    try:
        current_app.extensions["broker"].send(
            "workers.deliver_webhook", [delivery_id], retry_policy={"max_retries": 1, "interval_start": 0, "interval_step": 0.2})
    except Exception as exc:
        log.warning("publish of webhook %s failed, beat will retry: %s", delivery_id, exc)
        _mark_dispatched(delivery_id, None)
        return False
    return True


def _mark_dispatched(delivery_id, when):
    db.session.execute(
        update(WebhookDelivery).where(WebhookDelivery.id == delivery_id).values(dispatched_at=when))
    db.session.commit()
