"""Extension objects, created unbound and initialised by `create_app()`."""
from flask_sqlalchemy import SQLAlchemy
from sqlalchemy import event, text
from sqlalchemy.engine import Engine
from sqlalchemy.orm import DeclarativeBase

from . import embedded_broker
from .broker import ROUTES, TASKS_QUEUE, transport_options


class Base(DeclarativeBase):
    pass


db = SQLAlchemy(model_class=Base)


def unflushed_commit(executor):
    """Let the transaction open on `executor` (a Connection, or the Session) commit without waiting for Postgres to
    flush its WAL to disk: for writes of what a run shows while it goes on (its trace so far, its live state), which
    the run writes again at its next step and at its end. A database crash can lose the last ones (at most
    3 x wal_writer_delay); a crash of the worker loses nothing. SQLite (the embedded default): nothing to do."""
    dialect = executor.get_bind().dialect if hasattr(executor, "get_bind") else executor.dialect
    if dialect.name == "postgresql":
        executor.execute(text("SET LOCAL synchronous_commit TO OFF"))

def celery_init_app(app):
    """Bind a Celery app to the Flask app (Flask's examples/celery pattern): the workers' and beat's. The web
    process publishes with app.broker alone."""
    from celery import Celery, Task

    class FlaskTask(Task):
        def __call__(self, *args, **kwargs):
            with app.app_context():
                return self.run(*args, **kwargs)

    broker_url = app.config["BROKER_URL"]
    celery_app = Celery(app.name, task_cls=FlaskTask, broker=broker_url)
    celery_app.conf.update(
        # Explicit read/write URLs: Celery would otherwise prefer $CELERY_BROKER_URL over config.
        broker_read_url=broker_url,
        broker_write_url=broker_url,
        task_ignore_result=True,
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        # Each worker also consumes a queue of its own (<node>.dq2): the answer to a pause goes to the worker
        # that keeps the task's browser (app/dispatch/service.py).
        worker_direct=True,
        task_default_queue=TASKS_QUEUE,
        # The one table of task -> queue (app/broker.py), the same the web process publishes by.
        task_routes={task: {"queue": queue} for task, queue in ROUTES.items()},
        task_serializer="json",
        accept_content=["json"],
        broker_connection_retry_on_startup=True,
        broker_transport_options=transport_options(app.config["VAR_DIR"], broker_url),
        beat_schedule_filename=f"{app.config['VAR_DIR']}/celerybeat-schedule",
        worker_hijack_root_logger=False,
        # A run that outlives its own wall-clock budget (an action stuck past every timeout) is
        # interrupted: the soft limit raises inside it, so the runner still closes its browser.
        task_annotations={"workers.run_task": {
            "soft_time_limit": app.config["TASK_SOFT_TIME_LIMIT_SECONDS"],
            "time_limit": app.config["TASK_SOFT_TIME_LIMIT_SECONDS"] + 60}},
    )
    if broker_url.startswith("filesystem://"):
        # Embedded: billiard's prefork pool cannot be stopped cleanly on kombu's filesystem
        # transport (its pool processes are terminated and the stop hangs until honcho's SIGKILL);
        # a threads pool stops on SIGTERM like any other worker (workers/shutdown.py).
        celery_app.conf.worker_pool = "threads"
        # Messages written whole before a consumer sees them (kombu's own transport lets a worker read half of one).
        celery_app.conf.broker_transport = embedded_broker.TRANSPORT
    celery_app.set_default()
    app.extensions["celery"] = celery_app
    return celery_app


@event.listens_for(Engine, "connect")
def _sqlite_pragmas(dbapi_connection, _record):
    """The embedded SQLite database is shared by several processes: WAL lets them overlap."""
    import sqlite3

    if isinstance(dbapi_connection, sqlite3.Connection):
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA busy_timeout=30000")
        cursor.close()
