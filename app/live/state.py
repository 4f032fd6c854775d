"""What a running browser task shows its live viewers: where its DevTools are (the machine and its socket there), the
tab, URL and step the agent is on, whether it is paused for a person. Written by the worker into the task's row
(tasks.live, by workers/shown.py), so a viewer on any web machine reads it with the row it reads anyway."""
from sqlalchemy import select

from ..extensions import db
from ..models import Task
from ..sandbox.box import devtools_socket_of


def box_endpoint(directory):
    """The CDP endpoint of a browser in the BrowserBox at `directory`: its DevTools Unix socket. The one place the
    live view learns how to reach a local browser (a Grid's browser: its se:cdp URL instead)."""
    return f"unix:{devtools_socket_of(directory)}"


def session_endpoint(session):
    """The CDP endpoint of a kept session's browser (app/sessions): a Grid's se:cdp URL, or its box's socket on the
    session's host."""
    return session.debugger_address


def read(task_id):
    """The task's live state as its row holds it now, {} when it has none (not started, or finished)."""
    with db.engine.connect() as conn:
        return conn.execute(select(Task.live).where(Task.id == task_id)).scalar_one_or_none() or {}
