"""`wait: true`: one Postgres LISTEN connection per web process wakes the requests waiting on tasks.

`lifecycle.finish()` runs `pg_notify('task_finished', <task id>)` in the transaction that ends
(or pauses) a task. A daemon thread holds the process's only listening connection and sets the
`threading.Event` of every request waiting on that id. A request registers its event before it
first reads the task row, so a task that finishes between the read and the wait still wakes it.
Without a working listener (embedded SQLite has no NOTIFY; a Postgres connection being
re-established) waiting requests re-read their row every `WAIT_POLL_SECONDS` instead.
"""
import logging
import os
import select
import threading
import time
from contextlib import contextmanager

from .errors import ApiError
from .extensions import db

log = logging.getLogger(__name__)

CHANNEL = "task_finished"
KEEPALIVE_SECONDS = 30  # an idle listener checks its connection this often


class TaskWaiters:
    """The waiting requests of one process, keyed by task id."""

    def __init__(self, connect=None, poll_seconds=0.5, max_concurrent=64):
        self._connect = connect  # returns a new DB-API connection; None: no NOTIFY (SQLite)
        self.poll_seconds = poll_seconds
        self._lock = threading.Lock()
        self._events = {}
        self._slots = threading.BoundedSemaphore(max_concurrent)
        self.max_concurrent = max_concurrent
        self.listening = threading.Event()
        self._thread, self._pid = None, None
        self.backend_pid = None

    @classmethod
    def for_app(cls, app):
        connect = None
        with app.app_context():
            engine = db.engine
            if engine.dialect.name == "postgresql":
                args, kwargs = engine.dialect.create_connect_args(engine.url)
                # A silently dropped connection must fail, not hang: TCP keepalives.
                kwargs = {"keepalives": 1, "keepalives_idle": 30, "keepalives_interval": 10,
                          "keepalives_count": 3, **kwargs}
                connect = lambda: engine.dialect.dbapi.connect(*args, **kwargs)  # noqa: E731
        waiters = cls(connect, app.config["WAIT_POLL_SECONDS"], app.config["WAIT_MAX_CONCURRENT"])
        app.extensions["task_waiters"] = waiters
        return waiters

    @contextmanager
    def slot(self):
        """A place among this process's waiting requests, or 503 when they are all taken."""
        if not self._slots.acquire(blocking=False):
            raise ApiError(503, "Service Unavailable",
                           f"This server already holds {self.max_concurrent} waiting requests; retry "
                           "shortly, or submit without wait and poll.", {"Retry-After": "5"})
        try:
            yield
        finally:
            self._slots.release()

    @contextmanager
    def watch(self, task_id):
        """Register an Event that is set when `task_id` may have changed."""
        with self.watch_many([task_id]) as event:
            yield event

    @contextmanager
    def watch_many(self, keys):
        """One Event set when any of `keys` is notified (the window channel: `window:<id>`, `command:<id>`)."""
        event = threading.Event()
        with self._lock:
            for key in keys:
                self._events.setdefault(key, set()).add(event)
        try:
            self._ensure_listener()
            yield event
        finally:
            with self._lock:
                for key in keys:
                    events = self._events.get(key, set())
                    events.discard(event)
                    if not events:
                        self._events.pop(key, None)

    def wait(self, event, remaining):
        """Block until woken or `remaining` seconds pass; without a listener, poll instead."""
        if not self.listening.is_set():
            remaining = min(remaining, self.poll_seconds)
        event.wait(remaining)

    def wake(self, task_id):
        with self._lock:
            for event in self._events.get(task_id, ()):
                event.set()

    def wake_all(self):
        with self._lock:
            for events in self._events.values():
                for event in events:
                    event.set()

    def _ensure_listener(self):
        if self._connect is None:
            return
        with self._lock:
            if self._thread is None or self._pid != os.getpid() or not self._thread.is_alive():
                self._pid = os.getpid()
                self.listening.clear()
                self._thread = threading.Thread(target=self._listen_forever, daemon=True,
                                                name="task-finished-listener")
                self._thread.start()
        # The first request waits briefly for LISTEN; if it is late, it polls until then.
        self.listening.wait(2)

    def _listen_forever(self):
        backoff = 0.5
        while True:
            started = time.monotonic()
            try:
                self._listen()
            except Exception as exc:
                if time.monotonic() - started > 60:  # it had been working: start over gently
                    backoff = 0.5
                log.warning("LISTEN %s connection lost (%s); reconnecting in %.1f s",
                            CHANNEL, exc.__class__.__name__, backoff)
            self.listening.clear()
            self.wake_all()  # they poll until the listener is back
            time.sleep(backoff)
            backoff = min(backoff * 2, 10)

    def _listen(self):
        conn = self._connect()
        try:
            conn.autocommit = True
            with conn.cursor() as cursor:
                cursor.execute(f"LISTEN {CHANNEL}")
            self.backend_pid = conn.get_backend_pid()  # for pg_stat_activity and tests
            self.listening.set()
            # Notifications sent before LISTEN took effect are lost: everyone re-reads once.
            self.wake_all()
            while True:
                ready, _, _ = select.select([conn], [], [], KEEPALIVE_SECONDS)
                if not ready:
                    with conn.cursor() as cursor:
                        cursor.execute("SELECT 1")
                conn.poll()
                for notify in conn.notifies:
                    self.wake(notify.payload)
                conn.notifies.clear()
        finally:
            self.listening.clear()
            conn.close()
