"""Beat sweeps: re-publish undispatched tasks; retry or end tasks whose lease expired; end
unanswered questions; publish webhook deliveries that are due; forget expired idempotency keys;
delete uploaded files older than FILE_TTL_SECONDS and recordings older than RECORDING_TTL_SECONDS; end idle
cloud browser sessions, and those of machines that went quiet; reap the browsers of dead workers; submit the runs
of schedules that are due."""
import logging

from flask import current_app
from sqlalchemy import and_, delete, or_, select

from app import lifecycle
from app.codes import service as codes
from app.dispatch import recording_store
from app.task_publish import dispatch
from app.files import service as files
from app.profiles import service as profiles
from app.schedules import service as schedules
from app.sessions import service as sessions
from app.extensions import db
from app.models import IdempotencyKey, Task, WebhookDelivery, now, now_plus
from app.webhooks import delivery, outbox

log = logging.getLogger(__name__)
BATCH = 500


def _publish_each(ids, publish, what):
    """End the read transaction, publish each id; returns how many the broker took."""
    db.session.commit()
    sent = sum(1 for item_id in ids if publish(item_id))
    if ids:
        log.info("published %d of %d %s", sent, len(ids), what)
    return sent


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
    return _publish_each(ids, _dispatch, "undispatched tasks")


def _dispatch(task_id):
    """Publish a task: to the worker holding its kept session's browser, if it runs in one."""
    return dispatch(task_id, node=sessions.node_of_task(task_id))


def expire_leases():
    """Tasks whose worker stopped renewing: retry while attempts remain, else end as error."""
    max_attempts = current_app.config["MAX_ATTEMPTS"]
    expired = db.session.execute(
        # input-required with a lease: a run that waited for a person in its live view (it keeps its browser).
        select(Task.id, Task.attempt, Task.status, Task.cloud_session_id).where(
            Task.status.in_(("pending", "input-required")), Task.lease_owner.is_not(None),
            Task.lease_expires_at < now())
        .limit(BATCH)
    ).all()
    db.session.commit()
    ended = retried = 0
    for task_id, attempt, status, session_id in expired:
        # A session that ended (its machine went quiet, say) can run no retry: its tasks are told why at once.
        gone = sessions.ended_reason(session_id) if session_id else None
        if attempt < max_attempts and status == "pending" and gone is None:
            if lifecycle.release_for_retry(task_id) and _dispatch(task_id):
                retried += 1
            continue
        message = gone or (f"The worker running this task stopped responding "
                           f"({attempt} attempt{'s' if attempt != 1 else ''}); the task was not completed.")
        if lifecycle.end_unheld(task_id, message):  # with the trace and usage the run had written
            ended += 1
    if expired:
        log.warning("expired leases: %d retried, %d ended", retried, ended)
    return {"retried": retried, "ended": ended}


def expire_input_requests():
    """Tasks paused on a question nobody answered in time, or for a code or link that did not come within
    CODE_WAIT_SECONDS, end as error; returns how many."""
    waiting = db.session.execute(
        select(Task.id).where(Task.status == "input-required", Task.input_deadline_at < now()).limit(BATCH)
    ).scalars().all()
    db.session.commit()
    ended = 0
    for task_id in waiting:
        task = db.session.get(Task, task_id)
        trace = task.trace
        if lifecycle.waits_for_arrival(task):  # no code or link came: the error says what it waited for
            message = codes.gave_up(task.hitl["kind"], task.hitl["to"], codes.wait_seconds(task.hitl))
            trace = [dict(entry) for entry in trace or []]
            if trace:
                trace[-1].pop("credits", None)  # the pause's entry is no longer the final one
            trace.append(lifecycle.final_trace_entry(f"error: {message}", task.usage or {}))
        else:
            message = "Nobody answered the task's question in time; the task was not completed."
        response = lifecycle.failure_response(message)
        response["actionTrace"] = trace
        ended += lifecycle.finish(task_id, "error", response, task.usage, trace=trace, error=message)
    if waiting:
        log.info("ended %d tasks left waiting for input or for a code", ended)
    return ended


def publish_due_webhooks():
    """Publish deliveries that are due and not published since they became due: a retry whose
    time has come, a publish lost while the broker was down, a dead worker's attempt."""
    config = current_app.config
    delivery.release_expired_leases()
    published = WebhookDelivery.dispatched_at
    ids = db.session.execute(
        select(WebhookDelivery.id).where(
            WebhookDelivery.state == "pending", WebhookDelivery.lease_owner.is_(None),
            WebhookDelivery.next_attempt_at <= delivery.clock,
            or_(and_(published.is_(None),
                     WebhookDelivery.next_attempt_at < now_plus(-config["DISPATCH_GRACE_SECONDS"])),
                published < WebhookDelivery.next_attempt_at,
                published < now_plus(-config["REDISPATCH_AFTER_SECONDS"])))
        .order_by(WebhookDelivery.next_attempt_at).limit(BATCH)
    ).scalars().all()
    return _publish_each(ids, outbox.publish, "due webhook deliveries")


def purge_idempotency_keys():
    """Delete keys older than IDEMPOTENCY_TTL_SECONDS (submit already ignores them); returns how many."""
    ttl = current_app.config["IDEMPOTENCY_TTL_SECONDS"]
    purged = db.session.execute(
        delete(IdempotencyKey).where(IdempotencyKey.created_at < now_plus(-ttl))).rowcount
    db.session.commit()
    return purged


def purge_expired_files():
    """Delete uploads older than FILE_TTL_SECONDS (tasks that attached them read them earlier), the downloads
    of sessions that ended that long ago, recordings older than RECORDING_TTL_SECONDS and profiles unused for
    PROFILE_IDLE_DAYS; returns how many uploads."""
    sessions.purge_ended_files()
    recording_store.purge_expired()
    profiles.purge_idle()
    return files.purge_expired()


def end_idle_sessions():
    """End cloud browser sessions idle past their timeout and launches abandoned mid-way; returns how many."""
    return sessions.expire_idle() + sessions.end_abandoned_starts()


def end_lost_sessions():
    """End the sessions (and their tasks) of machines that went quiet; its own, shorter beat (lost_sweep_seconds):
    a caller waits on it. Returns how many sessions."""
    return sessions.end_lost()


def reap_browsers(config=None):
    """End the browsers and egress proxies of workers on this machine that died without closing them (SIGKILL,
    OOM kill): within one sweep interval, not only when another worker starts. Returns how many."""
    from workers.browser.egress import reap_orphans
    from workers.browser.reaper import reap

    config = config or current_app.config
    return reap(config["VAR_DIR"]) + len(reap_orphans(config))


def fire_schedules(now=None):
    """Submit the run of each schedule whose fire time has come (app/schedules); returns how many. `now`: the
    clock, which tests set."""
    return schedules.fire_due(now)
