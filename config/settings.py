"""Settings read from the environment; the embedded default needs none of them."""
import json
import os
from pathlib import Path
from urllib.parse import urlsplit

from cryptography.fernet import Fernet

ROOT = Path(__file__).resolve().parent.parent


def _env(name, default=None, cast=str):
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    if cast is bool:
        return value.strip().lower() in {"1", "true", "yes", "on"}
    return cast(value)


# Immediately, 5 s, 5 min, 30 min, 2 h, 5 h, 10 h, 10 h (DESIGN.md §4).
DEFAULT_RETRY_SCHEDULE = (0, 5, 300, 1800, 7200, 18000, 36000, 36000)


def _seconds_list(value):
    return tuple(float(part) for part in value.split(",") if part.strip())


def _comma_list(value):
    return tuple(part.strip() for part in value.split(",") if part.strip())


def _host_patterns(value):
    """EGRESS_ONLY_HOSTS: checked at start-up, so a typo fails loudly instead of fencing everything off."""
    from app.egress.policy import host_pattern

    patterns = _comma_list(value)
    for pattern in patterns:
        host_pattern(pattern)
    return patterns


def _public_url():
    """The base of every absolute URL the service hands out (presigned uploads, session pages, CDP): PUBLIC_URL,
    or the address it listens on (HOST, PORT). Never a request's Host header: the caller writes that."""
    url = _env("PUBLIC_URL")
    if url is None:
        host = _env("HOST", "127.0.0.1")
        host = "127.0.0.1" if host in ("0.0.0.0", "::", "[::]") else host
        url = f"http://{f'[{host}]' if ':' in host and not host.startswith('[') else host}:{_env('PORT', '8000')}"
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.query or parts.fragment or "@" in parts.netloc:
        raise ValueError(f"PUBLIC_URL must be the service's http(s) base URL, such as https://dispatch.example.com; "
                         f"got {url!r}.")
    return url.rstrip("/")


def _metrics_bind(value):
    """METRICS_BIND: host:port a worker machine serves its metrics on ([::1]:9100 for IPv6)."""
    host, sep, port = value.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"METRICS_BIND must be host:port, such as 127.0.0.1:9464 or 0.0.0.0:9464; got {value!r}.")
    if not _env("METRICS_TOKEN"):
        raise ValueError("METRICS_BIND is set but METRICS_TOKEN is not: a worker's metrics are served only to a "
                         "scraper holding the token (Authorization: Bearer <METRICS_TOKEN>).")
    return host, int(port)


def _var_dir():
    path = Path(_env("VAR_DIR", str(ROOT / "var")))
    path.mkdir(parents=True, exist_ok=True)
    return path


def _encryption_key(var_dir):
    """The Fernet key for data at rest; the embedded default generates one and keeps it."""
    key = _env("ENCRYPTION_KEY")
    if key:
        return key
    key_file = var_dir / "encryption.key"
    if not key_file.exists():
        key_file.write_bytes(Fernet.generate_key())
        key_file.chmod(0o600)
    return key_file.read_text().strip()


# Rate-limit plans: an API key's `plan` (set with `flask keys create --plan`) picks one.
# "requests" covers submit, cancel and list; "polls" covers GET of one task. Limit strings are
# flask-limiter's ("60/minute", "5/second;100/hour"). "cdp": true lets the plan's keys open cloud browser
# sessions with CDP access (create-cloud-browser-session); a plan without it gets none. RATE_LIMIT_PLANS
# (JSON) adds plans or changes the named values of existing ones. "schedules": how many schedules a key of the plan
# may have (app/schedules).
DEFAULT_RATE_LIMIT_PLANS = {
    "free": {"requests": "60/minute", "polls": "600/minute", "cdp": False, "schedules": 10},
    "pro": {"requests": "600/minute", "polls": "6000/minute", "cdp": True, "schedules": 100},
    "dev": {"requests": "6000/minute", "polls": "60000/minute", "cdp": True, "schedules": 1000},
}


def _rate_limit_plans():
    plans = {name: dict(plan) for name, plan in DEFAULT_RATE_LIMIT_PLANS.items()}
    for name, plan in json.loads(_env("RATE_LIMIT_PLANS", "{}")).items():
        plans[name] = {**plans.get(name, {}), **plan} if isinstance(plan, dict) else plan
    return plans


def load():
    """Return the settings dict for `create_app()`, read from the environment now."""
    var_dir = _var_dir()
    database_url = _env("DATABASE_URL", f"sqlite:///{var_dir / 'remote-dispatch.db'}")
    for scheme in ("postgres://", "postgresql://"):  # Heroku-style URLs; the driver is psycopg2
        if database_url.startswith(scheme):
            database_url = "postgresql+psycopg2://" + database_url[len(scheme):]
    broker_url = _env("CELERY_BROKER_URL", _env("BROKER_URL", "filesystem://localhost/"))
    return {
        "VAR_DIR": str(var_dir),
        "SQLALCHEMY_DATABASE_URI": database_url,
        "BROKER_URL": broker_url,
        "ENCRYPTION_KEY": _encryption_key(var_dir),
        # Worker leases and sweeps.
        "LEASE_SECONDS": _env("LEASE_SECONDS", 60, int),
        "MAX_ATTEMPTS": _env("MAX_ATTEMPTS", 3, int),
        "DISPATCH_GRACE_SECONDS": _env("DISPATCH_GRACE_SECONDS", 10, int),
        "REDISPATCH_AFTER_SECONDS": _env("REDISPATCH_AFTER_SECONDS", 900, int),
        "SWEEP_INTERVAL_SECONDS": _env("SWEEP_INTERVAL_SECONDS", 10, float),
        # Schedules (app/schedules): the shortest time between two fires a cron expression may give; how many
        # failed runs in a row pause a schedule; how late a fire may run and still count as on time (a later one
        # was missed, e.g. while beat was down, and catchUp decides).
        "SCHEDULE_MIN_INTERVAL_SECONDS": _env("SCHEDULE_MIN_INTERVAL_SECONDS", 60, int),
        "SCHEDULE_FAILURES_TO_PAUSE": _env("SCHEDULE_FAILURES_TO_PAUSE", 3, int),
        "SCHEDULE_LATE_SECONDS": _env("SCHEDULE_LATE_SECONDS", 120, int),
        # Agent budgets and usage accounting.
        "MAX_STEPS": _env("MAX_STEPS", 50, int),
        "TASK_TIMEOUT_SECONDS": _env("TASK_TIMEOUT_SECONDS", 900, int),
        # Celery's soft time limit of a run (prefork pool): past the wall-clock limit plus slack.
        "TASK_SOFT_TIME_LIMIT_SECONDS": _env("TASK_SOFT_TIME_LIMIT_SECONDS",
                                             _env("TASK_TIMEOUT_SECONDS", 900, int) + 120, int),
        "CREDITS_PER_ACTION": _env("CREDITS_PER_ACTION", 1.0, float),
        "CREDITS_PER_1K_TOKENS": _env("CREDITS_PER_1K_TOKENS", 0.1, float),
        "NO_PROGRESS_REPEATS": _env("NO_PROGRESS_REPEATS", 3, int),
        "INPUT_TIMEOUT_SECONDS": _env("INPUT_TIMEOUT_SECONDS", 86400, int),
        # How long a step waits for a one-time code or sign-in link (${code:...}, ${link:...}) to arrive.
        "CODE_WAIT_SECONDS": _env("CODE_WAIT_SECONDS", 300, float),
        # The SMTP receiver (`remote-dispatch mail`, Procfile `mail`): host:port to listen on; empty: off.
        "SMTP_BIND": _env("SMTP_BIND", ""),
        # How long a cloud_browser task's browser is kept as it is at an input-required pause (docs/agent.md says
        # why 15 minutes); after that an answer resumes in a fresh browser with the pause's snapshot. 0: never kept.
        "INPUT_KEEP_BROWSER_SECONDS": _env("INPUT_KEEP_BROWSER_SECONDS", 900, float),
        # Browsers kept at questions (workers/browser/parking.py), at most, per API key and per machine (about 280 MB
        # each: 8 are about 2.2 GB); past either, a pause keeps only its snapshot, as after the keep time.
        "PARKED_BROWSERS_PER_KEY": _env("PARKED_BROWSERS_PER_KEY", 2, int),
        "PARKED_BROWSERS_MAX": _env("PARKED_BROWSERS_MAX", 8, int),
        # Live view (app/live): how long a liveUrl works, and how many viewers one web process serves at once.
        "LIVE_URL_TTL_SECONDS": _env("LIVE_URL_TTL_SECONDS", 3600, int),
        "LIVE_MAX_VIEWERS": _env("LIVE_MAX_VIEWERS", 16, int),  # view sockets (control sockets: apart)
        # Fair shares of those (app/live/slots.py): one key's view sockets, one task's (or session's) view sockets,
        # and one task's control sockets, which never wait for other keys' viewers.
        "LIVE_VIEWERS_PER_KEY": _env("LIVE_VIEWERS_PER_KEY", 6, int),
        "LIVE_VIEWERS_PER_TASK": _env("LIVE_VIEWERS_PER_TASK", 4, int),
        "LIVE_CONTROLLERS_PER_TASK": _env("LIVE_CONTROLLERS_PER_TASK", 2, int),
        # A control socket's input messages per second (a burst of twice that); a long one counts more.
        "LIVE_INPUT_PER_SECOND": _env("LIVE_INPUT_PER_SECOND", 100, int),
        "FETCH_TIMEOUT_SECONDS": _env("FETCH_TIMEOUT_SECONDS", 15, float),
        # cloud_browser: a local Chromium per task (Debian's packages), or a Selenium Grid when the URL is set.
        "CHROMIUM_PATH": _env("CHROMIUM_PATH", "/usr/bin/chromium"),
        "CHROMEDRIVER_PATH": _env("CHROMEDRIVER_PATH", "/usr/bin/chromedriver"),
        "SELENIUM_REMOTE_URL": _env("SELENIUM_REMOTE_URL"),
        # Sandboxed browsers a tasks worker host keeps started ahead, each handed out once (docs/browser-pool.md).
        "BROWSER_POOL_SIZE": _env("BROWSER_POOL_SIZE", 2, int),
        # Kept sessions' browsers the tasks workers of a host keep started ahead (docs/browser-pool.md): one,
        # since sessions are created far less often than tasks run and each idle browser holds its memory.
        "SESSION_POOL_SIZE": _env("SESSION_POOL_SIZE", 1, int),
        "BROWSER_WINDOW_SIZE": _env("BROWSER_WINDOW_SIZE", "1280x900"),
        "BROWSER_LOCALE": _env("BROWSER_LOCALE", "en-US"),
        "BROWSER_PAGE_LOAD_TIMEOUT_SECONDS": _env("BROWSER_PAGE_LOAD_TIMEOUT_SECONDS", 30, float),
        # generateGif: frame width and count; GIFs and page downloads go under DOWNLOAD_DIR/remote-dispatch/.
        "GIF_WIDTH": _env("GIF_WIDTH", 800, int),
        "GIF_MAX_FRAMES": _env("GIF_MAX_FRAMES", 100, int),
        "DOWNLOAD_DIR": _env("DOWNLOAD_DIR", str(var_dir / "downloads")),
        # Recordings of browser runs (docs/recordings.md): rrweb from RRWEB_DIR (`make rrweb`), at most
        # RECORDING_MAX_BYTES of events per run, deleted RECORDING_TTL_SECONDS after the run.
        "RECORDINGS": _env("RECORDINGS", True, bool),
        "RRWEB_DIR": _env("RRWEB_DIR", str(ROOT / "vendor" / "rrweb")),
        "RECORDING_MAX_BYTES": _env("RECORDING_MAX_BYTES", 50 * 1024 * 1024, int),
        "RECORDING_TTL_SECONDS": _env("RECORDING_TTL_SECONDS", 7 * 24 * 3600, int),
        # Language model (OpenAI-compatible); without it the built-in planner runs.
        "LLM_BASE_URL": _env("LLM_BASE_URL"),
        "LLM_API_KEY": _env("LLM_API_KEY"),
        "LLM_MODEL": _env("LLM_MODEL"),
        "LLM_TIMEOUT_SECONDS": _env("LLM_TIMEOUT_SECONDS", 120, float),
        "LLM_MAX_RETRIES": _env("LLM_MAX_RETRIES", 3, int),
        # Model requests at once from this machine's workers (0: no limit); `LLM=local make run` sets 1.
        "LLM_CONCURRENCY": _env("LLM_CONCURRENCY", 0, int),
        # A prompt that is a complete program of built-in steps runs on the built-in planner, model or not.
        "BUILTIN_STEPS_FIRST": _env("BUILTIN_STEPS_FIRST", True, bool),
        # What the model sees (docs/agent.md "What the model sees"): its context window (older observations are
        # shortened to fit), the longest reply it may write, the page view's size, screenshots, constrained calls.
        "LLM_CONTEXT_TOKENS": _env("LLM_CONTEXT_TOKENS", 8192, int),
        "LLM_MAX_TOKENS": _env("LLM_MAX_TOKENS", 512, int),
        "PAGE_VIEW_CHARS": _env("PAGE_VIEW_CHARS", 6000, int),
        "LLM_VISION": _env("LLM_VISION", "auto"),
        "LLM_CONSTRAINED": _env("LLM_CONSTRAINED", "auto"),
        # Outbound URLs: callbacks, MCP servers, page fetches.
        "ALLOW_PRIVATE_URLS": _env("ALLOW_PRIVATE_URLS", False, bool),
        # Hosts ("host" or "host:port", comma-separated) reachable even though they are private.
        "EGRESS_ALLOW_HOSTS": _env("EGRESS_ALLOW_HOSTS", (), _comma_list),
        # TEST ONLY: addresses (e.g. 127.0.0.2) treated as public: a loopback server stands in for a public host.
        "EGRESS_TREAT_AS_PUBLIC": _env("EGRESS_TREAT_AS_PUBLIC", (), _comma_list),
        # Host patterns (example.com, *.example.com, host:port; comma-separated): when set, every outbound
        # connection (browsers, page reads, callbacks, MCP) must go to one of them, on top of the checks above.
        "EGRESS_ONLY_HOSTS": _env("EGRESS_ONLY_HOSTS", (), _host_patterns),
        # Where a browser session's egress proxy listens (an address Grid nodes reach, when they are elsewhere).
        "BROWSER_PROXY_HOST": _env("BROWSER_PROXY_HOST", "127.0.0.1"),
        "MAX_CONTENT_LENGTH": _env("MAX_BODY_BYTES", 10 * 1024 * 1024, int),
        # What one task may store and one list page may carry (bounded memory per request).
        "MAX_PROMPT_CHARS": _env("MAX_PROMPT_CHARS", 100_000, int),
        "MAX_OUTPUT_CHARS": _env("MAX_OUTPUT_CHARS", 100_000, int),
        "MAX_TRACE_ENTRY_CHARS": _env("MAX_TRACE_ENTRY_CHARS", 2_000, int),
        "LIST_PAGE_MAX_BYTES": _env("LIST_PAGE_MAX_BYTES", 1_000_000, int),
        # Attachments: upload size limit, how long files are kept, how long a presigned post is valid.
        "MAX_UPLOAD_BYTES": _env("MAX_UPLOAD_BYTES", 10 * 1024 * 1024, int),
        "FILE_TTL_SECONDS": _env("FILE_TTL_SECONDS", 7 * 24 * 3600, int),
        # Named browser profiles (app/profiles): a state larger than this is not saved (the trace says so); a profile
        # no task or session used for this many days is deleted (beat).
        "PROFILE_MAX_BYTES": _env("PROFILE_MAX_BYTES", 20 * 1024 * 1024, int),
        "PROFILE_IDLE_DAYS": _env("PROFILE_IDLE_DAYS", 30, float),
        # The Excel actions (answered by the web process): cells one call reads or writes, and what a workbook may
        # unpack to (its XML: a few KB of .xlsx can hold 200,000 cells), each a 400 naming it beyond.
        "EXCEL_MAX_CELLS": _env("EXCEL_MAX_CELLS", 20_000, int),
        "EXCEL_MAX_UNPACKED_BYTES": _env("EXCEL_MAX_UNPACKED_BYTES", 4 * 1024 * 1024, int),
        "PRESIGNED_POST_TTL_SECONDS": _env("PRESIGNED_POST_TTL_SECONDS", 3600, int),
        # Files a browser downloads become files of the key (kept like uploads): the largest one file may be (never
        # more than MAX_UPLOAD_BYTES), all of one task's together, and how long a task's end waits for a download
        # still being written. 50 MB a task: five files at the upload limit, a few MB of Postgres rows at most.
        "DOWNLOAD_MAX_FILE_BYTES": _env("DOWNLOAD_MAX_FILE_BYTES", 10 * 1024 * 1024, int),
        "DOWNLOAD_MAX_TASK_BYTES": _env("DOWNLOAD_MAX_TASK_BYTES", 50 * 1024 * 1024, int),
        # A kept session's downloads over its whole life (its tasks' and its CDP callers'): their total and count.
        "DOWNLOAD_MAX_SESSION_BYTES": _env("DOWNLOAD_MAX_SESSION_BYTES", 50 * 1024 * 1024, int),
        "DOWNLOAD_MAX_SESSION_FILES": _env("DOWNLOAD_MAX_SESSION_FILES", 100, int),
        "DOWNLOAD_WAIT_SECONDS": _env("DOWNLOAD_WAIT_SECONDS", 10, float),
        # MCP tool servers: connecting and each tool call; tool results kept in the trace.
        "MCP_TIMEOUT_SECONDS": _env("MCP_TIMEOUT_SECONDS", 30, float),
        "MCP_TRACE_RESULT_CHARS": _env("MCP_TRACE_RESULT_CHARS", 500, int),
        # Webhook delivery: seconds before each attempt (the first is immediate), then `failed`.
        "WEBHOOK_RETRY_SCHEDULE": _env("WEBHOOK_RETRY_SCHEDULE", DEFAULT_RETRY_SCHEDULE, _seconds_list),
        "WEBHOOK_RETRY_JITTER": _env("WEBHOOK_RETRY_JITTER", 0.1, float),
        "WEBHOOK_TIMEOUT_SECONDS": _env("WEBHOOK_TIMEOUT_SECONDS", 15, float),
        "WEBHOOK_CA_BUNDLE": _env("WEBHOOK_CA_BUNDLE"),  # unset: certifi's bundle
        "WAIT_TIMEOUT_SECONDS": _env("WAIT_TIMEOUT_SECONDS", 120, float),
        # Waiting requests each hold a gunicorn thread: keep some threads for everything else.
        "WAIT_MAX_CONCURRENT": _env("WAIT_MAX_CONCURRENT", max(1, _env("WEB_THREADS", 128, int) - 8), int),
        # Embedded SQLite has no NOTIFY: waiting requests re-read their task this often.
        "WAIT_POLL_SECONDS": _env("WAIT_POLL_SECONDS", 0.5, float),
        # Client mode: a window whose extension has not polled for this long is offline (404 on submit).
        "WINDOW_OFFLINE_SECONDS": _env("WINDOW_OFFLINE_SECONDS", 60, float),
        # How long the extension driver waits for one browser command, and a direct extension action's
        # default and ceiling (the SDK gives up at 300 s: a 504 must come first).
        "WINDOW_COMMAND_TIMEOUT_SECONDS": _env("WINDOW_COMMAND_TIMEOUT_SECONDS", 60, float),
        "EXTENSION_ACTION_MAX_SECONDS": _env("EXTENSION_ACTION_MAX_SECONDS", 280, float),
        "IDEMPOTENCY_TTL_SECONDS": _env("IDEMPOTENCY_TTL_SECONDS", 24 * 3600, int),
        # Kept cloud browser sessions: idle limit (default, and the most a caller may ask for) and how many
        # a key may hold open. They run where cloud_browser does (SELENIUM_REMOTE_URL, or chromedriver here).
        "CLOUD_SESSION_TIMEOUT_SECONDS": _env("CLOUD_SESSION_TIMEOUT_SECONDS", 600, int),
        "CLOUD_SESSION_MAX_TIMEOUT_SECONDS": _env("CLOUD_SESSION_MAX_TIMEOUT_SECONDS", 4 * 3600, int),
        "CLOUD_SESSIONS_PER_KEY": _env("CLOUD_SESSIONS_PER_KEY", 5, int),
        # A kept session whose machine's worker has not said it is alive for this long ends as error (its tasks
        # too). The worker says so every sixth of it (at most every 5 s) and beat looks as often (at most every
        # SWEEP_INTERVAL_SECONDS): with 12, a killed machine's tasks end 10-14 s after (app/browser_hosts.py).
        "SESSION_HOST_LOST_SECONDS": _env("SESSION_HOST_LOST_SECONDS", 12, float),
        # A tasks worker's stream endpoint (workers/browser/host_endpoint.py): where it listens (host:port; port 0 is
        # any free one), and the URL other machines' web processes reach it by (default: the bind address, or for
        # 0.0.0.0 the address this machine reaches the database by, and the port it got).
        "BROWSER_HOST_BIND": _env("BROWSER_HOST_BIND", "127.0.0.1:0"),
        "BROWSER_HOST_URL": _env("BROWSER_HOST_URL"),
        # CDP URLs name the web tier (any web process relays them): CDP_PUBLIC_HOST (host[:port]), default PUBLIC_URL's.
        "CDP_PUBLIC_HOST": _env("CDP_PUBLIC_HOST"),
        # Where callers reach this service: the base of the URLs it returns (presigned upload, login_url, and the
        # CDP URL's host unless CDP_PUBLIC_HOST); default http://HOST:PORT (127.0.0.1:8000).
        "PUBLIC_URL": _public_url(),
        # The SDK refuses to run when older than this (GET /fast/v2/sdk/config).
        "SDK_MIN_VERSION": _env("SDK_MIN_VERSION", "0.2.0"),
        # The console's signed session cookie; unset: derived from ENCRYPTION_KEY.
        "SECRET_KEY": _env("SECRET_KEY"),
        "CONSOLE_SESSION_HOURS": _env("CONSOLE_SESSION_HOURS", 12, float),
        # Prometheus metrics (docs/monitoring.md): the web tier serves GET /metrics to `Authorization: Bearer
        # <METRICS_TOKEN>` (404 while unset); a worker machine serves its own on METRICS_BIND (off while unset).
        "METRICS_TOKEN": _env("METRICS_TOKEN"),
        "METRICS_BIND": _env("METRICS_BIND", None, _metrics_bind),
        # Rate limits (flask-limiter): memory:// counts per process, so config/gunicorn.py then runs one
        # web process; redis://host:6379/0 is shared by every process (production, more than one).
        "RATE_LIMIT_PLANS": _rate_limit_plans(),
        "RATE_LIMIT_DEFAULT_PLAN": _env("RATE_LIMIT_DEFAULT_PLAN", "free"),
        "RATELIMIT_ENABLED": _env("RATELIMIT_ENABLED", True, bool),
        "RATELIMIT_STORAGE_URI": _env("RATELIMIT_STORAGE_URI", "memory://"),
        "RATELIMIT_KEY_PREFIX": _env("RATELIMIT_KEY_PREFIX", "remote-dispatch"),
        "RATELIMIT_HEADERS_ENABLED": True,
        # A rate-limit store that is down must not take the API down with it.
        "RATELIMIT_SWALLOW_ERRORS": True,
    }
