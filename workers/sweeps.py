"""Beat sweeps: re-publish undispatched tasks; retry or end tasks whose lease expired; forget
expired idempotency keys."""
import logging

from flask import current_app
from sqlalchemy import delete, or_, select

from app import lifecycle
from app.dispatch.service import dispatch
from app.extensions import db
from app.models import IdempotencyKey, Task, now, now_plus

log = logging.getLogger(__name__)
BATCH = 500


def dispatch_undispatched():
    """Publish tasks whose publish failed (or whose message was lost); returns how many."""
    config = current_app.config
    stale = or_(
        Task.dispatched_at.is_(None) & (Task.created_at < now_plus(-config["DISPATCH_GRACE_SECONDS"])),
        Task.dispatched_at < now_plus(-config["REDISPATCH_AFTER_SECONDS"]),
    )
    ids = db.session.execute(
        select(Task.id).where(Task.status == "pending", Task.lease_owner.is_(None), stale)
        .order_by(Task.created_at).limit(BATCH)
    ).scalars().all()
    db.session.commit()
    sent = sum(1 for task_id in ids if dispatch(task_id))
    if ids:
        log.info("re-published %d of %d undispatched tasks", sent, len(ids))
    return sent


def expire_leases():
    """Tasks whose worker stopped renewing: retry while attempts remain, else end as error."""
    max_attempts = current_app.config["MAX_ATTEMPTS"]
    expired = db.session.execute(
        select(Task.id, Task.attempt).where(
            Task.status == "pending", Task.lease_owner.is_not(None), Task.lease_expires_at < now())
        .limit(BATCH)
    ).all()
    db.session.commit()
    ended = retried = 0
    for task_id, attempt in expired:
        if attempt < max_attempts:
            if lifecycle.release_for_retry(task_id) and dispatch(task_id):
                retried += 1
            continue
        message = (f"The worker running this task stopped responding "
                   f"({attempt} attempt{'s' if attempt != 1 else ''}); the task was not completed.")
        task = db.session.get(Task, task_id)
        if lifecycle.finish(task_id, "error", lifecycle.failure_response(message), task.usage,
                            error=message):
            ended += 1
    if expired:
        log.warning("expired leases: %d retried, %d ended", retried, ended)
    return {"retried": retried, "ended": ended}


def purge_idempotency_keys():
    """Delete keys older than IDEMPOTENCY_TTL_SECONDS (submit already ignores them); returns how many."""
    ttl = current_app.config["IDEMPOTENCY_TTL_SECONDS"]
    purged = db.session.execute(
        delete(IdempotencyKey).where(IdempotencyKey.created_at < now_plus(-ttl))).rowcount
    db.session.commit()
    return purged
