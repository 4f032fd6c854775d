"""A CDP relay's view of its session's row: whether the session (and so its credential) still lives, and its use."""
import asyncio
import logging
import threading
import time

log = logging.getLogger(__name__)
# Plain SQL, no models: the relay prints its port before SQLAlchemy is even imported (a session's create waits
# for it), and Postgres and SQLite both read these. CURRENT_TIMESTAMP is what the models' now() compiles to.
STATUS = "SELECT status FROM cloud_sessions WHERE id = :id"
USED = "UPDATE cloud_sessions SET last_used_at = CURRENT_TIMESTAMP WHERE id = :id AND status = 'active'"


class SessionRow:
    """The relay asks the database, never a file of its machine: a stop or an idle sweep on any machine is seen
    here, and the callers' commands written here keep the session from idling out on every machine's sweep."""

    CHECK_SECONDS = 1.0  # how soon open relays of a session stopped elsewhere are closed
    USE_WRITE_SECONDS = 2.0  # at most one write of use per this many seconds, however busy the caller

    def __init__(self, database_url, session_id, engine=None):
        """`engine`: the process's own (a web process's relay), else one of its own is made for `database_url`."""
        self.database_url, self.session_id = database_url, session_id
        self.written = 0.0
        self._writing, self._starting, self._engine = threading.Lock(), threading.Lock(), engine

    def engine(self):
        """Made at first use (or by warm(), off the event loop, once the relay serves)."""
        with self._starting:
            if self._engine is None:
                from sqlalchemy import create_engine
                from sqlalchemy.pool import NullPool

                # NullPool: a relay connects for each read or write, a few a second at most, and holds nothing.
                self._engine = create_engine(self.database_url, poolclass=NullPool)
        return self._engine

    def warm(self):
        threading.Thread(target=self.engine, name="cdp-session-engine", daemon=True).start()

    async def active(self):
        """True while the session is active; False once ended (or never made); None if the database cannot say."""
        try:
            return await asyncio.to_thread(self._read)
        except Exception as exc:
            log.warning("session %s: its row could not be read (%s)", self.session_id, type(exc).__name__)
            return None

    def _read(self):
        from sqlalchemy import text

        with self.engine().connect() as conn:
            return conn.execute(text(STATUS), {"id": self.session_id}).scalar() == "active"

    def used(self):
        """A caller sent a command: written as the session's last use, off the event loop, at most every few
        seconds (a lost write is caught up by the next command)."""
        moment = time.monotonic()
        if moment - self.written < self.USE_WRITE_SECONDS or not self._writing.acquire(blocking=False):
            return
        self.written = moment
        threading.Thread(target=self._write_use, name="cdp-use", daemon=True).start()

    def _write_use(self):
        from sqlalchemy import text

        try:
            with self.engine().begin() as conn:
                conn.execute(text(USED), {"id": self.session_id})
        except Exception as exc:
            self.written = 0.0
            log.warning("session %s: its CDP use could not be written (%s)", self.session_id, type(exc).__name__)
        finally:
            self._writing.release()
