"""A delivery's state machine on its row: claim an attempt, record its outcome, requeue it.

Like a task's lifecycle, every transition is a compare-and-swap: a duplicate message, a
sweep and a redelivery can never make two workers send the same attempt.
"""
import random
from dataclasses import dataclass

from flask import current_app
from sqlalchemy import func, or_, update

from ..extensions import db
from ..models import UtcDateTime, WebhookAttempt, WebhookDelivery, now, now_plus

# The database clock with sub-second precision on every dialect (SQLite's now() has seconds).
clock = now_plus(0)
# An attempt's lease outlives the request timeout; a worker killed mid-attempt loses it.
LEASE_MARGIN_SECONDS = 60


@dataclass
class Outcome:
    """What one attempt got back: a status code, or the error that prevented one."""

    status_code: int | None = None
    error: str | None = None
    duration_ms: int | None = None
    retry_after: float | None = None  # seconds the receiver asked us to wait

    @property
    def delivered(self):
        return self.status_code is not None and 200 <= self.status_code < 300

    @property
    def stop(self):
        """410 Gone: the receiver wants no more attempts."""
        return self.status_code == 410


@dataclass
class Claim:
    attempt: int  # 1-based, within the current schedule
    started_at: object  # the database clock when the attempt began (the webhook-timestamp)


def claim(delivery_id, owner):
    """Take the lease on a due, unleased, pending delivery; returns a Claim or None."""
    config = current_app.config
    lease = config["WEBHOOK_TIMEOUT_SECONDS"] + LEASE_MARGIN_SECONDS
    row = db.session.execute(
        update(WebhookDelivery)
        .where(WebhookDelivery.id == delivery_id, WebhookDelivery.state == "pending",
               WebhookDelivery.next_attempt_at <= clock, _unleased())
        .values(lease_owner=owner, lease_expires_at=now_plus(lease),
                attempts=WebhookDelivery.attempts + 1)
        .returning(WebhookDelivery.attempts, func.now(type_=UtcDateTime()))
    ).first()
    db.session.commit()
    return Claim(*row) if row else None


def record(delivery_id, owner, claimed, outcome):
    """Log the attempt and move the delivery on: delivered, failed, or due again later."""
    schedule = current_app.config["WEBHOOK_RETRY_SCHEDULE"]
    values = dict(lease_owner=None, lease_expires_at=None)
    if outcome.delivered:
        values.update(state="delivered", delivered_at=now(), next_attempt_at=None)
    elif final(claimed, outcome):
        values.update(state="failed", next_attempt_at=None)
    else:
        values.update(next_attempt_at=now_plus(retry_delay(schedule, claimed.attempt, outcome.retry_after)))
    row = db.session.execute(
        update(WebhookDelivery)
        .where(WebhookDelivery.id == delivery_id, WebhookDelivery.lease_owner == owner)
        .values(**values)
        .returning(WebhookDelivery.next_attempt_at)
    ).first()
    # The request was sent either way; a lost lease only means someone else owns what comes next.
    db.session.add(WebhookAttempt(
        delivery_id=delivery_id, attempted_at=claimed.started_at, status_code=outcome.status_code,
        error=outcome.error, duration_ms=outcome.duration_ms, next_attempt_at=row[0] if row else None))
    db.session.commit()
    return row is not None


def final(claimed, outcome):
    """A failed attempt after which no other is made: the receiver said 410 Gone, or the schedule is used up."""
    return outcome.stop or claimed.attempt >= len(current_app.config["WEBHOOK_RETRY_SCHEDULE"])


def retry_delay(schedule, attempts_made, retry_after=None):
    """Seconds until the next attempt: the schedule's next step plus jitter, or longer if the
    receiver asked (Retry-After, capped at the schedule's longest step)."""
    delay = schedule[attempts_made] * (1 + random.random() * current_app.config["WEBHOOK_RETRY_JITTER"])
    if retry_after is not None:
        delay = max(delay, min(retry_after, max(schedule)))
    return delay


def requeue(delivery_id):
    """Make a delivery pending and due now with a fresh schedule (redelivery); False while an
    attempt is in flight."""
    return db.session.execute(
        update(WebhookDelivery)
        .where(WebhookDelivery.id == delivery_id, _unleased())
        .values(state="pending", attempts=0, next_attempt_at=now(), delivered_at=None,
                dispatched_at=None, lease_owner=None, lease_expires_at=None)
        .returning(WebhookDelivery.id)
    ).first() is not None


def release_expired_leases():
    """Deliveries whose worker died mid-attempt become publishable again; returns their ids."""
    ids = db.session.execute(
        update(WebhookDelivery)
        .where(WebhookDelivery.state == "pending", WebhookDelivery.lease_owner.is_not(None),
               WebhookDelivery.lease_expires_at < clock)
        .values(lease_owner=None, lease_expires_at=None, dispatched_at=None)
        .returning(WebhookDelivery.id)
    ).scalars().all()
    db.session.commit()
    return ids


def _unleased():
    return or_(WebhookDelivery.lease_owner.is_(None), WebhookDelivery.lease_expires_at < clock)
