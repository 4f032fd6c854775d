"""Cloud browser sessions: create, look up, use from tasks, stop, expire; these functions own the transaction."""
import hashlib
import logging
import os
import secrets
import time
from datetime import datetime, timezone

from flask import current_app
from itsdangerous import BadSignature, SignatureExpired, URLSafeTimedSerializer
from sqlalchemy import exists, func, or_, select, update

from ..sandbox import box as sandbox
from ..broker import WEBHOOKS_QUEUE
from ..crypto import seal, unseal
from ..errors import ApiError
from ..extensions import db
from ..links import public_host
from ..models import BrowserWindow, CloudSession, Task, new_id, now, now_plus
from . import browsers, pool as session_pool

log = logging.getLogger(__name__)
ACTIVE = "active"
ENDED = "ended"
DOWNLOAD_URL_TTL = 3600


def create(api_key_id, name=None, timeout=None):
    """Start a kept browser for the key; returns the session row (active). 503 if no browser can start."""
    return _create(api_key_id, name, timeout, cdp=False)[0]


def _create(api_key_id, name, timeout, cdp):
    """(the active session row, the pooled browser it adopted or None)."""
    config = current_app.config
    timeout = timeout or config["CLOUD_SESSION_TIMEOUT_SECONDS"]
    open_count = db.session.execute(select(func.count()).select_from(CloudSession).where(
        CloudSession.api_key_id == api_key_id, CloudSession.status != ENDED)).scalar_one()
    if open_count >= config["CLOUD_SESSIONS_PER_KEY"]:
        raise ApiError(429, "Too Many Sessions",
                       f"This API key already has {open_count} open cloud browser sessions "
                       f"(CLOUD_SESSIONS_PER_KEY); stop one first.")
    db.session.commit()  # no transaction held across the claim
    # A pooled browser is laid out as a session already (app/sessions/pool.py): the session takes its id.
    pooled = session_pool.claim(config)
    session_id = pooled.session_id if pooled else "cbs_" + secrets.token_hex(12)
    try:
        window = BrowserWindow(id=new_id(), api_key_id=api_key_id, label=name or f"cloud session {session_id}")
        db.session.add(window)
        db.session.flush()
        db.session.add(CloudSession(id=session_id, api_key_id=api_key_id, browser_window_id=window.id, name=name,
                                    timeout_seconds=timeout, status="starting"))
        db.session.commit()  # the row exists before the browser: a crash during launch leaves a trace to sweep
    except BaseException:
        if pooled:
            session_pool.destroy(config, pooled)
        raise
    try:
        launched = pooled.launch if pooled else browsers.launch(config, session_id)
    except browsers.LaunchFailed as exc:
        _mark_ended(session_id, "failed")
        raise ApiError(503, "Browser Unavailable", f"The cloud browser could not be started: {exc}") from None
    started = db.session.execute(
        update(CloudSession).where(CloudSession.id == session_id, CloudSession.status == "starting")
        .values(status=ACTIVE, webdriver_url=launched.webdriver_url, webdriver_session=launched.webdriver_session,
                debugger_address=launched.debugger_address, host=launched.host, pid=launched.pid,
                profile_dir=launched.profile_dir, last_used_at=now())
        .returning(CloudSession.id)).first() is not None
    db.session.commit()
    if not started:  # stopped while it was starting: its browser must not outlive it
        browsers.terminate(launched.webdriver_url, launched.webdriver_session, launched.host, launched.pid,
                           launched.profile_dir, egress=browsers.egress_dir(config, session_id))
        raise ApiError(409, "Session Ended", f"Cloud browser session '{session_id}' was stopped while starting.")
    if pooled:
        session_pool.adopted(config, pooled, cdp)  # the session's now: it outlives this process, as a cold one
    return get(api_key_id, session_id), pooled


def get(api_key_id, session_id, active=False):
    """The key's session, or 404 (unknown and foreign ids look the same); with active, 409 once it ended."""
    row = db.session.get(CloudSession, session_id, populate_existing=True) if len(session_id) <= 64 else None
    if row is None or row.api_key_id != api_key_id:
        raise ApiError(404, "Session Not Found", f"No cloud browser session '{session_id}' for this API key.")
    if active and row.status != ACTIVE:
        raise ApiError(409, "Session Ended", f"Cloud browser session '{session_id}' has ended "
                                             f"({row.end_reason or row.status}); create a new one.")
    return row


def for_task(api_key_id, session_id, window_id):
    """The active session a submitted task runs in (by cloudBrowserSessionId, or by its window), or None."""
    if session_id:
        row = get(api_key_id, session_id, active=True)
        if window_id and window_id != row.browser_window_id:
            raise ApiError(400, "Invalid Request", f"browserWindowId '{window_id}' is not the window of cloud "
                                                   f"browser session '{session_id}' ({row.browser_window_id}).")
    elif window_id:
        row = db.session.execute(select(CloudSession).where(
            CloudSession.browser_window_id == window_id, CloudSession.api_key_id == api_key_id)).scalar_one_or_none()
        if row is None:
            return None
        if row.status != ACTIVE:
            get(api_key_id, row.id, active=True)  # raises the clear 409
    else:
        return None
    row.last_used_at = now()  # a queued task keeps its session from idling out
    return row


def serving_window(api_key_id, window_id):
    """The key's active session whose window this is, or None (then it is an extension's window)."""
    row = db.session.execute(select(CloudSession).where(
        CloudSession.browser_window_id == window_id, CloudSession.api_key_id == api_key_id)).scalar_one_or_none()
    if row is not None and row.status != ACTIVE:
        get(api_key_id, row.id, active=True)  # the clear 409
    return row


def serve_actions(session_id):
    """Have a worker answer the session window's direct actions (POST /extension-actions) in its browser.
    Published after the command row commits: a worker already serving the session looks for it before it
    stops, and this one serves it if that worker has stopped."""
    try:
        current_app.extensions["broker"].send("workers.serve_session_actions", [session_id], WEBHOOKS_QUEUE)
    except Exception as exc:  # broker down: the caller learns it, and the command is withdrawn
        log.warning("publish of session %s actions failed: %s", session_id, exc)
        raise ApiError(503, "Service Unavailable", "The task queue is unavailable, so the action was not run; "
                       "retry in a few seconds.", {"Retry-After": "5"}) from exc


def stop(api_key_id, session_id, reason="complete"):
    """Stop the key's session and its browser: {"success", "message"}."""
    row = get(api_key_id, session_id)
    if row.status == ENDED:
        return {"success": True, "message": f"Session {session_id} had already ended ({row.end_reason})."}
    end(session_id, reason)
    return {"success": True, "message": f"Session {session_id} stopped."}


def end(session_id, reason):
    """End a session (any key): the row first, so no new task starts in it, then its processes. Idempotent."""
    row = _mark_ended(session_id, reason)
    if row is None:
        return False
    browsers.terminate(row.webdriver_url, row.webdriver_session, row.host, row.pid, row.profile_dir,
                       extra_pids=(row.cdp_proxy_pid,), egress=browsers.egress_dir(current_app.config, session_id))
    log.info("cloud session %s ended (%s)", session_id, reason)
    return True


def _mark_ended(session_id, reason):
    row = db.session.execute(
        update(CloudSession).where(CloudSession.id == session_id, CloudSession.status != ENDED)
        .values(status=ENDED, end_reason=reason, ended_at=now(), cdp_token_sealed=None)
        .returning(CloudSession)).scalar_one_or_none()
    if row is not None:
        db.session.execute(update(BrowserWindow).where(BrowserWindow.id == row.browser_window_id)
                           .values(closed_at=now()))
    db.session.commit()
    return row


def _busy_elsewhere(task_id):
    """The session's current task still runs under a live lease (a dead worker's claim does not count)."""
    return exists().where(Task.id == CloudSession.busy_task_id, Task.id != task_id, Task.status == "pending",
                          Task.lease_owner.is_not(None), Task.lease_expires_at > now())


def acquire(session_id, task_id):
    """Claim the session for a task (one at a time); returns the row, or None while another task uses it.
    Raises ApiError 409 when the session has ended."""
    row = db.session.execute(
        update(CloudSession).where(CloudSession.id == session_id, CloudSession.status == ACTIVE,
                                   or_(CloudSession.busy_task_id.is_(None), CloudSession.busy_task_id == task_id,
                                       ~_busy_elsewhere(task_id)))
        .values(busy_task_id=task_id, last_used_at=now())
        .returning(CloudSession)).scalar_one_or_none()
    db.session.commit()
    if row is None:
        current = db.session.get(CloudSession, session_id, populate_existing=True)
        if current is None or current.status != ACTIVE:
            raise ApiError(409, "Session Ended", f"Cloud browser session '{session_id}' has ended.")
    return row


def release(session_id, task_id):
    db.session.execute(update(CloudSession).where(CloudSession.id == session_id,
                                                  CloudSession.busy_task_id == task_id)
                       .values(busy_task_id=None, last_used_at=now()))
    db.session.commit()


def expire_idle():
    """End active sessions idle longer than their timeout (none of their tasks running or queued)."""
    queued = exists().where(Task.cloud_session_id == CloudSession.id, Task.status == "pending",
                            or_(Task.lease_owner.is_(None), Task.lease_expires_at > now()))
    idle = db.session.execute(select(CloudSession.id).where(
        CloudSession.status == ACTIVE,
        CloudSession.last_used_at < func.now() - func.make_interval(0, 0, 0, 0, 0, 0, CloudSession.timeout_seconds),
        ~queued)).scalars().all() if _is_postgres() else _expired_sqlite(queued)
    db.session.commit()
    return sum(1 for session_id in idle if not _used_over_cdp(session_id) and end(session_id, "timed_out"))


def _used_over_cdp(session_id):
    """A CDP caller's commands are use (the relay touches a file, app/sessions/browsers.last_cdp_use): a session used
    so within its timeout gets that time as its last use, and stays."""
    used = browsers.last_cdp_use(current_app.config, session_id)
    timeout = db.session.execute(select(CloudSession.timeout_seconds).where(CloudSession.id == session_id)).scalar()
    if used is None or timeout is None or time.time() - used >= timeout:
        db.session.commit()
        return False
    kept = db.session.execute(
        update(CloudSession).where(CloudSession.id == session_id, CloudSession.status == ACTIVE)
        .values(last_used_at=datetime.fromtimestamp(used, timezone.utc)).returning(CloudSession.id)).first()
    db.session.commit()
    return kept is not None


def _expired_sqlite(queued):
    rows = db.session.execute(select(CloudSession.id, CloudSession.timeout_seconds).where(
        CloudSession.status == ACTIVE, ~queued)).all()
    return [sid for sid, seconds in rows if db.session.execute(select(
        CloudSession.id).where(CloudSession.id == sid, CloudSession.last_used_at < now_plus(-seconds))).first()]


def _is_postgres():
    return db.session.get_bind().dialect.name == "postgresql"


def end_abandoned_starts(seconds=300):
    """Sessions stuck in `starting` (the web process died during launch) are ended with their processes."""
    stuck = db.session.execute(select(CloudSession.id).where(
        CloudSession.status == "starting", CloudSession.created_at < now_plus(-seconds))).scalars().all()
    db.session.commit()
    for session_id in stuck:
        row = _mark_ended(session_id, "failed")
        if row is not None:
            profile = browsers.session_dir(current_app.config, session_id) / "profile"
            browsers.terminate(None, None, row.host or None, None, str(profile),
                               egress=browsers.egress_dir(current_app.config, session_id))
    return len(stuck)


def purge_ended_files():
    """Remove what ended sessions left on disk (their downloads) FILE_TTL_SECONDS after they ended."""
    import shutil

    ttl = current_app.config["FILE_TTL_SECONDS"]
    ended = db.session.execute(select(CloudSession.id).where(
        CloudSession.status == ENDED, CloudSession.profile_dir.is_not(None),
        CloudSession.ended_at < now_plus(-ttl)).limit(500)).scalars().all()
    for session_id in ended:
        shutil.rmtree(browsers.session_dir(current_app.config, session_id), ignore_errors=True)
    if ended:
        db.session.execute(update(CloudSession).where(CloudSession.id.in_(ended)).values(profile_dir=None))
    db.session.commit()
    return len(ended)


# Files the session's browser downloaded (local sessions: its downloads directory).

def downloads(api_key_id, session_id):
    row = get(api_key_id, session_id)
    items = []
    if browsers.session_dir(current_app.config, row.id).is_dir():
        # Out of the browser's folder into the service's (0600): a browser cannot swap a listed file for a link.
        sandbox.collect_downloads(browsers.downloads_dir(current_app.config, row.id),
                                       browsers.files_dir(current_app.config, row.id))
    folder = browsers.files_dir(current_app.config, row.id)
    if folder.is_dir():
        for entry in sorted(folder.iterdir()):
            if entry.is_file() and not entry.is_symlink():
                items.append({"key": entry.name, "file_name": entry.name, "size": entry.stat().st_size})
    return {"session_id": row.id, "downloaded_files": items}


def _download_signer():
    return URLSafeTimedSerializer(current_app.config["ENCRYPTION_KEY"], salt="cloud-session-download")


def download_token(api_key_id, session_id, key):
    """A signed, expiring token for one downloaded file (the SDK fetches it with no API key)."""
    row = get(api_key_id, session_id)
    if key not in {item["key"] for item in downloads(api_key_id, session_id)["downloaded_files"]}:
        raise ApiError(404, "File Not Found", f"Session '{session_id}' downloaded no file '{key}'.")
    return _download_signer().dumps({"s": row.id, "k": key}), DOWNLOAD_URL_TTL


def downloaded_file(token):
    """(path, filename) for a token from download_token; 403 if wrong or expired, 404 if the file is gone."""
    try:
        claims = _download_signer().loads(token, max_age=DOWNLOAD_URL_TTL)
    except SignatureExpired:
        raise ApiError(403, "Forbidden", "This download link has expired; ask for a new one.") from None
    except BadSignature:
        raise ApiError(403, "Forbidden", "This download link is not valid.") from None
    path = browsers.files_dir(current_app.config, claims["s"]) / os.path.basename(claims["k"])
    if path.is_symlink() or not path.is_file():
        raise ApiError(404, "File Not Found", "The file is no longer available.")
    return path, path.name


# CDP access (CloudBrowserEnvironment): a credential for one session, checked by the session's proxy.

def create_with_cdp(api_key_id, name, timeout):
    """A session plus DevTools access through its own authenticating proxy: (row, token)."""
    row, pooled = _create(api_key_id, name, timeout, cdp=True)
    token = secrets.token_urlsafe(32)
    try:
        if pooled:  # its relay runs already: it serves this token from now on
            browsers.write_cdp_token(current_app.config, row.id, hash_token(token))
            pid, port, path = pooled.relay
        else:
            # On a Grid the browser's files are on another machine: no download folder of ours for CDP downloads.
            downloads = None if row.host == "grid" else browsers.downloads_dir(current_app.config, row.id)
            pid, port, path = browsers.start_cdp_proxy(current_app.config, row.debugger_address, hash_token(token),
                                                       downloads, browsers.cdp_activity_file(current_app.config, row.id))
    except (browsers.LaunchFailed, OSError) as exc:
        end(row.id, "failed")
        raise ApiError(503, "Browser Unavailable", f"CDP access could not be set up: {exc}") from None
    host = current_app.config["CDP_PUBLIC_HOST"] or public_host()
    url = f"ws://{host}:{port}{path}"
    updated = db.session.execute(
        update(CloudSession).where(CloudSession.id == row.id, CloudSession.status == ACTIVE)
        .values(cdp_token_sealed=seal(token), cdp_proxy_pid=pid, cdp_url=url).returning(CloudSession.id)).first()
    db.session.commit()
    if updated is None:  # stopped meanwhile
        browsers.terminate(None, None, row.host, None, None, extra_pids=(pid,))
        raise ApiError(409, "Session Ended", f"Cloud browser session '{row.id}' was stopped while starting.")
    return get(api_key_id, row.id), token


def cdp_auth_headers(api_key_id, cdp_url):
    """The credential of the key's active session behind `cdp_url` (the SDK asks again to reconnect)."""
    row = db.session.execute(select(CloudSession).where(
        CloudSession.api_key_id == api_key_id, CloudSession.cdp_url == cdp_url)).scalar_one_or_none()
    if row is None:
        raise ApiError(404, "Session Not Found", "No cloud browser session of this API key has that CDP URL.")
    if row.status != ACTIVE or not row.cdp_token_sealed:
        raise ApiError(409, "Session Ended", f"Cloud browser session '{row.id}' has ended.")
    return {"auth_headers": {"Authorization": f"Bearer {unseal(row.cdp_token_sealed)}"},
            "cloud_browser_session_id": row.id}


def hash_token(token):
    return hashlib.sha256(token.encode()).hexdigest()


def _login_signer():
    return URLSafeTimedSerializer(current_app.config["ENCRYPTION_KEY"], salt="cloud-session-login")


def login_token(row):
    return _login_signer().dumps(row.id)


def window_for_login(token):
    """The window id the login page shows (the SDK reads it from #narada-browser-window-id)."""
    try:
        session_id = _login_signer().loads(token, max_age=DOWNLOAD_URL_TTL)
    except BadSignature:
        raise ApiError(403, "Forbidden", "This login link is not valid or has expired.") from None
    row = db.session.get(CloudSession, session_id)
    if row is None or row.status != ACTIVE:
        raise ApiError(409, "Session Ended", "This cloud browser session has ended.")
    return row


def sdk_config():
    return {"packages": {"narada": {"min_required_version": current_app.config["SDK_MIN_VERSION"]}}}
