"""gunicorn settings: gthread workers, so requests blocked in `wait: true` do not starve the rest.

A waiting request holds one thread but no database connection (it hands its connection back
while blocked, and one LISTEN connection per process wakes it). The app admits at most
WAIT_MAX_CONCURRENT waiting requests per process (default WEB_THREADS - 8) and answers 503
beyond that, so some threads always remain for polls and submits.
`bench/concurrent_waits.py` measures how many waits one process sustains (docs/results.md).
"""
import re
import sys

from gunicorn.glogging import Logger

from config import settings

_settings = settings.values()
# Loopback by default: HOST=0.0.0.0 (or an address) to serve other machines.
bind = f"{_settings['HOST']}:{_settings['PORT']}"
worker_class = "gthread"

# Rate limits count in RATELIMIT_STORAGE_URI. memory:// counts per process, so with it the limit
# a key gets is the configured one only with a single web process: that is the default then, and
# asking for more processes is refused. Shared storage (redis://...) allows any number.
_storage = _settings["RATELIMIT_STORAGE_URI"]
_per_process = settings.memory_rate_limits(_settings)
workers = _settings["WEB_CONCURRENCY"]
if _per_process and workers > 1:
    sys.exit(f"WEB_CONCURRENCY={workers} with RATELIMIT_STORAGE_URI={_storage}: each web process would "
             f"count rate limits on its own and let {workers}x the plan's limit through. Set "
             "RATELIMIT_STORAGE_URI=redis://host:6379/0 (shared counting) or run one web process.")
if _per_process:
    print("rate limits are counted in this process's memory (RATELIMIT_STORAGE_URI=memory://): "
          "one web process; set RATELIMIT_STORAGE_URI=redis://... to run more", file=sys.stderr)

# This instance's own control socket (gunicornc), beside its data rather than one path in $HOME.
_var_dir = settings.var_dir()
control_socket = str(_var_dir / "gunicorn.ctl")

# Metrics (docs/monitoring.md): with METRICS_TOKEN set, every worker writes its counters to files in a folder of this
# master's (multiprocess mode), set here before any worker imports prometheus_client, and the worker answering a
# scrape adds them all up.
if _settings["METRICS_TOKEN"]:
    from app.metrics.processes import prepare as _prepare_metrics

    _prepare_metrics(_var_dir, "web")


def child_exit(server, worker):
    """A worker that ended (or was replaced) leaves its counters counted; its live gauges go."""
    from app.metrics.processes import process_ended

    process_ended(worker.pid)

threads = _settings["WEB_THREADS"]  # WAIT_MAX_CONCURRENT is derived from it
# Open client connections per worker, idle keep-alive ones included (those hold no thread);
# gthread keeps at most worker_connections - threads alive, so it must stay above threads.
worker_connections = _settings["WEB_CONNECTIONS"]
# The gthread arbiter heartbeat does not depend on requests finishing, so long waits are safe.
timeout = _settings["WEB_TIMEOUT"]
# On a reload or deploy, requests already waiting get the time to see their task end.
graceful_timeout = int(_settings["WAIT_TIMEOUT_SECONDS"]) + 10
keepalive = 5
accesslog = "-"
# gunicorn's default format, led by the worker's pid (which process answered).
access_log_format = '[%(p)s] %(h)s %(l)s %(u)s %(t)s "%(r)s" %(s)s %(b)s "%(f)s" "%(a)s"'
# URLs whose token is the whole permission (a live view and its socket, a kept session's login link, a
# downloaded file's link), and query parameters that carry one: the access log shows "[token]" instead.
TOKEN_IN_PATH = re.compile(r"(/live/|/cloud-browser/login/|/cloud-browser/replay/file/)[^/?#\s\"]+")
TOKEN_IN_QUERY = re.compile(r"([?&](?:token|customToken|api_key|apiKey|key)=)[^&#\s\"]*", re.IGNORECASE)


def redact_tokens(text):
    return TOKEN_IN_QUERY.sub(r"\1[token]", TOKEN_IN_PATH.sub(r"\1[token]", text))


class RedactingLogger(Logger):
    """gunicorn's logger, with tokens taken out of every access-log atom (request line, path, query, referer,
    headers) before the line is written."""

    def atoms(self, resp, req, environ, request_time):
        return {name: redact_tokens(value) if isinstance(value, str) else value
                for name, value in super().atoms(resp, req, environ, request_time).items()}


logger_class = RedactingLogger

# The longest request line (method, URL, version) gunicorn reads; longer ones get 414.
limit_request_line = _settings["WEB_MAX_REQUEST_LINE"]


def _json_error(sock, status_int, reason, mesg):
    """gunicorn answers requests it cannot parse (414 URL too long, 431 headers too large, 400
    malformed) itself, with an HTML page; the API's callers get its `{error, message}` body instead."""
    import json

    from gunicorn.util import write_nonblock

    if status_int == 414:
        mesg = f"The URL is too long: the request line may be at most {limit_request_line} bytes."
    body = json.dumps({"error": reason, "message": mesg or reason}).encode()
    head = (f"HTTP/1.1 {status_int} {reason}\r\nConnection: close\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n").encode("latin-1")
    write_nonblock(sock, head + body)


# gunicorn has no setting for the format of its own error responses: its workers call
# gunicorn.util.write_error, which this config (loaded before the workers fork) replaces.
import gunicorn.util  # noqa: E402

gunicorn.util.write_error = _json_error
