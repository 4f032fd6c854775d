"""Database tables: API keys, tasks, browser windows, cloud sessions, webhook deliveries, files, idempotency."""
import uuid
from datetime import timezone

from sqlalchemy import (
    JSON, Boolean, DateTime, ForeignKey, Index, Integer, LargeBinary, String, Text,
    TypeDecorator, UniqueConstraint, func, literal,
)
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.orm import Mapped, mapped_column
from sqlalchemy.sql import expression
from sqlalchemy.sql import functions as sqlfunctions

from .extensions import db


class UtcDateTime(TypeDecorator):
    """Timezone-aware timestamps, also on SQLite (which stores them naive, in UTC)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_result_value(self, value, dialect):
        if value is not None and value.tzinfo is None:
            value = value.replace(tzinfo=timezone.utc)
        return value


def new_id():
    return str(uuid.uuid4())


def now():
    """The database clock, typed aware: SQLite hands back naive UTC, which must not meet aware values."""
    return func.now(type_=UtcDateTime())


def clock():
    """The database clock's current value (aware on every dialect)."""
    from sqlalchemy import select

    return db.session.execute(select(now())).scalar_one()


class ApiKey(db.Model):
    __tablename__ = "api_keys"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(200))
    plan: Mapped[str] = mapped_column(String(50), default="free")
    prefix: Mapped[str] = mapped_column(String(16))
    key_hash: Mapped[str] = mapped_column(String(64), unique=True)
    # Standard Webhooks signing secret (whsec_...), encrypted at rest; the previous one is
    # still used to sign until its grace period ends, so receivers can roll over.
    webhook_secret: Mapped[str | None] = mapped_column(Text)
    previous_webhook_secret: Mapped[str | None] = mapped_column(Text)
    previous_webhook_secret_expires_at = mapped_column(UtcDateTime)
    created_at = mapped_column(UtcDateTime, server_default=now(), nullable=False)
    revoked_at = mapped_column(UtcDateTime)


class BrowserWindow(db.Model):
    """A browser window with the extension installed, owned by one API key."""

    __tablename__ = "browser_windows"

    id: Mapped[str] = mapped_column(String(64), primary_key=True, default=new_id)
    api_key_id: Mapped[int] = mapped_column(ForeignKey("api_keys.id", ondelete="CASCADE"), index=True)
    label: Mapped[str | None] = mapped_column(String(200))
    created_at = mapped_column(UtcDateTime, server_default=now(), nullable=False)
    last_seen_at = mapped_column(UtcDateTime, server_default=now())
    closed_at = mapped_column(UtcDateTime)
    user_agent: Mapped[str | None] = mapped_column(String(300))


class WindowCommand(db.Model):
    """One command for a window (from the extension driver or POST /extension-actions) and its result.

    A row, not a message: a web restart or a stopped extension service worker loses nothing; the
    extension picks pending rows up on its next poll."""

    __tablename__ = "window_commands"

    id: Mapped[str] = mapped_column(String(36), primary_key=True, default=new_id)
    window_id: Mapped[str] = mapped_column(ForeignKey("browser_windows.id", ondelete="CASCADE"))
    task_id: Mapped[str | None] = mapped_column(String(36))
    action_execution_id: Mapped[str | None] = mapped_column(String(200))
    name: Mapped[str] = mapped_column(String(64))
    args: Mapped[dict] = mapped_column(JSON, default=dict)
    state: Mapped[str] = mapped_column(String(20), default="pending", server_default="pending")  # delivered, done
    result: Mapped[dict | None] = mapped_column(JSON)  # {"status", "data", "error"}
    created_at = mapped_column(UtcDateTime, server_default=now(), nullable=False)
    expires_at = mapped_column(UtcDateTime, nullable=False)  # not delivered after this: never run
    delivered_at = mapped_column(UtcDateTime)
    completed_at = mapped_column(UtcDateTime)

    __table_args__ = (Index("ix_window_commands_window_state", "window_id", "state", "created_at"),)


class Task(db.Model):
    __tablename__ = "tasks"

    id: Mapped[str] = mapped_column(String(36), primary_key=True, default=new_id)
    api_key_id: Mapped[int] = mapped_column(ForeignKey("api_keys.id", ondelete="CASCADE"))
    status: Mapped[str] = mapped_column(String(20), default="pending")
    agent: Mapped[str] = mapped_column(String(20))  # "web" or "general"
    execution_mode: Mapped[str] = mapped_column(String(20))
    browser_window_id: Mapped[str | None] = mapped_column(String(64))
    prompt: Mapped[str] = mapped_column(Text)
    # Every other submitted option (clearChat, responseFormat, timeZone, attachments, ...).
    options: Mapped[dict] = mapped_column(JSON, default=dict)
    previous_request_id: Mapped[str | None] = mapped_column(String(36))
    callback_url: Mapped[str | None] = mapped_column(Text)
    # Fernet-encrypted JSON: {"secret", "headers"} for the webhook; secretVariables values.
    callback_sealed: Mapped[str | None] = mapped_column(Text)
    secrets_sealed: Mapped[str | None] = mapped_column(Text)
    # Fernet-encrypted JSON: each mcpServers item's authentication (options keep only its type).
    mcp_sealed: Mapped[str | None] = mapped_column(Text)
    # Fernet-encrypted JSON: the task's `proxy` {"server", "username", "password"} (app/egress/upstream.py).
    proxy_sealed: Mapped[str | None] = mapped_column(Text)
    # The kept cloud browser session the web agent runs in (cloudBrowserSessionId), if any.
    cloud_session_id: Mapped[str | None] = mapped_column(String(64))

    response: Mapped[dict | None] = mapped_column(JSON)
    usage: Mapped[dict | None] = mapped_column(JSON)
    trace: Mapped[list | None] = mapped_column(JSON)
    messages: Mapped[list | None] = mapped_column(JSON)  # conversation, secrets redacted
    hitl: Mapped[dict | None] = mapped_column(JSON)
    error: Mapped[str | None] = mapped_column(Text)
    # A successful web run's replay script (workers/replay): steps, locators, ${secret}s and {{parameters}}.
    script: Mapped[dict | None] = mapped_column(JSON)
    # The worker's check of the answer against responseFormat, as the console shows it: {"valid", "problem"}.
    schema_check: Mapped[dict | None] = mapped_column(JSON)

    # Dispatch and execution bookkeeping.
    dispatched_at = mapped_column(UtcDateTime)
    attempt: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    lease_owner: Mapped[str | None] = mapped_column(String(200))
    lease_expires_at = mapped_column(UtcDateTime)
    cancel_requested: Mapped[bool] = mapped_column(Boolean, default=False, server_default="0")
    # A person's control through the live view (app/live): {"active", "by", "since", "until", "events"}; the
    # agent loop pauses between steps while "active", and writes the trace entry once it is handed back.
    takeover: Mapped[dict | None] = mapped_column(JSON)
    input_deadline_at = mapped_column(UtcDateTime)
    # At an input-required pause of a browser run: the browser's state (cookies, storage, tabs), Fernet-encrypted
    # JSON, for a fresh browser should the kept one be gone; and the Celery node (worker_direct) keeping the browser.
    pause_snapshot: Mapped[str | None] = mapped_column(Text)
    browser_node: Mapped[str | None] = mapped_column(String(200))
    # At a pause for a code or link (`${code:TO}`, workers/agent/arrivals.py), Fernet-encrypted JSON: what the run
    # takes up when it arrives (the wait's start, the messages used, the script recorded so far, a replay's place).
    wait_sealed: Mapped[str | None] = mapped_column(Text)
    # What its live viewers follow (app/live/state.py), written by the worker running it: {host, endpoint, targetId,
    # url, step, paused, loading, waiting}. In the row, so a viewer on any web machine reads it.
    live: Mapped[dict | None] = mapped_column(JSON)
    # A schedule's run (app/schedules): the schedule and the fire time it is the run of. Unique together, so a fire
    # time yields one task whichever beat (two by mistake, or one restarted) fires it.
    schedule_id: Mapped[str | None] = mapped_column(String(36))
    fire_at = mapped_column(UtcDateTime)
    created_at = mapped_column(UtcDateTime, server_default=now(), nullable=False)
    updated_at = mapped_column(UtcDateTime, server_default=now(), onupdate=now())
    started_at = mapped_column(UtcDateTime)
    completed_at = mapped_column(UtcDateTime)

    __table_args__ = (
        Index("ix_tasks_key_created", "api_key_id", "created_at"),
        Index("ix_tasks_status_lease", "status", "lease_expires_at"),
        UniqueConstraint("schedule_id", "fire_at", name="uq_tasks_schedule_fire"),
    )


class Schedule(db.Model):
    """A task submitted by beat at each time its cron expression names in its time zone (app/schedules)."""

    __tablename__ = "schedules"

    id: Mapped[str] = mapped_column(String(36), primary_key=True, default=new_id)
    api_key_id: Mapped[int] = mapped_column(ForeignKey("api_keys.id", ondelete="CASCADE"), index=True)
    name: Mapped[str] = mapped_column(String(200))
    cron: Mapped[str] = mapped_column(String(200))
    time_zone: Mapped[str] = mapped_column(String(64))
    # The submit body of each run, Fernet-encrypted JSON (it may hold secretVariables, a callbackSecret, a proxy).
    task_sealed: Mapped[str] = mapped_column(Text)
    overlap: Mapped[str] = mapped_column(String(10), default="skip")  # skip, queue, allow
    catch_up: Mapped[str] = mapped_column(String(10), default="once")  # none, once
    status: Mapped[str] = mapped_column(String(10), default="active")  # active, paused
    paused_reason: Mapped[str | None] = mapped_column(Text)
    # The earliest fire time not yet handled; beat fires the schedules whose time has come.
    next_fire_at = mapped_column(UtcDateTime)
    # overlap "queue": a fire that came while the previous run was still going, run once that one ends.
    queued_fire_at = mapped_column(UtcDateTime)
    failures_in_row: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    last_fire_at = mapped_column(UtcDateTime)
    last_skip: Mapped[str | None] = mapped_column(Text)  # why the last fire made no task, if it made none
    created_at = mapped_column(UtcDateTime, server_default=now(), nullable=False)
    updated_at = mapped_column(UtcDateTime, server_default=now(), onupdate=now())

    __table_args__ = (Index("ix_schedules_due", "status", "next_fire_at"),)


class CloudSession(db.Model):
    """A server-side browser kept between tasks, owned by one API key and addressed as its browser window.

    The browser is a WebDriver session (`webdriver_url` + `webdriver_session`): on a Selenium Grid, or
    behind a chromedriver this service started on `host` (`pid`, its process group; `profile_dir`, the
    browser's user-data-dir under VAR_DIR). Workers re-attach to it; one task uses it at a time.
    """

    __tablename__ = "cloud_sessions"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    api_key_id: Mapped[int] = mapped_column(ForeignKey("api_keys.id", ondelete="CASCADE"), index=True)
    browser_window_id: Mapped[str] = mapped_column(ForeignKey("browser_windows.id", ondelete="CASCADE"))
    name: Mapped[str | None] = mapped_column(String(200))
    timeout_seconds: Mapped[int] = mapped_column(Integer)  # idle limit
    status: Mapped[str] = mapped_column(String(20), default="starting")  # starting, active, ended
    webdriver_url: Mapped[str | None] = mapped_column(Text)
    webdriver_session: Mapped[str | None] = mapped_column(String(200))
    debugger_address: Mapped[str | None] = mapped_column(String(200))  # unix:<socket> of DevTools, or a Grid's URL
    host: Mapped[str | None] = mapped_column(String(200))  # the machine running its browser, or "grid"
    # The machine whose worker runs its egress proxy (the fence of each task, the caller's proxy): `host`, or for
    # a Grid's browser the machine that started it. Its tasks run there.
    egress_host: Mapped[str | None] = mapped_column(String(200))
    pid: Mapped[int | None] = mapped_column(Integer)
    profile_dir: Mapped[str | None] = mapped_column(Text)
    # The caller's browserSettings (app/sandbox/settings.py): its browser's launch had them, each task's tabs get them.
    browser_settings: Mapped[dict | None] = mapped_column(JSON)
    # CDP access (the SDK's CloudBrowserEnvironment): the credential its proxy accepts (encrypted), and the URL.
    cdp_token_sealed: Mapped[str | None] = mapped_column(Text)
    # Made by the SDK's CloudBrowserEnvironment (require_extension): its relay shows a stand-in Narada side panel.
    side_panel: Mapped[bool] = mapped_column(Boolean, default=False, server_default="0")
    cdp_url: Mapped[str | None] = mapped_column(Text)
    cdp_proxy_pid: Mapped[int | None] = mapped_column(Integer)
    busy_task_id: Mapped[str | None] = mapped_column(String(36))  # the task driving it now
    end_reason: Mapped[str | None] = mapped_column(String(40))
    end_message: Mapped[str | None] = mapped_column(Text)  # why it ended, when its callers need telling
    created_at = mapped_column(UtcDateTime, server_default=now(), nullable=False)
    last_used_at = mapped_column(UtcDateTime, server_default=now(), nullable=False)
    ended_at = mapped_column(UtcDateTime)

    __table_args__ = (Index("ix_cloud_sessions_status", "status", "last_used_at"),
                      Index("ix_cloud_sessions_window", "browser_window_id", unique=True))


class SessionHost(db.Model):
    """A machine holding browsers, as it last said it was alive (its heartbeat, workers/browser/host_endpoint.py;
    a clean stop writes a time RESTART_SECONDS ahead, app/browser_hosts.py), and where other machines
    reach its stream endpoint (`url`, workers/browser/host_endpoint.py): the registry of browser-holding machines."""

    __tablename__ = "session_hosts"

    host: Mapped[str] = mapped_column(String(200), primary_key=True)
    seen_at = mapped_column(UtcDateTime, server_default=now(), nullable=False)
    url: Mapped[str | None] = mapped_column(Text)


class ConsoleSession(db.Model):
    """A console sign-in, named by the signed cookie: signing out deletes the row, so a kept copy of the
    cookie is refused."""

    __tablename__ = "console_sessions"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    api_key_id: Mapped[int] = mapped_column(ForeignKey("api_keys.id", ondelete="CASCADE"), index=True)
    created_at = mapped_column(UtcDateTime, server_default=now(), nullable=False)


class WebhookDelivery(db.Model):
    """One webhook event for one task (the outbox row); its attempts are logged below."""

    __tablename__ = "webhook_deliveries"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)  # webhook-id, "msg_..."
    task_id: Mapped[str] = mapped_column(ForeignKey("tasks.id", ondelete="CASCADE"), index=True)
    event_status: Mapped[str] = mapped_column(String(20))
    url: Mapped[str] = mapped_column(Text)
    payload: Mapped[str] = mapped_column(Text)  # the exact body, so retries send the same bytes
    state: Mapped[str] = mapped_column(String(20), default="pending")  # pending/delivered/failed
    # Attempts since the delivery was (re)queued: the position in the retry schedule.
    attempts: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    next_attempt_at = mapped_column(UtcDateTime, server_default=now())
    created_at = mapped_column(UtcDateTime, server_default=now(), nullable=False)
    delivered_at = mapped_column(UtcDateTime)
    # Last publish to the webhooks queue; beat re-publishes a due delivery not published since.
    dispatched_at = mapped_column(UtcDateTime)
    # The worker making an attempt right now: two workers never send the same attempt.
    lease_owner: Mapped[str | None] = mapped_column(String(200))
    lease_expires_at = mapped_column(UtcDateTime)

    __table_args__ = (Index("ix_webhook_deliveries_due", "state", "next_attempt_at"),)


class WebhookAttempt(db.Model):
    __tablename__ = "webhook_attempts"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    delivery_id: Mapped[str] = mapped_column(
        ForeignKey("webhook_deliveries.id", ondelete="CASCADE"), index=True)
    attempted_at = mapped_column(UtcDateTime, server_default=now(), nullable=False)
    status_code: Mapped[int | None] = mapped_column(Integer)
    error: Mapped[str | None] = mapped_column(Text)
    duration_ms: Mapped[int | None] = mapped_column(Integer)
    next_attempt_at = mapped_column(UtcDateTime)


class StoredFile(db.Model):
    """A file of an API key: uploaded, or downloaded by the browser of one of its tasks or kept sessions."""

    __tablename__ = "files"

    key: Mapped[str] = mapped_column(String(200), primary_key=True)
    api_key_id: Mapped[int] = mapped_column(ForeignKey("api_keys.id", ondelete="CASCADE"), index=True)
    filename: Mapped[str] = mapped_column(String(500))
    content_type: Mapped[str | None] = mapped_column(String(200))
    size: Mapped[int | None] = mapped_column(Integer)
    data: Mapped[bytes | None] = mapped_column(LargeBinary)
    # A download: the task whose browser downloaded it, and the kept session it ran in (if any).
    task_id: Mapped[str | None] = mapped_column(String(36), index=True)
    session_id: Mapped[str | None] = mapped_column(String(64))
    created_at = mapped_column(UtcDateTime, server_default=now(), nullable=False)

    __table_args__ = (Index("ix_files_created_at", "created_at"),  # the expiry sweep
                      Index("ix_files_key_created", "api_key_id", "created_at"))  # GET /files, newest first


class IdempotencyKey(db.Model):
    __tablename__ = "idempotency_keys"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    api_key_id: Mapped[int] = mapped_column(ForeignKey("api_keys.id", ondelete="CASCADE"))
    key: Mapped[str] = mapped_column(String(255))
    body_hash: Mapped[str] = mapped_column(String(64))
    task_id: Mapped[str] = mapped_column(ForeignKey("tasks.id", ondelete="CASCADE"))
    created_at = mapped_column(UtcDateTime, server_default=now(), nullable=False)

    __table_args__ = (UniqueConstraint("api_key_id", "key"),)


class now_plus(expression.FunctionElement):
    """The database clock plus some seconds, in each dialect's own terms."""

    type = UtcDateTime()
    inherit_cache = True

    def __init__(self, seconds):
        """`seconds`: a number, or a bound parameter (a statement built once, given its seconds per execution)."""
        super().__init__(seconds if isinstance(seconds, expression.BindParameter) else literal(float(seconds)))


@compiles(sqlfunctions.now, "sqlite")
def _now_sqlite(element, compiler, **kw):
    """SQLite's CURRENT_TIMESTAMP has whole seconds; timestamps keep milliseconds everywhere."""
    return "(strftime('%Y-%m-%d %H:%M:%f', 'now'))"


@compiles(now_plus, "postgresql")
def _now_plus_pg(element, compiler, **kw):
    return f"(now() + make_interval(secs => {compiler.process(element.clauses, **kw)}))"


@compiles(now_plus, "sqlite")
def _now_plus_sqlite(element, compiler, **kw):
    return f"strftime('%Y-%m-%d %H:%M:%f', 'now', ({compiler.process(element.clauses, **kw)}) || ' seconds')"


class TaskGif(db.Model):
    """The animated GIF of a task's browser run (`generateGif`): one screenshot per action."""

    __tablename__ = "task_gifs"

    task_id: Mapped[str] = mapped_column(ForeignKey("tasks.id", ondelete="CASCADE"), primary_key=True)
    data: Mapped[bytes] = mapped_column(LargeBinary)
    frames: Mapped[int] = mapped_column(Integer)
    created_at = mapped_column(UtcDateTime, server_default=now(), nullable=False)


class TaskRecording(db.Model):
    """The rrweb recording of a task's browser run: its pages as DOM events, gzip-compressed JSON
    (app/dispatch/recording_store.py); deleted with the task, or RECORDING_TTL_SECONDS after it was stored."""

    __tablename__ = "task_recordings"

    task_id: Mapped[str] = mapped_column(ForeignKey("tasks.id", ondelete="CASCADE"), primary_key=True)
    data: Mapped[bytes] = mapped_column(LargeBinary)
    events: Mapped[int] = mapped_column(Integer)
    duration_ms: Mapped[int] = mapped_column(Integer)
    created_at = mapped_column(UtcDateTime, server_default=now(), nullable=False, index=True)


class Script(db.Model):
    """A saved replay script (POST /scripts), owned by one API key; its steps live in its versions."""

    __tablename__ = "scripts"

    id: Mapped[str] = mapped_column(String(36), primary_key=True, default=new_id)
    api_key_id: Mapped[int] = mapped_column(ForeignKey("api_keys.id", ondelete="CASCADE"), index=True)
    name: Mapped[str] = mapped_column(String(200))
    parameters: Mapped[dict] = mapped_column(JSON, default=dict)  # default inputVariables of a replay
    created_at = mapped_column(UtcDateTime, server_default=now(), nullable=False)


class ScriptVersion(db.Model):
    """One version of a saved script: the first from the task it was saved from, the next from each healed replay."""

    __tablename__ = "script_versions"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    script_id: Mapped[str] = mapped_column(ForeignKey("scripts.id", ondelete="CASCADE"))
    version: Mapped[int] = mapped_column(Integer)
    body: Mapped[dict] = mapped_column(JSON)
    task_id: Mapped[str | None] = mapped_column(String(36))  # the run it was recorded from
    created_at = mapped_column(UtcDateTime, server_default=now(), nullable=False)

    __table_args__ = (UniqueConstraint("script_id", "version"),)


class Profile(db.Model):
    """A named browser profile of one API key (app/profiles): the state a sign-in needs (cookies, localStorage,
    IndexedDB), sealed with ENCRYPTION_KEY, here so that every machine reaches it. `writer`: the task or session that
    uses it with `persist` (one at a time; its end replaces `state_sealed` in one UPDATE)."""

    __tablename__ = "profiles"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    api_key_id: Mapped[int] = mapped_column(ForeignKey("api_keys.id", ondelete="CASCADE"))
    name: Mapped[str] = mapped_column(String(100))
    state_sealed: Mapped[str | None] = mapped_column(Text)  # None: created by a persist use, nothing saved yet
    size_bytes: Mapped[int] = mapped_column(Integer, default=0)  # of the state before sealing
    writer: Mapped[str | None] = mapped_column(String(64))  # a task id or a cloud session id
    created_at = mapped_column(UtcDateTime, server_default=now(), nullable=False)
    updated_at = mapped_column(UtcDateTime, server_default=now(), nullable=False)
    last_used_at = mapped_column(UtcDateTime, server_default=now(), nullable=False, index=True)

    __table_args__ = (UniqueConstraint("api_key_id", "name"),)


class Credential(db.Model):
    """A stored sign-in of one API key (app/credentials): username, password and TOTP URI sealed together with
    ENCRYPTION_KEY, typed only into pages on `sites`. `fields`: which of them it has (all a route ever shows)."""

    __tablename__ = "credentials"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    api_key_id: Mapped[int] = mapped_column(ForeignKey("api_keys.id", ondelete="CASCADE"))
    name: Mapped[str] = mapped_column(String(100))
    sites: Mapped[list] = mapped_column(JSON)
    fields: Mapped[list] = mapped_column(JSON)
    values_sealed: Mapped[str] = mapped_column(Text)
    created_at = mapped_column(UtcDateTime, server_default=now(), nullable=False)
    updated_at = mapped_column(UtcDateTime, server_default=now(), nullable=False)

    __table_args__ = (UniqueConstraint("api_key_id", "name"),)


class CodeAddress(db.Model):
    """An identifier (an email address, a phone number) one API key has claimed: mail the SMTP receiver gets for
    it is kept for that key alone. One key per identifier (the primary key), first claim wins."""

    __tablename__ = "code_addresses"

    identifier: Mapped[str] = mapped_column(String(320), primary_key=True)
    api_key_id: Mapped[int] = mapped_column(ForeignKey("api_keys.id", ondelete="CASCADE"), index=True)
    created_at = mapped_column(UtcDateTime, server_default=now(), nullable=False)


class CodeMessage(db.Model):
    """A one-time code or sign-in link that arrived for an identifier (POST /fast/v2/codes, or mail), kept for one
    API key; `sealed`: {"code", "link"} with ENCRYPTION_KEY. Read by a task's `${code:...}` / `${link:...}`."""

    __tablename__ = "code_messages"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    api_key_id: Mapped[int] = mapped_column(ForeignKey("api_keys.id", ondelete="CASCADE"))
    identifier: Mapped[str] = mapped_column(String(320))
    has_code: Mapped[bool] = mapped_column(Boolean, default=False)
    has_link: Mapped[bool] = mapped_column(Boolean, default=False)
    sealed: Mapped[str] = mapped_column(Text)
    source: Mapped[str] = mapped_column(String(10))  # "api" or "mail"
    received_at = mapped_column(UtcDateTime, server_default=now(), nullable=False)

    __table_args__ = (Index("ix_code_messages_key_identifier", "api_key_id", "identifier", "received_at"),)
