"""The SDK's Excel actions, run here rather than in the web process (which checked them and waits for the answer)."""
import logging
import os
import time

from app.windows import service as windows

log = logging.getLogger(__name__)


def answer(command_id):
    started = time.monotonic()
    name = windows.answer_workbook_command(command_id)
    if name is None:
        log.info("workbook command %s: withdrawn or expired before a worker took it", command_id)
    else:
        log.info("workbook command %s (%s) answered by worker pid %s in %.2f s", command_id, name, os.getpid(),
                 time.monotonic() - started)
    return name
