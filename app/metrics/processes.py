"""Where a machine's processes keep their metric values (prometheus_client's multiprocess mode), and who may read them.

The process that forks the others (gunicorn's master, the Celery worker's main process) calls `prepare` before any
metric is created (app.metrics.events): the folder is set in the environment its children inherit, and emptied of
what an earlier run left (a dead run's counters would otherwise be added to this one's).
"""
import hmac
import os
import shutil
from pathlib import Path

from ..sandbox.processes import alive

ENV = "PROMETHEUS_MULTIPROC_DIR"


def metrics_root(var_dir):
    return Path(var_dir) / "metrics"


def prepare(var_dir, role, pid=None):
    """Give this process (and the children it will fork) a fresh folder of its own, VAR_DIR/metrics/<role>-<pid>,
    and remove the folders of processes of that role that are gone. Returns the folder."""
    pid = pid or os.getpid()
    root = metrics_root(var_dir)
    root.mkdir(parents=True, exist_ok=True)
    for folder in root.glob(f"{role}-*"):
        other = folder.name.rpartition("-")[2]
        if not other.isdigit() or int(other) == pid or not alive(int(other)):
            shutil.rmtree(folder, ignore_errors=True)
    folder = root / f"{role}-{pid}"
    folder.mkdir(mode=0o700)
    os.environ[ENV] = str(folder)
    # prometheus_client picks where values live when it is imported, and it may be already: Celery's command line
    # loads its plugins (Flower's, which uses it) before our app. Metrics created from now on use the files.
    import sys

    values = sys.modules.get("prometheus_client.values")
    if values is not None:
        values.ValueClass = values.get_value_class()
    return folder


def process_ended(pid):
    """A child (gunicorn worker, pool process) ended: its live gauges go; its counters stay, and keep counting in the
    sums (a replaced worker's requests happened)."""
    if os.environ.get(ENV):
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(pid)


def refusal(token, authorization):
    """None when `authorization` (the request's header) carries the token; else (status, error, message).
    With no token configured metrics are not served at all (404, as for any unknown path)."""
    if not token:
        return 404, "Not Found", "The requested URL was not found on the server."
    scheme, _, given = (authorization or "").partition(" ")
    if scheme.lower() != "bearer" or not given.strip():
        return 401, "Unauthorized", "Metrics need 'Authorization: Bearer <METRICS_TOKEN>'."
    if not hmac.compare_digest(given.strip().encode(), token.encode()):
        return 403, "Forbidden", "The bearer token is not this instance's METRICS_TOKEN."
    return None


def exposition(*collectors):
    """The text a scrape gets: this machine's event metrics (summed over its processes' files in multiprocess mode,
    else this process's own) followed by `collectors`' state read now. Returns (body bytes, content type)."""
    from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, CollectorRegistry, generate_latest, multiprocess

    events = REGISTRY
    if os.environ.get(ENV):
        events = CollectorRegistry()
        multiprocess.MultiProcessCollector(events)
    state = CollectorRegistry()
    for collector in collectors:
        state.register(collector)
    return generate_latest(events) + generate_latest(state), CONTENT_TYPE_LATEST
