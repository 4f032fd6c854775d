"""What a running browser task shows its live viewers: where its DevTools are, the tab, URL and step the agent is
on, whether it is paused for a person. A small JSON file per task under VAR_DIR/live, written by the worker."""
import json
import os
import tempfile
import time
from pathlib import Path

from ..sandbox.box import devtools_socket_of
from ..sessions.browsers import session_dir


def live_dir(var_dir):
    return Path(var_dir) / "live"


def path_for(var_dir, task_id):
    return live_dir(var_dir) / f"{os.path.basename(task_id)}.json"


def box_endpoint(directory):
    """The CDP endpoint of a browser in the BrowserBox at `directory`: its DevTools Unix socket. The one place the
    live view learns how to reach a local browser (a Grid's browser: its se:cdp URL instead)."""
    return f"unix:{devtools_socket_of(directory)}"


def session_endpoint(config, session):
    """The CDP endpoint of a kept session's browser (app/sessions): a Grid's se:cdp URL, or its box's socket."""
    if session.host == "grid":
        return session.debugger_address
    return box_endpoint(session_dir(config, session.id))


def publish(var_dir, task_id, **fields):
    """Write the task's live state (atomically: a viewer never reads half a file). Fields merge with what is
    there: endpoint, targetId, url, step, paused (a person has control), waiting (why the agent asked for one)."""
    path = path_for(var_dir, task_id)
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    state = {**read(var_dir, task_id), **fields, "updated": time.time()}
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=".live-")
    with os.fdopen(handle, "w") as out:
        json.dump(state, out)
    os.replace(temporary, path)


def read(var_dir, task_id):
    """The task's live state, {} when it has none (not started, finished, or another host's)."""
    try:
        with open(path_for(var_dir, task_id)) as source:
            state = json.load(source)
    except (OSError, ValueError):
        return {}
    return state if isinstance(state, dict) else {}


def remove(var_dir, task_id):
    try:
        path_for(var_dir, task_id).unlink()
    except OSError:
        pass
