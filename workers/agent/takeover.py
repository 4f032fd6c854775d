"""A person in a browser run (live view, app/live): the agent pauses at once when one takes control (between steps,
or inside a long one at a safe point), and can ask for one (`input-required`) at a login, a 2FA code or a captcha it
cannot pass. No model call while paused."""
import time

from app import browser_hosts, lifecycle
from app.live import service as live

from .actions import Stopped
from .loop import BudgetExceeded, _ts

POLL_SECONDS = 0.2  # how often a paused run re-reads its row for the hand-back


class NobodyCame(BudgetExceeded):
    """The task's time ran out while a person had control, or before one came."""


class PersonControl:
    """One run's side of the takeover. `flags()` reads the row fresh: (cancel requested, takeover, status);
    `seen` holds the latest read (the runner's should_stop reads it between actions anyway); `halted()`: the lease
    is lost or the worker stops; `shown`: the run's writer of its live state and trace so far (workers/shown.py)."""

    def __init__(self, task, owner, flags, seen, shown, halted=lambda: False):
        self.task, self.owner, self.shown = task, owner, shown
        self.flags, self.seen, self.halted = flags, seen, halted
        self.published = {"host": browser_hosts.this_host()}  # the machine whose stream endpoint reaches it
        self.pending = []  # trace entries of a finished takeover, for the loop to add
        self.paused_seconds = 0.0  # paused inside steps so far (a wait does not count them as waited)
        self.deadline, self.here = lambda: float("inf"), lambda: ""  # the run's; set by the environment (go_live)

    # --- what viewers read ---------------------------------------------------------------------------------
    def publish(self, **fields):
        """The live state viewers follow (app/live/state.py), when something changed; written beside the run."""
        if all(self.published.get(name) == value for name, value in fields.items()):
            return
        self.published.update(fields)
        self.shown.live(self.published)

    def close(self):
        self.shown.live(None)

    # --- pausing -------------------------------------------------------------------------------------------
    def between_steps(self, deadline, here):
        """Called before each model turn: while a person holds control, wait (no model call, the lease renews);
        a takeover that ended (now or earlier) becomes trace entries (`here()`: the page's URL for them). Returns those
        entries, or []."""
        takeover = self.seen.get("takeover")
        if takeover and takeover.get("active"):
            takeover = self._wait(deadline, lambda flags: not (flags[1] or {}).get("active"))
        self._ended(takeover, here)
        entries, self.pending = self.pending, []
        return entries

    def hold(self):
        """A safe point inside a step (the runner's should_stop(), read in waits, a page's settling and while a
        model call runs): a takeover asked for meanwhile pauses the run here, at once, until the hand-back. True if
        the run must stop instead (cancel, lease lost). The step then goes on: a wait for what it had left, a model's
        answer planned before the hand-back is not used (workers/agent/loop.py plans again)."""
        takeover = self.seen.get("takeover")
        if not (takeover and takeover.get("active")):
            return False
        started = time.monotonic()
        try:
            takeover = self._wait(self.deadline(), lambda flags: not (flags[1] or {}).get("active"))
        except Stopped:
            return True
        finally:
            self.paused_seconds += time.monotonic() - started
        self._ended(takeover, self.here)
        return False

    def ask(self, reason, deadline, here):
        """The agent asks for a person: `input-required` with the live URL until a hand-back answers it."""
        link = live.person_url(self.task)
        question = (f"A person is needed: {reason} Open liveUrl, take control, do what is needed, then hand "
                    "back control.")
        hitl = {"type": "takeover", "reason": reason, "liveUrl": link["liveUrl"], "expiresAt": link["expiresAt"],
                "question": question}
        self.shown.flush()  # the pause's response carries the trace so far, as the row holds it
        if not lifecycle.await_person(self.task.id, self.owner, question, hitl):
            raise Stopped()
        self.publish(waiting=reason)
        try:
            takeover = self._wait(deadline, lambda flags: flags[2] != "input-required"
                                  and not (flags[1] or {}).get("active"))
        finally:
            self.publish(waiting=None)
        self._ended(takeover, here)

    def _ended(self, takeover, here):
        """A handed-back takeover: its trace entries wait for the loop, and the row forgets it."""
        if takeover and takeover.get("until"):
            self.pending += self._entries(takeover, here())
            live.clear_takeover(self.task.id, self.owner)
            self.seen["takeover"] = None

    def _wait(self, deadline, over):
        """Sleep until `over(flags)`; the takeover as it ended. Cancel or time up end the wait."""
        self.publish(paused=True)
        try:
            while True:
                flags = self.flags()
                self.seen["takeover"] = flags[1]
                if self.halted() or flags[0] or flags[2] not in ("pending", "input-required"):
                    raise Stopped()
                if over(flags):
                    return flags[1]
                if time.monotonic() > deadline:
                    raise NobodyCame("Time limit reached while waiting for a person to hand control back "
                                     "(the task's time limit keeps running while a person has control).")
                time.sleep(POLL_SECONDS)
        finally:
            self.publish(paused=False)

    def _entries(self, takeover, url):
        """The takeover's actionTrace entries: who had control, when and how long, then what they did."""
        since, until = int(takeover.get("since") or 0), int(takeover["until"])
        by = takeover.get("by") or "a person"
        events = takeover.get("events") or []
        entries = [{"url": url, "action": f"{by} had control of the browser ({(until - since) / 1000:g} s)",
                    "takeover": {"by": by, "events": len(events)}, "startTs": _ts(since), "endTs": _ts(until),
                    "durationMs": until - since}]
        for event in events:
            times = event.get("times", 1)
            entries.append({"url": url, "action": f"{by}: {event['action']}" + (f" ({times}×)" if times > 1 else ""),
                            "by": by, "startTs": _ts(event["ts"]), "endTs": _ts(event.get("lastTs", event["ts"])),
                            "durationMs": event.get("lastTs", event["ts"]) - event["ts"]})
        return entries
