"""The general agent's environment: no browser; the time in the task's zone and the task's attachments."""
from datetime import datetime
from zoneinfo import ZoneInfo

from . import attachments
from .actions import STRING, Observation, Tool, params
from .environment import MAX_OBSERVATION_CHARS, Environment


class GeneralEnvironment(Environment):
    """The general agent: no browser; the time in the task's zone and the task's attachments."""

    def tools(self, response_schema=None):
        return super().tools(response_schema) + [
            Tool("current_time", "The current date and time in the task's time zone.", params()),
            Tool("read_attachment", "Read an attached file by its key: text, CSV, JSON or PDF (its text).",
                 params(["key"], key=STRING)),
        ]

    def unavailable(self, name):
        return (f"The action '{name}' is not available to the general agent; start the prompt with "
                "/Operator for the web agent.")

    def time_zone(self):
        return (self.task.options or {}).get("timeZone") or "America/Los_Angeles"

    def do_current_time(self):
        zone = self.time_zone()
        now = datetime.now(ZoneInfo(zone))
        return Observation(f"{now.strftime('%A %Y-%m-%d %H:%M:%S')} ({zone}, UTC{now.strftime('%z')})")

    def do_read_attachment(self, key=None):
        stored, problem = self.attachment(key)
        if stored is None:
            return Observation(problem, failed=True)
        try:
            text = attachments.read_text(stored.filename, stored.content_type, stored.data or b"")
        except attachments.Unreadable as exc:
            return Observation(str(exc), failed=True)
        return Observation(text[:MAX_OBSERVATION_CHARS])
