"""A daemon thread beside a process's own work (warm pools, the session holder, parked browsers), and its stop."""
import threading


class Background:
    """Subclasses set `name` and write `_run`, which returns once `stopping` is set; `stop` waits that long."""

    name = "background"
    join_seconds = 30

    def __init__(self):
        self.stopping = threading.Event()
        self.thread = None

    def start(self):
        self.thread = threading.Thread(target=self._run, name=self.name, daemon=True)
        self.thread.start()
        return self

    def stop(self):
        self.stopping.set()
        if self.thread is not None:
            self.thread.join(self.join_seconds)

    def _run(self):
        raise NotImplementedError
