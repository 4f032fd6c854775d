"""Environments execute actions: the general agent's server-side tools."""
import time

from .actions import Finish, Observation, Outcome


class GeneralEnvironment:
    """Server-side execution with no browser."""

    def __init__(self, task, should_stop=lambda: False):
        self.task = task
        self.should_stop = should_stop

    def url(self):
        return ""

    def execute(self, action):
        handler = getattr(self, f"do_{action.name}", None)
        if handler is None:
            raise Finish(Outcome("error", f"The action '{action.name}' is not available to this agent."))
        return handler(**action.args)

    def do_answer(self, text):
        raise Finish(Outcome("success", text))

    def do_wait(self, seconds):
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and not self.should_stop():
            time.sleep(min(0.25, max(0.0, deadline - time.monotonic())))
        return Observation(f"waited {seconds:g} s")

    def close(self):
        pass
