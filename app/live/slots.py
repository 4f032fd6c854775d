"""Viewer slots of one web process, shared fairly: per key and per task or session, and a control socket never waits
for other keys' view sockets."""
import threading
from collections import Counter
from contextlib import contextmanager

from ..errors import ApiError


class Slots:
    """Counts the open viewer sockets of this process. View sockets: at most `total` in all, `per_key` of one key and
    `per_task` of one task or session. Control sockets are counted apart (a key's own view sockets cannot lock it
    out either) and outside `total`: at most `per_key` of one key and `controllers` of one task or session, so the
    owner's control socket is refused only because of the owner's own sockets."""

    def __init__(self, total, per_key, per_task, controllers):
        self.limits = {"view": (per_key, per_task), "control": (per_key, controllers)}
        self.total = total
        self.lock = threading.Lock()
        self.open = Counter()

    @contextmanager
    def held(self, found):
        """One slot for the socket of `found` (a live token's claims) while the block runs; 429 or 503 if none."""
        names = self._names(found)
        with self.lock:
            self._check(found["m"], names)
            self.open.update(names)
        try:
            yield
        finally:
            with self.lock:
                self.open.subtract(names)
                for name in names:
                    if self.open[name] <= 0:
                        del self.open[name]  # one entry per task ever watched would only grow

    @staticmethod
    def _names(found):
        watched = f"task {found['t']}" if "t" in found else f"session {found.get('s')}"
        mode = found["m"]
        return [(mode, "key", found["k"]), (mode, "watched", watched)] + ([("view", "all")] if mode == "view" else [])

    def _check(self, mode, names):
        per_key, per_watched = self.limits[mode]
        kind = "view" if mode == "view" else "control"
        if self.open[names[0]] >= per_key:
            raise ApiError(429, "Too Many Live Viewers", f"This API key already has {per_key} live {kind} sockets open "
                                                         "on this server: close one first.")
        if self.open[names[1]] >= per_watched:
            raise ApiError(429, "Too Many Live Viewers", f"This {names[1][2].split()[0]} already has {per_watched} live "
                                                         f"{kind} sockets open: close one first.")
        if mode == "view" and self.open[names[2]] >= self.total:
            raise ApiError(503, "Service Unavailable", "Too many live viewers on this server; try again shortly.")
