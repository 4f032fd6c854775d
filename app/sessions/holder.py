"""The machine holding kept browsers (a `worker` machine) carries out the stops written to their rows elsewhere (a web
process of any machine, beat), and stores what its sessions' browsers download where every web machine reads it."""
import logging

from ..background import Background
from ..sandbox import processes as sandbox_processes
from . import browsers, service

log = logging.getLogger(__name__)
CHECK_SECONDS = 1.0  # a stop made on another machine ends the browser within about this long


class Holder(Background):
    """A thread of each tasks worker's main process (workers/celery.py); the one holding the host's flock does the
    work, the others wait to take over. (The machine's heartbeat is its stream endpoint's registration, on a thread
    of its own: workers/browser/host_endpoint.py; beat ends the sessions of a machine that went quiet.) Every second
    it ends the processes of this host's sessions whose rows say ended (end_held_here): a stop or an idle sweep on
    any machine reaches the browser here, and one made while this machine was down reaches it when it is back; and
    it stores the files its idle sessions' browsers downloaded (keep_downloads_held_here: a CDP caller's, listed by
    any web machine)."""

    name = "session-holder"

    def __init__(self, app):
        super().__init__()
        self.app = app
        self._lock_file = None

    def _run(self):
        root = browsers.sessions_root(self.app.config)
        while not self.stopping.is_set():
            if self._lock_file is None:
                root.mkdir(parents=True, exist_ok=True)
                self._lock_file = sandbox_processes.host_lock(root / "holder.lock")
                if self._lock_file is None:
                    self.stopping.wait(5)
                    continue
            try:
                with self.app.app_context():
                    service.end_held_here()
                    service.keep_downloads_held_here()
            except Exception:  # the database is down, say: the next turn tries again
                log.warning("could not end the browsers of stopped sessions", exc_info=True)
            self.stopping.wait(CHECK_SECONDS)


_running = None


def start(app):
    """Run this process's holder thread (a tasks worker's, once it is ready)."""
    global _running
    _running = Holder(app).start()
    return _running


def stop():
    if _running is not None:
        _running.stop()
