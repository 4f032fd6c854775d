"""How many model requests run at once on this machine (LLM_CONCURRENCY): file locks shared by all workers."""
import fcntl
import os
import time
from contextlib import contextmanager

POLL_SECONDS = 0.25


class ModelSlots:
    """`count` slots, one lock file each under `directory`. A server that answers one request at a time
    (llama.cpp) makes a second caller wait inside its HTTP timeout; waiting here instead, where the wait is
    shown and a cancel is noticed, keeps every request's timeout for the model's own work."""

    def __init__(self, directory, count):
        self.directory, self.count = directory, count
        os.makedirs(directory, exist_ok=True)

    def _try(self):
        for index in range(self.count):
            fd = os.open(os.path.join(self.directory, f"model-slot-{index}.lock"), os.O_CREAT | os.O_RDWR, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return fd
            except BlockingIOError:
                os.close(fd)
        return None

    @contextmanager
    def turn(self, should_stop, on_wait):
        """Hold a slot for the body; yields False (no slot held) when `should_stop()` turned true meanwhile.
        `on_wait(since, done)` is called when a wait starts and when it ends."""
        since = None
        while (fd := self._try()) is None:
            if should_stop():
                yield False
                return
            if since is None:
                since = time.time()
                on_wait(since, False)
            time.sleep(POLL_SECONDS)
        try:
            if since is not None:
                on_wait(since, True)
            yield True
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)
