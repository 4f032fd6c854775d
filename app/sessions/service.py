"""Cloud browser sessions: create, look up, use from tasks, stop, expire; these functions own the transaction."""
import logging
import json
import secrets
import shutil
import socket
import time

from flask import current_app
from itsdangerous import BadSignature, SignatureExpired, URLSafeTimedSerializer
from sqlalchemy import and_, exists, func, or_, select, update

from .. import lifecycle
from ..broker import ROUTES
from ..crypto import seal, unseal
from ..egress import upstream
from ..errors import ApiError
from ..sandbox import box as sandbox
from ..extensions import db
from ..files import service as files
from ..profiles import service as profiles, state as profile_state
from ..models import BrowserWindow, CloudSession, SessionHost, StoredFile, Task, new_id, now, now_plus
from . import browsers, cdp_url, pool as session_pool

log = logging.getLogger(__name__)
ACTIVE = "active"
ENDED = "ended"
DOWNLOAD_URL_TTL = 3600


def create(api_key_id, name=None, timeout=None, profile=None, proxy=None, settings=None):
    """Start a kept browser for the key; returns the session row (active). 503 if no browser can start. `profile`
    ({"name", "persist"}): its saved state is loaded into the browser, and with persist the session is its one writer
    until it ends. With a `proxy` (app/egress/upstream.py), its browser leaves through it for the session's life.
    `settings`: its browserSettings (app/sandbox/settings.py), for its launch and every task's tabs."""
    return _create(api_key_id, name, timeout, profile=profile, proxy=proxy, settings=settings)


START_WAIT_SECONDS = browsers.START_TIMEOUT + 60  # a worker's launch (its own limits are within this)
FAILED_START = "failed"
START_TASK = "workers.start_session"  # taken from its queue (ROUTES) by a worker that keeps browsers


def _create(api_key_id, name, timeout, token=None, profile=None, proxy=None, settings=None, side_panel=False):
    """Make the session's row and have a worker start its browser (start_here, on a machine that runs `worker`:
    the web holds no browser); the active row once it is up. `token`: its CDP credential, sealed in the row from
    the start (the web tier's relay checks it: app/sessions/cdp_web.py). The profile's name and the proxy (sealed) go to
    the worker with the start."""
    config = current_app.config
    timeout = timeout or config["CLOUD_SESSION_TIMEOUT_SECONDS"]
    open_count = db.session.execute(select(func.count()).select_from(CloudSession).where(
        CloudSession.api_key_id == api_key_id, CloudSession.status != ENDED)).scalar_one()
    if open_count >= config["CLOUD_SESSIONS_PER_KEY"]:
        raise ApiError(429, "Too Many Sessions",
                       f"This API key already has {open_count} open cloud browser sessions "
                       f"(CLOUD_SESSIONS_PER_KEY); stop one first.")
    if current_app.extensions["broker"].consumers(ROUTES[START_TASK]) == 0:  # nobody would start it: say so now
        raise ApiError(503, "Browser Unavailable", "The cloud browser could not be started: no worker is running "
                       "(the Procfile's `worker`, which starts and holds kept browsers); start one and retry.",
                       {"Retry-After": "5"})
    session_id = "cbs_" + secrets.token_hex(12)
    window = BrowserWindow(id=new_id(), api_key_id=api_key_id, label=name or "cloud session")
    db.session.add(window)
    db.session.flush()
    window_id = window.id
    row = CloudSession(id=session_id, api_key_id=api_key_id, browser_window_id=window_id, name=name,
                       timeout_seconds=timeout, status="starting", cdp_token_sealed=seal(token) if token else None,
                       browser_settings=settings or None, side_panel=side_panel)
    db.session.add(row)
    if profile and profile["persist"]:
        profiles.claim(api_key_id, profile["name"], session_id)  # 409 naming the writer, with nothing made
    db.session.commit()  # the row exists before the browser: a start nobody finished leaves a trace to sweep
    db.session.expunge(row)  # read again by its window: a worker may rename it (start_here)
    try:
        current_app.extensions["broker"].send(START_TASK, [session_id, {
            "profile": profile["name"] if profile else None,
            "proxy": seal(json.dumps(upstream.settings(proxy))) if proxy else None,
            "browserSettings": settings or None}])
    except Exception as exc:
        log.warning("publish of the start of session %s failed: %s", session_id, exc)
        _mark_ended(session_id, FAILED_START, "the task queue is unavailable")
        raise ApiError(503, "Browser Unavailable", "The cloud browser could not be started: the task queue is "
                       "unavailable; retry in a few seconds.", {"Retry-After": "5"}) from exc
    return _started(api_key_id, window_id)


def _started(api_key_id, window_id):
    """Wait for the worker's start (the row leaves `starting`), reading the row in short transactions; by its
    window, since a worker that hands it a pooled browser renames it after that browser (start_here)."""
    deadline = time.monotonic() + START_WAIT_SECONDS
    started = time.monotonic()
    while True:
        session_id, status, reason, message = db.session.execute(
            select(CloudSession.id, CloudSession.status, CloudSession.end_reason, CloudSession.end_message)
            .where(CloudSession.browser_window_id == window_id)).one()
        db.session.commit()
        if status != "starting":
            break
        if time.monotonic() > deadline:
            _mark_ended(session_id, FAILED_START, f"no worker started its browser within {START_WAIT_SECONDS} s")
            continue  # read again: its start may have finished meanwhile
        time.sleep(0.005 if time.monotonic() - started < 1 else 0.05)
    if status == ACTIVE:
        return get(api_key_id, session_id)
    if reason == FAILED_START:
        raise ApiError(503, "Browser Unavailable", f"The cloud browser could not be started: {message}")
    raise ApiError(409, "Session Ended", f"Cloud browser session '{session_id}' was stopped while starting.")


def start_here(session_id, options=None):
    """(A worker, `workers.start_session`.) Start the browser of a session the web made: from this machine's warm
    pool when one is ready (the row then takes the pooled browser's id, as the browser's folder is named after
    it, in the same statement that claims the row for this machine), else cold; chain the caller's proxy and load
    the profile (`options`: {"profile": name, "proxy": sealed settings, "browserSettings": the caller's, which a
    browser started for it takes, never a pooled one}); then the row says where it is, and that
    it is active. The web waits for that (_started)."""
    config = current_app.config
    options = options or {}
    settings = options.get("browserSettings")
    pooled = None if settings else session_pool.claim(config)  # the pool's have the default identity
    claimed = db.session.execute(
        update(CloudSession).where(CloudSession.id == session_id, CloudSession.status == "starting",
                                   CloudSession.host.is_(None))
        .values(host=socket.gethostname(), egress_host=socket.gethostname(),
                id=pooled.session_id if pooled else session_id)
        .returning(CloudSession.api_key_id)).first()
    if claimed is not None and pooled:
        profiles.rename_writer(session_id, pooled.session_id)
    db.session.commit()
    if claimed is None:  # ended already (the web gave up), or another worker has it (a message delivered twice)
        if pooled:
            session_pool.destroy(config, pooled)
        return None
    session_id = pooled.session_id if pooled else session_id
    try:
        if options.get("proxy"):  # before the browser's first request: its egress proxy reads it at each connection
            browsers.chain(config, session_id, json.loads(unseal(options["proxy"])))
        launched = pooled.launch if pooled else browsers.launch(config, session_id, settings=settings)
    except browsers.LaunchFailed as exc:
        _mark_ended(session_id, FAILED_START, str(exc))
        return None
    try:
        if options.get("profile"):
            _load_profile(claimed.api_key_id, launched, options["profile"])
    except browsers.Unanswered as exc:
        _stop_launched(config, session_id, launched)
        _mark_ended(session_id, FAILED_START, f"profile '{options['profile']}' could not be loaded into it: {exc}")
        return None
    started = db.session.execute(
        update(CloudSession).where(CloudSession.id == session_id, CloudSession.status == "starting")
        .values(status=ACTIVE, webdriver_url=launched.webdriver_url, webdriver_session=launched.webdriver_session,
                debugger_address=launched.debugger_address, host=launched.host, pid=launched.pid,
                profile_dir=launched.profile_dir, last_used_at=now())
        .returning(CloudSession.id)).first() is not None
    db.session.commit()
    if not started:  # ended while it was starting: its browser must not outlive it
        _stop_launched(config, session_id, launched)
        return None
    if pooled:
        session_pool.adopted(config, pooled)  # the session's now: it outlives this process, as a cold one
    return session_id


def _stop_launched(config, session_id, launched):
    browsers.terminate(launched.webdriver_url, launched.webdriver_session, launched.host, launched.pid,
                       launched.profile_dir, egress=browsers.egress_dir(config, session_id))


def _load_profile(api_key_id, launched, name):
    """The profile's saved state into the session's new browser (over CDP, before its first page); raises
    browsers.Unanswered if it cannot be (the session then fails to start, and the web answers 503 saying why)."""
    saved = profiles.load(api_key_id, name)
    if saved is not None:
        profile_state.apply(browsers.cdp_sender(launched.webdriver_url, launched.webdriver_session), saved)


def _save_profile(row):
    """At the session's end, before its browser goes: with persist, the browser's state replaces the profile's. A
    browser this machine cannot reach (it runs on another) saves nothing, and the profile is let go."""
    written = profiles.written_by(row.id)
    if written is None:
        return
    api_key_id, name = written
    try:
        if not (row.webdriver_url and (row.host == "grid" or browsers.held_here(row.host))):
            raise browsers.Unanswered("its browser runs on another machine")
        cdp = browsers.cdp_sender(row.webdriver_url, row.webdriver_session)
        cookies = cdp("Network.getAllCookies")
        tab = browsers.execute(row.webdriver_url, row.webdriver_session, profile_state.READ_STORAGE) or {}
        left = current_app.config["PROFILE_MAX_BYTES"] - profile_state.size({"c": cookies, "t": tab})
        tab["indexedDB"] = profile_state.read_indexed_db(cdp, max(0, left))
        earlier = profiles.load(api_key_id, name)
        log.info("cloud session %s: %s", row.id, profiles.save(
            api_key_id, name, row.id, profile_state.capture(cookies.get("cookies") or [], [tab], earlier)))
    except browsers.Unanswered as exc:
        log.warning("cloud session %s: profile '%s' not saved: %s", row.id, name, exc)
        profiles.release(row.id)


def get(api_key_id, session_id, active=False):
    """The key's session, or 404 (unknown and foreign ids look the same); with active, 409 once it ended."""
    row = db.session.get(CloudSession, session_id, populate_existing=True) if len(session_id) <= 64 else None
    if row is None or row.api_key_id != api_key_id:
        raise ApiError(404, "Session Not Found", f"No cloud browser session '{session_id}' for this API key.")
    if active and row.status != ACTIVE:
        raise _ended(row)
    return row


def _ended(row):
    why = f"{row.end_reason or row.status}: {row.end_message}" if row.end_message else row.end_reason or row.status
    return ApiError(409, "Session Ended", f"Cloud browser session '{row.id}' has ended ({why}); create a new one.")


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
    """Have a worker answer the session window's direct actions (POST /extension-actions) in its browser: the
    worker of the machine holding it, or a Grid's browser's egress proxy (its direct queue); any worker when that
    machine's worker does not consume its queue now (embedded broker: one machine; else the worker says the browser is out
    of reach). Published after the command row commits: a worker already serving the session looks for it
    before it stops, and this one serves it if that worker has stopped."""
    row = db.session.get(CloudSession, session_id)
    node = node_of(row) if row is not None else None
    db.session.commit()
    if node is None or not publish_action("workers.serve_session_actions", [session_id], node=node):
        publish_action("workers.serve_session_actions", [session_id])


def node_of_task(task_id):
    """The node holding the browser of the kept session a task runs in (node_of), or None."""
    row = db.session.execute(select(CloudSession).join(Task, Task.cloud_session_id == CloudSession.id)
                             .where(Task.id == task_id)).scalar_one_or_none()
    db.session.commit()
    return node_of(row) if row is not None else None


def node_of(session):
    """The Celery node of the worker holding a session's browser, or for a Grid's browser its egress proxy (a
    task's fence is written where that proxy reads it): the Procfile's `worker` is `tasks@<host>`. None for a
    session not started yet."""
    return f"tasks@{session.egress_host}" if session.egress_host else None


def publish_action(task, args, node=None):
    """Publish a direct action's work to the workers (its queue in ROUTES: `control`, short work behind no run), or
    to the worker `node`'s own queue (returns None when no worker consumes it now); a 503 when the broker does not
    take it."""
    broker = current_app.extensions["broker"]
    try:
        return broker.send_to_node(task, args, node) if node else broker.send(task, args)
    except Exception as exc:  # broker down: the caller learns it, and the command is withdrawn
        log.warning("publish of %s%s failed: %s", task, args, exc)
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
    """End a session (any key, on any machine): the row first, so no new task starts in it and its relay refuses
    its credential (app/sessions/cdp_session.py), then its processes: here when this machine and VAR_DIR hold
    them (one machine), else the holding machine's worker ends them within a second (app/sessions/holder.py),
    or when it is back. Idempotent."""
    row = _mark_ended(session_id, reason)
    if row is None:
        return False
    if row.host == "grid" or _held_here(session_id, row.host):
        _end_processes(row)
    log.info("cloud session %s ended (%s)", session_id, reason)
    return True


def _held_here(session_id, host):
    return browsers.held_here(host) and browsers.session_dir(current_app.config, session_id).is_dir()


def _end_processes(row):
    """Save its profile (with persist) and keep what its browser downloaded last, then end its processes and forget
    their pids. On the machine holding the browser: the only one that can read it."""
    _save_profile(row)
    _keep_last_downloads(row)
    browsers.terminate(row.webdriver_url, row.webdriver_session, row.host, row.pid, row.profile_dir,
                       extra_pids=(row.cdp_proxy_pid,), egress=browsers.egress_dir(current_app.config, row.id))
    _processes_ended(row.id)


def _keep_last_downloads(row):
    """What its browser downloaded last is a file of the key too (of the task driving it, if any)."""
    try:
        keep_downloads(row.api_key_id, row.id, task_id=row.busy_task_id)
    except Exception:
        log.warning("cloud session %s: its downloads could not be kept", row.id, exc_info=True)
        db.session.rollback()


def _processes_ended(session_id):
    """The row's pids are forgotten once its processes are gone: nothing is left for a holder to end."""
    db.session.execute(update(CloudSession).where(CloudSession.id == session_id)
                       .values(pid=None, cdp_proxy_pid=None))
    db.session.commit()


GRID_PROXY_LOOKBACK_SECONDS = 86400  # a Grid session stopped while its worker was down longer ago leaves its proxy
LOST_MACHINE = ("the machine holding its browser stopped answering, so the browser is out of reach (it is ended "
                "there if that machine comes back)")


def end_lost():
    """End, as `error`, the active sessions of machines whose worker has not said it is alive for
    SESSION_HOST_LOST_SECONDS (beat): their CDP credential is revoked, and their tasks end at once with that
    message, the one that was running there too (its lease is held by a worker of the lost machine). Silence
    counts only while the database was up: heartbeats refused by a restarting Postgres lose no machine."""
    seconds = current_app.config["SESSION_HOST_LOST_SECONDS"]
    silent = SessionHost.seen_at < now_plus(-seconds)
    if _is_postgres():
        silent = and_(silent, func.pg_postmaster_start_time() < now_plus(-seconds))
    lost = db.session.execute(select(CloudSession.id).join(SessionHost, SessionHost.host == CloudSession.egress_host)
                              .where(CloudSession.status == ACTIVE, silent)).scalars().all()
    db.session.commit()
    ended = [row for row in (_mark_ended(session_id, "error", LOST_MACHINE) for session_id in lost) if row is not None]
    for row in ended:
        log.warning("cloud session %s ended: %s", row.id, LOST_MACHINE)
        if row.host == "grid":  # the Grid's browser, reachable from here, would browse through nothing now
            browsers.terminate(row.webdriver_url, row.webdriver_session, row.host)
        fail_tasks(row.id, holder_lost=True)
    return len(ended)


def ended_reason(session_id):
    """Why a task in this session cannot run (its session ended), or None while it is active."""
    row = db.session.get(CloudSession, session_id, populate_existing=True) if session_id else None
    db.session.commit()
    if row is None or row.status != ENDED:
        return None
    return _ended(row).message


def fail_tasks(session_id, holder_lost=False):
    """End the session's tasks that nobody runs now (queued, or their worker's lease expired; any running, with
    `holder_lost`: their machine is gone) with its end's message, and the trace and usage of what a running
    one had done (a queued one: none, zero usage); returns how many."""
    message = ended_reason(session_id)
    waiting = db.session.execute(select(Task.id).where(
        Task.cloud_session_id == session_id, Task.status.in_(("pending", "input-required")))).scalars().all()
    db.session.commit()
    return sum(1 for task_id in waiting
               if lifecycle.end_unheld(task_id, message, holder_lost=holder_lost))


def end_held_here():
    """End the processes of this machine's sessions whose rows say ended (stopped or swept on another machine),
    keeping what their browsers downloaded last; returns how many sessions. Each is found by its folder (the pids
    in its row may belong to others by now), in this VAR_DIR (the one of this machine's worker)."""
    config = current_app.config
    rows = db.session.execute(select(CloudSession).where(CloudSession.status == ENDED, or_(
        and_(CloudSession.host == socket.gethostname(),
             or_(CloudSession.pid.is_not(None), CloudSession.cdp_proxy_pid.is_not(None))),
        # A Grid session's browser is the Grid's, but its egress proxy runs on the worker that started it (its folder
        # is removed below once the proxy is gone).
        and_(CloudSession.host == "grid", CloudSession.egress_host == socket.gethostname(),
             CloudSession.ended_at > now_plus(-GRID_PROXY_LOOKBACK_SECONDS))))
        .order_by(CloudSession.ended_at.desc()).limit(100)).scalars().all()
    db.session.commit()
    mine = [row for row in rows if browsers.session_dir(config, row.id).is_dir()]
    for row in mine:
        grid = row.host == "grid"  # only its egress proxy is here, and nothing of it is kept
        if not grid:
            _keep_last_downloads(row)
        found = browsers.end_here(config, row.id)
        if grid:
            shutil.rmtree(browsers.session_dir(config, row.id), ignore_errors=True)
        else:
            _processes_ended(row.id)
        log.info("cloud session %s: its stop reached this machine (%d processes ended)", row.id, found)
    return len(mine)


def keep_downloads_held_here():
    """Store what the browsers of this machine's active sessions finished downloading (a CDP caller's downloads
    included) as files of their keys: the downloads listing, on any web machine, reads them from the database."""
    config = current_app.config
    # A session's running task keeps its own downloads (they are its response's files) when it ends.
    rows = db.session.execute(select(CloudSession.id, CloudSession.api_key_id).where(
        CloudSession.status == ACTIVE, CloudSession.host == socket.gethostname(),
        CloudSession.busy_task_id.is_(None))).all()
    db.session.commit()
    for session_id, api_key_id in rows:
        if browsers.downloads_dir(config, session_id).is_dir():
            keep_downloads(api_key_id, session_id)


def _mark_ended(session_id, reason, message=None):
    row = db.session.execute(
        update(CloudSession).where(CloudSession.id == session_id, CloudSession.status != ENDED)
        .values(status=ENDED, end_reason=reason, end_message=message, ended_at=now(), cdp_token_sealed=None)
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
        if current is None:
            raise ApiError(409, "Session Ended", f"Cloud browser session '{session_id}' has ended.")
        if current.status != ACTIVE:
            raise _ended(current)
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
    # A CDP caller's commands are use too: its relay writes them to the row (app/sessions/cdp_session.py).
    return sum(1 for session_id in idle if end(session_id, "timed_out"))


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

def keep_downloads(api_key_id, session_id, task_id=None):
    """Move the session's finished downloads out of its browser's folder into the service's (0600: a browser
    cannot swap a listed file for a link), and make each new one a file of the key (of `task_id`, the task
    driving the session, if any): app/files/service.keep_downloads's list."""
    config = current_app.config
    if not browsers.session_dir(config, session_id).is_dir():
        return []  # its browser runs on another machine (or is gone): its downloads are listed there
    moved = sandbox.collect_downloads(browsers.downloads_dir(config, session_id), browsers.files_dir(config, session_id))
    return files.keep_downloads(api_key_id, browsers.files_dir(config, session_id), moved, task_id=task_id,
                                session_id=session_id)


def downloads(api_key_id, session_id):
    """The files the session's browser downloaded, from the database (the holding machine stores them: at each
    task's end, every second while no task runs, and at the session's end; here too when this machine holds it)."""
    row = get(api_key_id, session_id)
    keep_downloads(row.api_key_id, row.id, task_id=row.busy_task_id)
    stored = db.session.execute(select(StoredFile.key, StoredFile.filename, StoredFile.size).where(
        StoredFile.api_key_id == row.api_key_id, StoredFile.session_id == row.id)
        .order_by(StoredFile.filename, StoredFile.created_at)).all()
    db.session.commit()
    return {"session_id": row.id, "downloaded_files": [
        {"key": key, "file_name": filename, "size": size} for key, filename, size in stored]}


def _download_signer():
    return URLSafeTimedSerializer(current_app.config["ENCRYPTION_KEY"], salt="cloud-session-download")


def download_token(api_key_id, session_id, key):
    """A signed, expiring token for one downloaded file (the SDK fetches it with no API key)."""
    row = get(api_key_id, session_id)
    if key not in {item["key"] for item in downloads(api_key_id, session_id)["downloaded_files"]}:
        raise ApiError(404, "File Not Found", f"Session '{session_id}' downloaded no file '{key}'.")
    return _download_signer().dumps({"s": row.id, "k": key}), DOWNLOAD_URL_TTL


def downloaded_file(token):
    """The StoredFile a token from download_token names; 403 if wrong or expired, 404 if the file is gone."""
    try:
        claims = _download_signer().loads(token, max_age=DOWNLOAD_URL_TTL)
    except SignatureExpired:
        raise ApiError(403, "Forbidden", "This download link has expired; ask for a new one.") from None
    except BadSignature:
        raise ApiError(403, "Forbidden", "This download link is not valid.") from None
    stored = db.session.get(StoredFile, claims["k"])
    db.session.commit()
    if stored is None or stored.session_id != claims["s"] or stored.data is None:
        raise ApiError(404, "File Not Found", "The file is no longer available.")
    return stored


# CDP access (CloudBrowserEnvironment): a credential for one session, checked by the session's proxy.

def create_with_cdp(api_key_id, name, timeout, profile=None, proxy=None, settings=None, side_panel=False):
    """A session plus DevTools access through the web tier's authenticating relay (app/sessions/cdp_web.py):
    (row, token). The credential is sealed in the row from the start; any web process relays it. `side_panel`: the
    caller is the SDK's CloudBrowserEnvironment (it asks for the extension), whose reset_agent_state reloads a Narada
    side panel: the relay shows its Playwright a stand-in for it (app/sessions/cdp_side_panel.py), and no one else."""
    token = secrets.token_urlsafe(32)
    row = _create(api_key_id, name, timeout, token=token, profile=profile, proxy=proxy, settings=settings,
                  side_panel=side_panel)
    updated = db.session.execute(
        update(CloudSession).where(CloudSession.id == row.id, CloudSession.status == ACTIVE)
        .values(cdp_url=cdp_url.public_url(current_app.config, row.id)).returning(CloudSession.id)).first()
    db.session.commit()
    if updated is None:  # stopped meanwhile
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
