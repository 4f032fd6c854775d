"""A run's waits for the codes and links its steps name (`${code:TO}`, `${link:TO}`): the newest message for TO
that this key received since the run started, each used once, read in short transactions until CODE_WAIT_SECONDS."""
import time

from app.codes import service as codes
from app.models import clock

from .actions import Stopped
from .secrets import ArrivalTimeout

POLL_SECONDS = 0.5
WHAT = {"code": "a one-time code", "link": "a sign-in link"}


def waiter(api_key_id, seconds, should_stop, secrets):
    """`wait(kind, identifier)` for Secrets: blocks until a message arrives (ArrivalTimeout after `seconds`, Stopped
    on cancel); the trace line of each wait goes to `secrets.waited`. No transaction stays open while it waits."""
    since = clock()  # the database's clock, which stamps the messages
    used = {}  # (kind, identifier) -> the message last used: the next use takes a newer one

    def wait(kind, identifier):
        began = time.monotonic()
        deadline = began + seconds
        while True:
            found = codes.newest(api_key_id, identifier, kind, used.get((kind, identifier), 0), since)
            if found is not None:
                used[(kind, identifier)] = found[0]
                secrets.waited.append(f"waited {round(time.monotonic() - began)} s for a {kind} to {identifier}")
                return found[1]
            if time.monotonic() >= deadline:
                raise ArrivalTimeout(
                    f"Waited {seconds:g} s (CODE_WAIT_SECONDS) for {WHAT[kind]} sent to {identifier}; none arrived. "
                    f"Send it with POST /fast/v2/codes {{\"to\": \"{identifier}\", ...}} or by mail to that address "
                    "(claimed by this key) while the task waits.")
            if should_stop():
                raise Stopped()
            time.sleep(POLL_SECONDS)

    return wait
