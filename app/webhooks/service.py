"""The delivery log of a task and redelivery; these functions own the transaction."""
from sqlalchemy import select

from ..task_queries import get_task, isoformat
from ..errors import ApiError
from ..extensions import db
from ..models import WebhookAttempt, WebhookDelivery
from . import delivery, outbox


def delivery_log(api_key_id, task_id):
    """Every delivery of the caller's task with its attempts, oldest first."""
    task = get_task(api_key_id, task_id)
    return {"requestId": task.id, "deliveries": _views(task.id)}


def redeliver(api_key_id, task_id, webhook_id=None):
    """Send a delivery again (same webhook-id and body, fresh retry schedule); returns its view."""
    task = get_task(api_key_id, task_id)
    stmt = select(WebhookDelivery.id).where(WebhookDelivery.task_id == task.id)
    if webhook_id:
        stmt = stmt.where(WebhookDelivery.id == webhook_id)
    delivery_id = db.session.execute(
        stmt.order_by(WebhookDelivery.created_at.desc(), WebhookDelivery.id.desc()).limit(1)).scalar()
    if delivery_id is None:
        raise ApiError(404, "Webhook Not Found", _not_found(task_id, webhook_id))
    if not delivery.requeue(delivery_id):
        db.session.rollback()
        raise ApiError(409, "Conflict", f"Webhook '{delivery_id}' is being sent right now; retry shortly.")
    db.session.commit()
    outbox.publish(delivery_id)
    return _views(task.id, delivery_id)[0]


def _views(task_id, delivery_id=None):
    stmt = select(WebhookDelivery).where(WebhookDelivery.task_id == task_id)
    if delivery_id:
        stmt = stmt.where(WebhookDelivery.id == delivery_id)
    rows = db.session.execute(stmt.order_by(WebhookDelivery.created_at, WebhookDelivery.id)).scalars().all()
    attempts = {}
    for attempt in db.session.execute(
            select(WebhookAttempt).where(WebhookAttempt.delivery_id.in_([row.id for row in rows]))
            .order_by(WebhookAttempt.id)).scalars():
        attempts.setdefault(attempt.delivery_id, []).append(attempt)
    return [_view(row, attempts.get(row.id, [])) for row in rows]


def _not_found(task_id, webhook_id):
    if webhook_id:
        return f"Request '{task_id}' has no webhook '{webhook_id}'."
    return f"Request '{task_id}' has no webhook deliveries (no callbackUrl, or not finished yet)."


def _view(row, attempts):
    return {
        "webhookId": row.id,
        "status": row.event_status,
        "url": row.url,
        "state": row.state,
        "createdAt": isoformat(row.created_at),
        "deliveredAt": isoformat(row.delivered_at),
        "nextAttemptAt": isoformat(row.next_attempt_at) if row.state == "pending" else None,
        "attempts": [{
            "attemptedAt": isoformat(a.attempted_at),
            "statusCode": a.status_code,
            "error": a.error,
            "durationMs": a.duration_ms,
            "nextAttemptAt": isoformat(a.next_attempt_at),
        } for a in attempts],
    }
