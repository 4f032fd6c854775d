"""Graceful stop (SIGTERM, Ctrl-C): the worker stops taking tasks (Celery's warm shutdown) and
a task still running hands itself back at once instead of holding its lease until it expires.

The main process tells its pool processes with SIGUSR2 (they are in their own process group, so
a signal to the worker's group reaches only the main process); each sets `requested`, which the runner's
stop predicate reads between actions (and inside waits). The runner then releases the lease
(`lifecycle.hand_back`) and publishes the task again, so another worker, or this one's next
start, runs it without waiting for the lease sweep.
"""
import logging
import os
import signal
import threading

from celery import signals

log = logging.getLogger(__name__)
requested = threading.Event()
HAND_BACK_SIGNAL = signal.SIGUSR2


def _on_hand_back_signal(_signum, _frame):
    requested.set()


@signals.worker_process_init.connect
def _pool_process_listens(**_):
    """honcho (Ctrl-C, SIGTERM) and `kill -- -PGID` signal a worker's whole process group: pool
    processes would die mid-task (ERROR lines, lease held until it expires). In a group of their
    own they hear only their main process: SIGUSR2 at warm shutdown (hand the task back), then
    the pool's usual close. Celery has them SIGKILLed if the main process dies."""
    os.setpgrp()
    signal.signal(HAND_BACK_SIGNAL, _on_hand_back_signal)


@signals.worker_shutting_down.connect
def _tell_pool_processes(**_):
    requested.set()  # solo and threads pools run tasks in this process
    import billiard

    for child in billiard.process.active_children():
        try:
            os.kill(child.pid, HAND_BACK_SIGNAL)
        except (ProcessLookupError, TypeError):
            pass
