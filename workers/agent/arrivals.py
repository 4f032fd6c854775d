"""A run's waits for the codes and links its steps name (`${code:TO}`, `${link:TO}`): the newest message for TO
that this key received since the run started, each used once. While none has arrived the run pauses
(`input-required`, its browser parked as at a question, its worker slot given back) until one does
(app/codes/service.resume_waiting) or CODE_WAIT_SECONDS pass (workers/sweeps.expire_input_requests)."""
from datetime import datetime, timedelta

from app.codes import service as codes
from app.extensions import db
from app.models import clock

from .actions import Outcome
from .secrets import ArrivalTimeout, AwaitingArrival


def _now():
    """The database's clock, read in a transaction of its own."""
    try:
        return clock()
    finally:
        db.session.rollback()


class Arrivals:
    """`secrets.wait(kind, identifier)`: the value, or AwaitingArrival (the run pauses), or ArrivalTimeout once
    CODE_WAIT_SECONDS have passed since the wait began; each wait's trace line goes to `secrets.waited`. `kept`: what
    a run paused at a wait kept (`kept()`), for the run that takes it up. One short read per call: no transaction
    stays open across a wait."""

    def __init__(self, api_key_id, seconds, secrets, kept=None):
        kept = kept or {}
        self.api_key_id, self.seconds, self.secrets = api_key_id, seconds, secrets
        # The database's clock, which stamps the messages: one sent while the previous step still ran counts too.
        self.since = datetime.fromisoformat(kept["since"]) if kept.get("since") else _now()
        self.used = dict(kept.get("used") or {})  # "kind:identifier" -> the message last used: the next use is newer
        self.waiting = kept.get("waiting")  # {"kind", "to", "since"}: the wait the run paused at

    def __call__(self, kind, identifier):
        key = f"{kind}:{identifier}"
        found = codes.newest(self.api_key_id, identifier, kind, self.used.get(key, 0), self.since)
        waiting = self.waiting if self.waiting and (self.waiting["kind"], self.waiting["to"]) == (kind, identifier) \
            else None
        began = datetime.fromisoformat(waiting["since"]) if waiting else None
        if found is not None:
            self.used[key], self.waiting = found[0], None
            seconds = (_now() - began).total_seconds() if began else 0
            self.secrets.waited.append(f"waited {round(seconds)} s for a {kind} to {identifier}")
            return found[1]
        now = _now()
        began = began or now
        if (now - began).total_seconds() >= self.seconds:
            raise ArrivalTimeout(codes.gave_up(kind, identifier, self.seconds))
        self.waiting = {"kind": kind, "to": identifier, "since": began.isoformat()}
        text, hitl = codes.waiting_for(kind, identifier, began, began + timedelta(seconds=self.seconds))
        raise AwaitingArrival(Outcome("input-required", text, hitl=hitl))

    def kept(self):
        """What the run taking up this pause needs (sealed with the task: it names the messages used)."""
        return {"since": self.since.isoformat(), "used": self.used, "waiting": self.waiting}

    def arrived(self):
        """Whether what the paused run waits for is here already (it came while the run was pausing)."""
        kind, identifier = self.waiting["kind"], self.waiting["to"]
        return codes.newest(self.api_key_id, identifier, kind, self.used.get(f"{kind}:{identifier}", 0),
                            self.since) is not None
