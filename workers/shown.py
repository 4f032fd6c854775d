"""What a run shows while it goes, written beside it: its live state (tasks.live, for viewers) and its trace so far
(tasks.trace and usage, for pollers). A thread of the run writes them on a connection of its own, so a step never
waits on the database for them, and a value not yet written when a newer one comes is replaced by it (a viewer and a
poller want the latest, and the run's end writes it all anyway)."""
import logging
import threading

from sqlalchemy import update
from sqlalchemy.exc import SQLAlchemyError

from app.bounds import bounded_trace
from app.extensions import db, unflushed_commit
from app.models import Task

log = logging.getLogger(__name__)
FLUSH_SECONDS = 10  # how long the run's end (or a question to a person) waits for what it showed to be written


class Shown:
    """One run's writer: `live(state)` and `progress(trace, usage)` return at once; `flush()` waits until all of it is
    in the row (before the run reads the row back, or ends). A context manager: leaving it flushes and stops."""

    def __init__(self, task_id, owner):
        self.task_id, self.owner = task_id, owner
        self._engine = db.engine
        self._pending = {}  # "live" -> state (None: none any more), "progress" -> (trace, usage)
        self._writing = self._closed = False
        self._changed = threading.Condition()
        self._thread = threading.Thread(target=self._run, name=f"shown-{task_id}", daemon=True)
        self._thread.start()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def live(self, state):
        self._put("live", None if state is None else dict(state))

    def progress(self, trace, usage):
        self._put("progress", (bounded_trace(list(trace)), dict(usage)))  # a copy: the run goes on adding to its trace

    def flush(self, timeout=FLUSH_SECONDS):
        with self._changed:
            return self._changed.wait_for(lambda: not (self._pending or self._writing), timeout)

    def close(self):
        self.flush()
        with self._changed:
            self._closed = True
            self._changed.notify_all()
        self._thread.join(FLUSH_SECONDS)

    def _put(self, what, value):
        with self._changed:
            self._pending[what] = value
            self._changed.notify_all()

    def _run(self):
        while True:
            with self._changed:
                self._changed.wait_for(lambda: self._pending or self._closed)
                if not self._pending:
                    return
                values, self._pending, self._writing = self._pending, {}, True
            try:
                self._write(values)
            finally:
                with self._changed:
                    self._writing = False
                    self._changed.notify_all()

    def _write(self, values):
        """One transaction; its commit does not wait for the disk (unflushed_commit: both are written anew at the
        next step, and the run's end writes the trace with its outcome)."""
        try:
            with self._engine.begin() as conn:
                unflushed_commit(conn)
                if "live" in values:
                    conn.execute(update(Task).where(Task.id == self.task_id).values(live=values["live"]))
                if "progress" in values:
                    trace, usage = values["progress"]
                    conn.execute(update(Task).where(Task.id == self.task_id, Task.lease_owner == self.owner)
                                 .values(trace=trace, usage=usage))
        except SQLAlchemyError:  # a courtesy to viewers and pollers: the run goes on, its end writes it all
            log.warning("task %s: what it shows (%s) not written", self.task_id, ", ".join(values), exc_info=True)
