"""Settings read from the environment; the embedded default needs none of them.

This module is the one reader of every setting: SETTINGS below lists each variable once, with its default and how
it is parsed, grouped by the process that uses it (docs/configuration.md has the same groups, and a test checks the
two against each other). `values()` parses them all with no side effect (gunicorn's config, the CLI and the model
launcher read it); `load()` is the Flask config `create_app()` gets: the same values under their config keys, with
the embedded default's folder made and its encryption key generated.
"""
import json
import os
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from cryptography.fernet import Fernet

ROOT = Path(__file__).resolve().parent.parent


def _env(name, default=None, cast=str):
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    return cast(value)


def _bool(value):
    return value.strip().lower() in {"1", "true", "yes", "on"}


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


def _listen_url(read):
    """PUBLIC_URL's default: the address the web server listens on (HOST, PORT), loopback for every interface."""
    host = read["HOST"]
    host = "127.0.0.1" if host in ("0.0.0.0", "::", "[::]") else host
    return f"http://{f'[{host}]' if ':' in host and not host.startswith('[') else host}:{read['PORT']}"


def _public_url(url):
    """The base of every absolute URL the service hands out (presigned uploads, session pages, CDP): PUBLIC_URL,
    or the address it listens on (HOST, PORT). Never a request's Host header: the caller writes that."""
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


def var_dir():
    """VAR_DIR, made if missing."""
    path = Path(values()["VAR_DIR"])
    path.mkdir(parents=True, exist_ok=True)
    return path


def _database_url(url):
    for scheme in ("postgres://", "postgresql://"):  # Heroku-style URLs; the driver is psycopg2
        if url.startswith(scheme):
            return "postgresql+psycopg2://" + url[len(scheme):]
    return url


def _encryption_key(key, var_dir):
    """The Fernet key for data at rest; the embedded default generates one and keeps it."""
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


def _rate_limit_plans(value="{}"):
    plans = {name: dict(plan) for name, plan in DEFAULT_RATE_LIMIT_PLANS.items()}
    for name, plan in json.loads(value).items():
        plans[name] = {**plans.get(name, {}), **plan} if isinstance(plan, dict) else plan
    return plans


@dataclass(frozen=True)
class Setting:
    """One environment variable: its default (a value, or a function of the other settings' values), how its text
    is parsed, and its key in the Flask config when that is not its name."""
    name: str
    default: object = None
    cast: object = str
    key: str = None
    also: tuple = ()  # older names, read when `name` is unset

    def read(self):
        for name in (self.name, *self.also):
            value = os.environ.get(name)
            if value is not None and value.strip():  # set to blanks: unset
                try:
                    return self.cast(value)
                except ValueError as exc:
                    raise ValueError(f"{name}={value!r}: {exc}") from None
        return self.default


def _derived(function):
    """A default computed from the other settings (`read`: every value by variable name)."""
    function.derived = True
    return function


def memory_rate_limits(read):
    """Rate limits counted in one process's memory: then one web process (config/gunicorn.py)."""
    return read["RATELIMIT_ENABLED"] and read["RATELIMIT_STORAGE_URI"].startswith("memory://")


# Each group is one heading of docs/configuration.md (tests/test_docs.py checks that they name the same variables),
# and says which processes read it. What a setting means is written there; a comment here says what the code needs.
SETTINGS = {
    "Storage and secrets": (  # every process
        Setting("VAR_DIR", str(ROOT / "var")),
        Setting("DATABASE_URL", _derived(lambda read: f"sqlite:///{Path(read['VAR_DIR']) / 'remote-dispatch.db'}"),
                _database_url, key="SQLALCHEMY_DATABASE_URI"),
        Setting("CELERY_BROKER_URL", "filesystem://localhost/", key="BROKER_URL", also=("BROKER_URL",)),
        Setting("ENCRYPTION_KEY"),  # unset: load() generates one under VAR_DIR and keeps it
        Setting("SECRET_KEY"),  # the console's session cookie; unset: derived from ENCRYPTION_KEY
    ),
    "Web": (  # gunicorn (config/gunicorn.py) and the app it serves
        Setting("HOST", "127.0.0.1"),
        Setting("PORT", 8000, int),
        Setting("PUBLIC_URL", _derived(lambda read: _public_url(_listen_url(read))), _public_url),
        Setting("WEB_CONCURRENCY", _derived(lambda read: 1 if memory_rate_limits(read) else 2), int),
        Setting("WEB_THREADS", 128, int),
        Setting("WEB_CONNECTIONS", _derived(lambda read: max(1000, read["WEB_THREADS"] + 256)), int),
        Setting("WEB_TIMEOUT", 180, int),
        Setting("WEB_MAX_REQUEST_LINE", 8190, int),
        Setting("MAX_BODY_BYTES", 10 * 1024 * 1024, int, key="MAX_CONTENT_LENGTH"),
        Setting("MAX_PROMPT_CHARS", 100_000, int),
        Setting("LIST_PAGE_MAX_BYTES", 1_000_000, int),
        Setting("WAIT_TIMEOUT_SECONDS", 120, float),
        # Waiting requests each hold a gunicorn thread: keep some threads for everything else.
        Setting("WAIT_MAX_CONCURRENT", _derived(lambda read: max(1, read["WEB_THREADS"] - 8)), int),
        Setting("WAIT_POLL_SECONDS", 0.5, float),  # embedded SQLite has no NOTIFY
        Setting("IDEMPOTENCY_TTL_SECONDS", 24 * 3600, int),
        Setting("MAX_UPLOAD_BYTES", 10 * 1024 * 1024, int),
        Setting("PRESIGNED_POST_TTL_SECONDS", 3600, int),
        Setting("EXCEL_MAX_CELLS", 20_000, int),
        Setting("EXCEL_MAX_UNPACKED_BYTES", 4 * 1024 * 1024, int),
        Setting("CONSOLE_SESSION_HOURS", 12, float),
        Setting("SDK_MIN_VERSION", "0.2.0"),
        Setting("CDP_PUBLIC_HOST"),
        Setting("WINDOW_OFFLINE_SECONDS", 60, float),
        # The SDK gives up on a direct extension action at 300 s: a 504 must come first.
        Setting("EXTENSION_ACTION_MAX_SECONDS", 280, float),
        Setting("LIVE_URL_TTL_SECONDS", 3600, int),
        Setting("LIVE_MAX_VIEWERS", 16, int),
        Setting("LIVE_VIEWERS_PER_KEY", 6, int),
        Setting("LIVE_VIEWERS_PER_TASK", 4, int),
        Setting("LIVE_CONTROLLERS_PER_TASK", 2, int),
        Setting("LIVE_INPUT_PER_SECOND", 100, int),
        Setting("RATE_LIMIT_PLANS", _derived(lambda read: _rate_limit_plans()), _rate_limit_plans),
        Setting("RATE_LIMIT_DEFAULT_PLAN", "free"),
        Setting("RATELIMIT_ENABLED", True, _bool),
        # memory:// counts per process, so config/gunicorn.py then runs one web process; redis://host:6379/0 is
        # shared by every process.
        Setting("RATELIMIT_STORAGE_URI", "memory://"),
        Setting("RATELIMIT_KEY_PREFIX", "remote-dispatch"),
        Setting("METRICS_TOKEN"),
    ),
    "Tasks, beat and their workers": (  # Celery's processes (workers/), beat's sweeps
        Setting("WORKER_CONCURRENCY", 2, int),  # the Procfile's `worker -c`
        Setting("LEASE_SECONDS", 60, int),
        Setting("MAX_ATTEMPTS", 3, int),
        Setting("DISPATCH_GRACE_SECONDS", 10, int),
        Setting("REDISPATCH_AFTER_SECONDS", 900, int),
        Setting("SWEEP_INTERVAL_SECONDS", 10, float),
        Setting("SCHEDULE_MIN_INTERVAL_SECONDS", 60, int),
        Setting("SCHEDULE_FAILURES_TO_PAUSE", 3, int),
        Setting("SCHEDULE_LATE_SECONDS", 120, int),
        Setting("MAX_STEPS", 50, int),
        Setting("TASK_TIMEOUT_SECONDS", 900, int),
        # Celery's soft time limit of a run (prefork pool): past the wall-clock limit plus slack.
        Setting("TASK_SOFT_TIME_LIMIT_SECONDS", _derived(lambda read: read["TASK_TIMEOUT_SECONDS"] + 120), int),
        Setting("CREDITS_PER_ACTION", 1.0, float),
        Setting("CREDITS_PER_1K_TOKENS", 0.1, float),
        Setting("NO_PROGRESS_REPEATS", 3, int),
        Setting("INPUT_TIMEOUT_SECONDS", 86400, int),
        Setting("CODE_WAIT_SECONDS", 300, float),
        Setting("SMTP_BIND", ""),  # `remote-dispatch mail`; empty: off
        Setting("MAX_OUTPUT_CHARS", 100_000, int),
        Setting("MAX_TRACE_ENTRY_CHARS", 2_000, int),
        Setting("FETCH_TIMEOUT_SECONDS", 15, float),
        Setting("FILE_TTL_SECONDS", 7 * 24 * 3600, int),
        Setting("PROFILE_MAX_BYTES", 20 * 1024 * 1024, int),
        Setting("PROFILE_IDLE_DAYS", 30, float),
        Setting("MCP_TIMEOUT_SECONDS", 30, float),
        Setting("MCP_TRACE_RESULT_CHARS", 500, int),
        Setting("WEBHOOK_RETRY_SCHEDULE", DEFAULT_RETRY_SCHEDULE, _seconds_list),
        Setting("WEBHOOK_RETRY_JITTER", 0.1, float),
        Setting("WEBHOOK_TIMEOUT_SECONDS", 15, float),
        Setting("WEBHOOK_CA_BUNDLE"),  # unset: certifi's bundle
        Setting("WINDOW_COMMAND_TIMEOUT_SECONDS", 60, float),
        Setting("METRICS_BIND", None, _metrics_bind),
    ),
    "Browser": (  # where browsers run: a tasks worker's machine
        Setting("CHROMIUM_PATH", "/usr/bin/chromium"),
        Setting("CHROMEDRIVER_PATH", "/usr/bin/chromedriver"),
        Setting("SELENIUM_REMOTE_URL"),
        Setting("BROWSER_POOL_SIZE", 2, int),
        # One: sessions are created far less often than tasks run, and each idle browser holds its memory.
        Setting("SESSION_POOL_SIZE", 1, int),
        Setting("BROWSER_WINDOW_SIZE", "1280x900"),
        Setting("BROWSER_LOCALE", "en-US"),
        Setting("BROWSER_PAGE_LOAD_TIMEOUT_SECONDS", 30, float),
        Setting("GIF_WIDTH", 800, int),
        Setting("GIF_MAX_FRAMES", 100, int),
        Setting("DOWNLOAD_DIR", _derived(lambda read: str(Path(read["VAR_DIR"]) / "downloads"))),
        Setting("RECORDINGS", True, _bool),
        Setting("RRWEB_DIR", str(ROOT / "vendor" / "rrweb")),
        Setting("RECORDING_MAX_BYTES", 50 * 1024 * 1024, int),
        Setting("RECORDING_TTL_SECONDS", 7 * 24 * 3600, int),
        # 50 MB a task: five files at the upload limit, a few MB of Postgres rows at most.
        Setting("DOWNLOAD_MAX_FILE_BYTES", 10 * 1024 * 1024, int),
        Setting("DOWNLOAD_MAX_TASK_BYTES", 50 * 1024 * 1024, int),
        Setting("DOWNLOAD_MAX_SESSION_BYTES", 50 * 1024 * 1024, int),
        Setting("DOWNLOAD_MAX_SESSION_FILES", 100, int),
        Setting("DOWNLOAD_WAIT_SECONDS", 10, float),
        Setting("INPUT_KEEP_BROWSER_SECONDS", 900, float),  # docs/agent.md says why 15 minutes
        # About 280 MB each: 8 are about 2.2 GB (workers/browser/parking.py).
        Setting("PARKED_BROWSERS_PER_KEY", 2, int),
        Setting("PARKED_BROWSERS_MAX", 8, int),
        Setting("CLOUD_SESSION_TIMEOUT_SECONDS", 600, int),
        Setting("CLOUD_SESSION_MAX_TIMEOUT_SECONDS", 4 * 3600, int),
        Setting("CLOUD_SESSIONS_PER_KEY", 5, int),
        # With 12, a killed machine's tasks end 10-14 s after (app/browser_hosts.py).
        Setting("SESSION_HOST_LOST_SECONDS", 12, float),
        Setting("BROWSER_HOST_BIND", "127.0.0.1:0"),  # workers/browser/host_endpoint.py
        Setting("BROWSER_HOST_URL"),
    ),
    "Egress": (  # outbound connections: the browsers' egress proxy, callbacks, page reads, MCP
        Setting("ALLOW_PRIVATE_URLS", False, _bool),
        Setting("EGRESS_ONLY_HOSTS", (), _host_patterns),
        Setting("EGRESS_ALLOW_HOSTS", (), _comma_list),
        Setting("EGRESS_TREAT_AS_PUBLIC", (), _comma_list),  # TEST ONLY
        Setting("BROWSER_PROXY_HOST", "127.0.0.1"),
    ),
    "Model": (  # the planners, in the tasks workers; the bundled model's server (config/local_model.py)
        Setting("LLM_BASE_URL"),
        Setting("LLM_API_KEY"),
        Setting("LLM_MODEL"),
        Setting("LLM_TIMEOUT_SECONDS", 120, float),
        Setting("LLM_MAX_RETRIES", 3, int),
        Setting("LLM_CONCURRENCY", 0, int),
        Setting("BUILTIN_STEPS_FIRST", True, _bool),
        Setting("LLM_CONTEXT_TOKENS", 8192, int),
        Setting("LLM_MAX_TOKENS", 512, int),
        Setting("PAGE_VIEW_CHARS", 6000, int),
        Setting("LLM_VISION", "auto"),
        Setting("LLM_CONSTRAINED", "auto"),
        Setting("LOCAL_MODEL_PORT", 8008, int),
        Setting("LOCAL_MODEL_TEMPERATURE", None, float),
    ),
    "Tools": (  # `make run`'s process manager (config/run.py), `remote-dispatch flower`
        Setting("STOP_GRACE_SECONDS", 20, int),
        Setting("FLOWER_BASIC_AUTH", "", str.strip),
        Setting("FLOWER_UNAUTHENTICATED", False, _bool),
        Setting("FLOWER_ADDRESS", "127.0.0.1"),
        Setting("FLOWER_PORT", 5555, int),
    ),
    "The stdio MCP server": (  # `remote-dispatch mcp`, a client of the REST API (app/mcp_server/stdio.py)
        Setting("REMOTE_DISPATCH_URL", "http://127.0.0.1:8000", str.strip),
        Setting("REMOTE_DISPATCH_API_KEY", "", str.strip),
    ),
}


def values():
    """Every setting, parsed from the environment now, by variable name; nothing is written (see load())."""
    every = [setting for group in SETTINGS.values() for setting in group]
    read = {setting.name: setting.read() for setting in every}
    for setting in every:  # derived defaults, once every value they may use is read
        if getattr(read[setting.name], "derived", False):
            read[setting.name] = read[setting.name](read)
    return read


def load():
    """Return the settings dict for `create_app()`: every value under its config key, VAR_DIR made, the encryption
    key generated if unset."""
    read = values()
    folder = Path(read["VAR_DIR"])
    folder.mkdir(parents=True, exist_ok=True)
    config = {setting.key or setting.name: read[setting.name] for group in SETTINGS.values() for setting in group}
    config.update({
        "VAR_DIR": str(folder),
        "ENCRYPTION_KEY": _encryption_key(read["ENCRYPTION_KEY"], folder),
        "RATELIMIT_HEADERS_ENABLED": True,
        # A rate-limit store that is down must not take the API down with it.
        "RATELIMIT_SWALLOW_ERRORS": True,
    })
    return config
