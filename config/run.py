"""`make run`'s process manager: honcho, with a stop grace long enough for a clean stop.

honcho SIGKILLs whatever still runs 5 s after Ctrl-C. A worker's warm stop (finish or hand back
the running task, close the broker connection) can take a few seconds more on the embedded
filesystem broker, which polls. STOP_GRACE_SECONDS (default 20) replaces those 5 s.
"""
import os

import honcho.manager
from honcho.command import main

if __name__ == "__main__":
    honcho.manager.KILL_WAIT = int(os.environ.get("STOP_GRACE_SECONDS") or 20)
    main()
