"""`make run`'s process manager: honcho, with a stop grace long enough for a clean stop.

honcho SIGKILLs whatever still runs 5 s after Ctrl-C. A worker's warm stop (finish or hand back
the running task, close the broker connection) can take a few seconds more on the embedded
filesystem broker, which polls. STOP_GRACE_SECONDS (default 20) replaces those 5 s. Ctrl-C exits 0: no "make: *** Error 130".
"""
import sys

import honcho.manager
from honcho.command import main

from config import settings

if __name__ == "__main__":
    honcho.manager.KILL_WAIT = settings.values()["STOP_GRACE_SECONDS"]
    try:
        main()
    except SystemExit as exc:
        # honcho exits 130 after Ctrl-C, which make reports as "*** Error 130"; Ctrl-C is how `make run` is
        # meant to end, so a stop it asked for is a success.
        sys.exit(0 if exc.code == 130 else exc.code)
