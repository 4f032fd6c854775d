"""Celery tasks: thin wrappers over plain functions that tests call without a broker."""
from celery import shared_task

from app.sessions import service as sessions

from . import runner, session_actions, sweeps, webhooks, workbook_actions

# While the database is unreachable a message is retried later rather than dropped.
RETRY_WHILE_DATABASE_DOWN = dict(autoretry_for=runner.DATABASE_DOWN, retry_backoff=1, retry_backoff_max=30,
                                 retry_jitter=True, max_retries=40)


@shared_task(name="workers.run_task", bind=True, **RETRY_WHILE_DATABASE_DOWN)
def run_task(self, task_id):
    runner.execute_task(task_id, node=self.request.hostname)


@shared_task(name="workers.sweep_undispatched")
def sweep_undispatched():
    return sweeps.dispatch_undispatched()


@shared_task(name="workers.sweep_expired_leases")
def sweep_expired_leases():
    return sweeps.expire_leases()


@shared_task(name="workers.sweep_input_timeouts")
def sweep_input_timeouts():
    return sweeps.expire_input_requests()


@shared_task(name="workers.deliver_webhook", **RETRY_WHILE_DATABASE_DOWN)
def deliver_webhook(delivery_id):
    webhooks.deliver(delivery_id)


@shared_task(name="workers.sweep_webhooks")
def sweep_webhooks():
    return sweeps.publish_due_webhooks()


@shared_task(name="workers.purge_idempotency_keys")
def purge_idempotency_keys():
    return sweeps.purge_idempotency_keys()


@shared_task(name="workers.purge_window_commands")
def purge_window_commands():
    from app.windows.service import purge_old_commands

    return purge_old_commands()


@shared_task(name="workers.purge_expired_files")
def purge_expired_files():
    return sweeps.purge_expired_files()


@shared_task(name="workers.fire_schedules")
def fire_schedules():
    return sweeps.fire_schedules()


@shared_task(name="workers.sweep_idle_sessions")
def sweep_idle_sessions():
    return sweeps.end_idle_sessions()


@shared_task(name="workers.sweep_lost_hosts")
def sweep_lost_hosts():
    return sweeps.end_lost_sessions()


@shared_task(name="workers.reap_browsers")
def reap_browsers():
    return sweeps.reap_browsers()


@shared_task(name="workers.start_session", **RETRY_WHILE_DATABASE_DOWN)
def start_session(session_id, options=None):
    """A kept session's browser starts on the worker machine that takes this (app/sessions/service.start_here)."""
    return sessions.start_here(session_id, options)


@shared_task(name="workers.serve_session_actions")
def serve_session_actions(session_id):
    return session_actions.serve(session_id)


@shared_task(name="workers.answer_workbook_action")
def answer_workbook_action(command_id):
    return workbook_actions.answer(command_id)
