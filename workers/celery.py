"""The Celery app bound to the Flask app; `celery -A workers` finds `app` here."""
import logging

from celery import signals

from workers import metrics_server

metrics_server.prepare()  # before anything imports prometheus_client: the pool processes inherit its folder

from app import browser_hosts, create_app  # noqa: E402
from app.extensions import celery_init_app  # noqa: E402

flask_app = create_app(web=False)  # a worker serves no request: no blueprints (app/__init__.py)
app = celery_init_app(flask_app)
_sweep = flask_app.config["SWEEP_INTERVAL_SECONDS"]

# The one beat schedule.
app.conf.beat_schedule = {
    "dispatch-undispatched-tasks": {"task": "workers.sweep_undispatched", "schedule": _sweep},
    "expire-leases": {"task": "workers.sweep_expired_leases", "schedule": _sweep},
    "end-unanswered-input": {"task": "workers.sweep_input_timeouts", "schedule": _sweep},
    "publish-due-webhooks": {"task": "workers.sweep_webhooks", "schedule": _sweep},
    "purge-idempotency-keys": {"task": "workers.purge_idempotency_keys", "schedule": 3600},
    "purge-expired-files": {"task": "workers.purge_expired_files", "schedule": 300},
    "purge-window-commands": {"task": "workers.purge_window_commands", "schedule": 3600},
    "end-idle-sessions": {"task": "workers.sweep_idle_sessions", "schedule": _sweep},
    # A killed machine's sessions and tasks end seconds after its heartbeats stop (app/browser_hosts.py).
    "end-lost-sessions": {"task": "workers.sweep_lost_hosts", "schedule": browser_hosts.lost_sweep_seconds(
        flask_app.config)},
    "reap-browsers": {"task": "workers.reap_browsers", "schedule": _sweep},
    # Schedules' fire times are minutes; a sweep a second at most late keeps a run within a second of its time.
    "fire-schedules": {"task": "workers.fire_schedules", "schedule": min(_sweep, 1.0)},
}

from workers import shutdown, tasks  # noqa: E402,F401  (registers the tasks and the stop signals)


class _QuietSweeps(logging.Filter):
    """Celery's INFO lines for the beat's routine sweeps (sent, received, succeeded: 18 lines every
    SWEEP_INTERVAL_SECONDS) would be most of what `make run` prints. They are dropped; a sweep that does something
    logs a line of its own (workers/sweeps.py), and a failing one still logs its error."""

    routine = frozenset(entry["task"] for entry in app.conf.beat_schedule.values())

    def filter(self, record):
        if record.levelno > logging.INFO:
            return True
        data = getattr(record, "data", None)  # the worker's "received" and "succeeded" lines
        name = data.get("name") if isinstance(data, dict) else (  # the beat's "Sending due task %s (%s)"
            record.args[1] if isinstance(record.args, tuple) and len(record.args) == 2 else None)
        return name not in self.routine


for _name in ("celery.beat", "celery.worker.strategy", "celery.app.trace"):
    logging.getLogger(_name).addFilter(_QuietSweeps())


@signals.worker_process_init.connect
def _reap_for_a_replaced_pool_process(**_):
    """A pool process killed by the hard time limit is replaced by a new one: its browsers go then."""
    from workers.sweeps import reap_browsers

    reap_browsers(flask_app.config)


@signals.worker_init.connect
def _reap_orphaned_browsers(**_):
    """Browsers left by a worker of this deployment that was SIGKILLed: gone before this one takes tasks."""
    import logging

    from workers.browser.launch import missing_browser
    from workers.sweeps import reap_browsers

    reap_browsers(flask_app.config)
    config = flask_app.config
    if not config["SELENIUM_REMOTE_URL"]:
        problem = missing_browser(config["CHROMIUM_PATH"], config["CHROMEDRIVER_PATH"])
        if problem:
            logging.getLogger(__name__).warning("%s cloud_browser tasks will end as error.", problem)


_pool = _parked = _endpoint = _metrics = None


@signals.worker_ready.connect
def _start_browser_pool(sender=None, **_):
    """A tasks worker keeps the host's warm browser pools from its main process (never a pool child's, never the
    web's): the tasks' and the kept sessions' (their browsers live on the machines that run `worker`), started once
    the worker is up, so their start never delays the worker's own. The same process sweeps the browsers kept for
    paused tasks (workers/browser/parking.py), holds the kept sessions' (app/sessions/holder.py), and serves the
    machine's stream endpoint (workers/browser/host_endpoint.py): live views and CDP of the browsers held here, from
    any web process."""
    global _pool, _parked, _endpoint, _metrics
    from app.sessions import holder, pool as session_pool
    from workers.browser import host_endpoint, parking, pool

    config = flask_app.config
    amqp = getattr(getattr(sender, "app", None), "amqp", None)
    consumes = set(amqp.queues.consume_from or amqp.queues) if amqp is not None else set()
    if config["METRICS_BIND"]:
        _metrics = metrics_server.MetricsServer(config, sender).start()
    if "tasks" in consumes:
        _endpoint = host_endpoint.HostEndpoint(flask_app).start()
        _parked = parking.ParkedBrowsers(config).start()
        holder.start(flask_app)
        session_pool.start(config)
        if not pool.cold_reason(config):
            _pool = pool.BrowserPool(config, int(config["BROWSER_POOL_SIZE"])).start()


@signals.worker_shutdown.connect
def _stop_browser_pool(**_):
    """Its unclaimed browsers end with the worker (a SIGKILL: with the thread that started them); so do the kept ones
    (the answer then resumes from the pause's snapshot). Kept sessions' browsers outlive it: a worker started again
    on this machine holds them again."""
    from app.sessions import holder, pool as session_pool

    holder.stop()
    session_pool.stop()
    if _parked is not None:
        _parked.stop()
    if _endpoint is not None:
        _endpoint.stop()
    if _metrics is not None:
        _metrics.stop()
    if _pool is not None:
        _pool.stop()
