"""Live view: signed, expiring view/control URLs of a running browser task or kept session, what a viewer
watches, and a person's takeover of the agent (take control, what they did, hand back)."""
import time
from datetime import datetime, timezone

from flask import current_app
from itsdangerous import BadSignature, URLSafeTimedSerializer
from sqlalchemy import select, update

from .. import browser_hosts
from ..task_queries import get_task, is_task_id, isoformat
from ..errors import ApiError
from ..extensions import db
from ..models import ApiKey, CloudSession, Task
from ..sessions import service as sessions
from . import state
from .cdp import CdpUnavailable

RUNNING = ("pending", "input-required")
VIEWER_PATH = "/live"  # the viewer page (app/live/routes.py); workers mint URLs too, outside any request
MAX_EVENTS = 200  # a takeover's recorded inputs (the trace entry lists them)
REVOKED = "The API key this live view belongs to was revoked."
EXPIRED = "This live view link has expired: ask for a new one."
NOT_FOUND = "This live view link is not valid, or it has expired: ask for a new one."


def _signer():
    return URLSafeTimedSerializer(current_app.config["ENCRYPTION_KEY"], salt="live-view")


def task_live_url(api_key_id, task_id, mode, by="a person"):
    """{liveUrl, mode, expiresAt} for the key's running cloud-browser task; 404 for another key's, 409 once it
    has finished or when it has no browser of ours to watch."""
    task = get_task(api_key_id, task_id, fresh=True)
    if task.status not in RUNNING:
        raise ApiError(409, "Conflict", f"Request '{task_id}' has finished ({task.status}): there is nothing "
                                        "live to watch.")
    if task.agent != "web" or (task.execution_mode != "cloud_browser" and not task.cloud_session_id):
        raise ApiError(409, "Conflict", f"Request '{task_id}' has no cloud browser to watch (live view is for "
                                        "cloud_browser tasks and tasks in a kept session).")
    return _live_url({"k": api_key_id, "t": task.id}, mode, by)


def session_live_url(api_key_id, session_id, mode, by="a person"):
    row = sessions.get(api_key_id, session_id, active=True)
    return _live_url({"k": api_key_id, "s": row.id}, mode, by)


def person_url(task):
    """The control liveUrl a task that asks for a person hands out (in its hitlInputMetadata), for its key."""
    key = db.session.get(ApiKey, task.api_key_id)
    return _live_url({"k": task.api_key_id, "t": task.id}, "control", key.name if key else "a person")


def _live_url(claims, mode, by):
    """`by`: who takes control with it (the key's name), for the trace."""
    expires = int(time.time()) + int(current_app.config["LIVE_URL_TTL_SECONDS"])
    token = _signer().dumps({**claims, "m": mode, "n": by, "x": expires})
    return {"liveUrl": f"{current_app.config['PUBLIC_URL']}{VIEWER_PATH}/{token}", "mode": mode,
            "expiresAt": isoformat(datetime.fromtimestamp(expires, timezone.utc))}


def claims(token):
    """The claims of a valid, unexpired live token; 404 otherwise (a forged and an expired link look alike)."""
    try:
        found = _signer().loads(token, max_age=int(current_app.config["LIVE_URL_TTL_SECONDS"]) + 60)
    except BadSignature:
        raise ApiError(404, "Not Found", NOT_FOUND) from None
    if not isinstance(found, dict) or found.get("x", 0) < time.time() or found.get("m") not in ("view", "control"):
        raise ApiError(404, "Not Found", NOT_FOUND)
    return found


def watched(found):
    """What the viewer of `found` (claims) shows now: {alive, endpoint, host, target, targetId, url, step, task,
    paused, waiting, takeover, why}. One small read of the row (the task's live state is in it, whichever machine
    runs it), and of its task's for a session."""
    try:
        if db.session.execute(select(ApiKey.id).where(ApiKey.id == found["k"], ApiKey.revoked_at.is_(None))
                              ).first() is None:
            return {"alive": False, "why": REVOKED, "code": 1008}
        if "t" in found:
            task_id = found["t"]
            row = db.session.execute(select(Task.status, Task.api_key_id, Task.takeover, Task.live)
                                     .where(Task.id == task_id)).first() if is_task_id(task_id) else None
            if row is None or row.api_key_id != found["k"] or row.status not in RUNNING:
                return {"alive": False, "why": "The task has finished."}
            return {**(row.live or {}), "alive": True, "task": task_id, "target": browser_hosts.task_target(task_id),
                    "takeover": row.takeover, "status": row.status}
        session = db.session.get(CloudSession, found.get("s", ""), populate_existing=True)
        if session is None or session.api_key_id != found["k"] or session.status != sessions.ACTIVE:
            return {"alive": False, "why": "The session has ended."}
        view = {"alive": True, "endpoint": state.session_endpoint(session), "host": session.host,
                "target": browser_hosts.session_target(session.id), "task": session.busy_task_id, "status": "idle"}
        if session.busy_task_id:
            task = db.session.execute(select(Task.status, Task.takeover, Task.live)
                                      .where(Task.id == session.busy_task_id)).first()
            if task is not None:
                live = task.live or {}
                view.update({key: live[key] for key in ("targetId", "url", "step", "paused", "loading", "waiting")
                             if key in live})
                view.update(takeover=task.takeover, status=task.status)
        return view
    finally:
        db.session.rollback()  # a viewer polls this: no transaction stays open between polls


def stream_of(view):
    """(URL, token) of the stream endpoint of the machine holding the browser `view` watches (a Unix socket there):
    the live view reaches it the same way from every web process, on that machine or another."""
    try:
        url = browser_hosts.url_of(view.get("host"))
    finally:
        db.session.rollback()
    if not url:
        raise CdpUnavailable(f"its machine ({view.get('host')}) has no stream endpoint registered: is its worker "
                             "running?")
    return url, browser_hosts.mint(current_app.config, view["host"], view["target"])


def take(task_id, by):
    """A person asks for control: the agent pauses at once, at its next safe point (inside a wait, a page load or a
    model call: workers/agent/takeover.py). False if the task is not running."""
    row = _locked(task_id)
    if row is None:
        return False
    if not (row.takeover or {}).get("active"):
        row.takeover = {"active": True, "by": by, "since": _ms(), "events": []}
    db.session.commit()
    return True


def record(task_id, action):
    """Add what a person did (a click, typed text, a key) to the takeover, for the task's actionTrace; the same
    action again only counts."""
    row = _locked(task_id)
    takeover = dict(row.takeover or {}) if row is not None else {}
    if takeover.get("active"):
        events = list(takeover.get("events") or [])
        if events and events[-1]["action"] == action:
            events[-1] = {**events[-1], "times": events[-1].get("times", 1) + 1, "lastTs": _ms()}
        elif len(events) < MAX_EVENTS:
            events.append({"action": action, "ts": _ms()})
        row.takeover = {**takeover, "events": events}
    db.session.commit()


def hand_back(task_id):
    """The person hands control back: the agent resumes at once, and reads the page afresh. A task that asked for
    a person (`input-required` with `hitlInputMetadata.type` "takeover") is answered by it and runs on."""
    row = _locked(task_id)
    if row is None:
        return False
    takeover = row.takeover or {}
    if takeover.get("active") or row.status == "input-required":
        row.takeover = {**takeover, "active": False, "since": takeover.get("since") or _ms(), "until": _ms(),
                        "events": takeover.get("events") or [], "by": takeover.get("by") or "a person"}
    if row.status == "input-required" and (row.hitl or {}).get("type") == "takeover":
        row.status, row.hitl, row.response = "pending", None, None
    db.session.commit()
    return True


def _locked(task_id):
    """The running task's row, locked for this read-modify-write, or None."""
    row = db.session.execute(select(Task).where(Task.id == task_id, Task.status.in_(RUNNING))
                             .with_for_update().execution_options(populate_existing=True)).scalar_one_or_none()
    if row is None:
        db.session.rollback()
    return row


def clear_takeover(task_id, owner):
    """The worker has written the takeover into the trace (its lease owner only)."""
    db.session.execute(update(Task).where(Task.id == task_id, Task.lease_owner == owner).values(takeover=None))
    db.session.commit()


def _ms():
    return int(time.time() * 1000)
