"""Runs one task: claim it, hold the lease while the agent works, finish it in one transaction."""
import logging
import os
import socket
import threading
import uuid

from flask import current_app

from app import lifecycle
from app.extensions import db
from app.models import Task

from .agent.environments import GeneralEnvironment
from .agent.loop import AgentLoop, Budget
from .planners.builtin import BuiltinPlanner

log = logging.getLogger(__name__)


def worker_identity():
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


class Lease:
    """Renews the task's lease on a background thread while the agent runs."""

    def __init__(self, task_id, owner, seconds):
        self.task_id, self.owner, self.seconds = task_id, owner, seconds
        self.engine = db.engine
        self.lost = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._renew, name=f"lease-{task_id}", daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()

    def _renew(self):
        while not self._stop.wait(self.seconds / 3):
            try:
                with self.engine.begin() as conn:
                    if not lifecycle.renew(conn, self.task_id, self.owner, self.seconds):
                        self.lost.set()
                        return
            except Exception:  # database blip: try again at the next beat, the lease has slack
                log.warning("lease renewal for %s failed", self.task_id, exc_info=True)


def execute_task(task_id):
    """Idempotent: a task that is not claimable (done, or held by another worker) is left alone."""
    owner = worker_identity()
    if lifecycle.claim(task_id, owner) is None:
        log.info("task %s not claimable; duplicate or finished message ignored", task_id)
        return
    config = current_app.config
    task = db.session.get(Task, task_id)
    with Lease(task_id, owner, config["LEASE_SECONDS"]) as lease:
        stop = lambda: lease.lost.is_set() or lifecycle.cancel_requested(task_id)  # noqa: E731
        loop = None
        try:
            loop = build_loop(task, owner, stop)
            outcome = loop.run()
        except ValueError as exc:  # the prompt cannot be planned
            outcome = _error(str(exc))
        except Exception:
            log.exception("task %s failed", task_id)
            outcome = _error("The task failed because of an internal error.")
    if lease.lost.is_set():
        log.warning("lease on %s lost; another worker or a sweep owns it now", task_id)
        return
    trace = loop.state.trace if loop else []
    usage = loop.usage() if loop else {"actions": 0, "credits": 0.0}
    lifecycle.finish(task_id, outcome.status, _response(outcome, trace), usage,
                     trace=trace, error=outcome.text if outcome.status == "error" else None,
                     owner=owner)


def build_loop(task, owner, should_stop):
    config = current_app.config
    planner = BuiltinPlanner(task.prompt)
    environment = GeneralEnvironment(task, should_stop)
    budget = Budget(config["MAX_STEPS"], config["TASK_TIMEOUT_SECONDS"])
    pricing = (config["CREDITS_PER_ACTION"], config["CREDITS_PER_1K_TOKENS"])

    def progress(state):
        lifecycle.record_progress(task.id, owner, state.trace, state.usage(*pricing))

    return AgentLoop(planner, environment, budget, pricing, on_progress=progress, should_stop=should_stop)


def _error(message):
    from .agent.actions import Outcome

    return Outcome("error", message)


def _response(outcome, trace):
    if outcome.status == "error":
        response = lifecycle.failure_response(outcome.text)
        response["actionTrace"] = trace
        return response
    structured = outcome.structured
    output = ({"type": "structured", "content": structured} if structured is not None
              else {"type": "text", "content": outcome.text})
    return {"output": output, "actionTrace": trace, "text": outcome.text,
            "structuredOutput": structured}
