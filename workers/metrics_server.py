"""A worker machine's metrics endpoint (METRICS_BIND): a small HTTP server on a thread of the Celery worker's main
process, which sums its pool processes' counters (their multiprocess files) and reads this machine's browsers and
slots as they are now. Served only to `Authorization: Bearer <METRICS_TOKEN>` (docs/monitoring.md)."""
import json
import logging
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from app.metrics.processes import exposition, prepare as prepare_folder, refusal

log = logging.getLogger(__name__)


def prepare():
    """Called first thing in workers/celery.py. In a worker's main process with METRICS_BIND set (not beat, not a CLI command loading the same app): a fresh
    multiprocess folder for it and the pool processes it forks."""
    from config import settings

    if settings.values()["METRICS_BIND"] and "worker" in sys.argv[1:]:
        prepare_folder(settings.var_dir(), "worker")


class WorkerState:
    """This worker's slots, and (for a tasks worker) this machine's pooled and parked browsers, read at scrape time."""

    def __init__(self, config, consumer):
        self.config, self.consumer = config, consumer
        amqp = getattr(getattr(consumer, "app", None), "amqp", None)
        consumes = set(amqp.queues.consume_from or amqp.queues) if amqp is not None else set()
        self.node = getattr(consumer, "hostname", "") or ""
        self.holds_browsers = "tasks" in consumes

    def collect(self):
        from celery.worker import state
        from prometheus_client.core import GaugeMetricFamily

        from app.sessions import pool as session_pool
        from workers.browser import parking, pool as browser_pool

        total = GaugeMetricFamily("remote_dispatch_worker_slots", "Task slots of this worker (its pool's "
                                  "processes or threads).", labels=["node"])
        busy = GaugeMetricFamily("remote_dispatch_worker_slots_busy", "Slots running a task now.", labels=["node"])
        pool = getattr(self.consumer, "pool", None)
        total.add_metric([self.node], getattr(pool, "num_processes", None) or getattr(pool, "limit", 0) or 0)
        busy.add_metric([self.node], len(state.active_requests))
        yield total
        yield busy
        if not self.holds_browsers:
            return
        browsers = GaugeMetricFamily("remote_dispatch_pool_browsers", "This machine's warm-pool browsers: ready "
                                     "(started, never used) or in_use (claimed by a task).", labels=["pool", "state"])
        target = GaugeMetricFamily("remote_dispatch_pool_browsers_target", "How many ready browsers the pool keeps.",
                                   labels=["pool"])
        ready, in_use = _task_pool(self.config["VAR_DIR"])
        browsers.add_metric(["tasks", "ready"], ready)
        browsers.add_metric(["tasks", "in_use"], in_use)
        browsers.add_metric(["sessions", "ready"], len(session_pool.ready(self.config)))
        target.add_metric(["tasks"], 0 if browser_pool.cold_reason(self.config) else self.config["BROWSER_POOL_SIZE"])
        target.add_metric(["sessions"], 0 if session_pool.cold_reason(self.config) else self.config["SESSION_POOL_SIZE"])
        parked = GaugeMetricFamily("remote_dispatch_parked_browsers", "Browsers this machine keeps for tasks paused "
                                   "at input-required.")
        root = parking.parked_root(self.config["VAR_DIR"])
        parked.add_metric([], sum(1 for _ in root.glob(f"*{parking.RECORD}")) if root.is_dir() else 0)
        yield browsers
        yield target
        yield parked


def _task_pool(var_dir):
    """(ready, in use) boxes of the tasks' warm pool, from their state files."""
    from workers.browser import pool as browser_pool

    root = browser_pool.pool_root(var_dir)
    ready = in_use = 0
    for box in root.iterdir() if root.is_dir() else ():
        ready += (box / browser_pool.READY).exists()
        in_use += (box / browser_pool.CLAIMED).exists()
    return ready, in_use


class MetricsServer:
    def __init__(self, config, consumer):
        self.config = config
        self.state = WorkerState(config, consumer)
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                server.answer(self)

            def log_message(self, *args):  # scrapes every 15 s would fill the worker's log
                pass

        self.httpd = ThreadingHTTPServer(config["METRICS_BIND"], Handler)
        self.httpd.daemon_threads = True
        self.thread = None

    def answer(self, request):
        if request.path.split("?")[0] != "/metrics":
            status, body, content_type = 404, _error(404, "Not Found", "Metrics are at /metrics."), "application/json"
        elif refused := refusal(self.config["METRICS_TOKEN"], request.headers.get("Authorization")):
            status, body, content_type = refused[0], _error(*refused), "application/json"
        else:
            try:
                status, (body, content_type) = 200, exposition(self.state)
            except Exception:
                log.exception("metrics: exposition failed")
                status, body = 500, _error(500, "Internal Server Error", "The metrics could not be read.")
                content_type = "application/json"
        request.send_response(status)
        request.send_header("Content-Type", content_type)
        request.send_header("Content-Length", str(len(body)))
        request.send_header("Cache-Control", "no-store")
        request.end_headers()
        request.wfile.write(body)

    def start(self):
        self.thread = threading.Thread(target=self.httpd.serve_forever, name="metrics-server", daemon=True)
        self.thread.start()
        host, port = self.httpd.server_address[:2]
        log.info("metrics served on http://%s:%s/metrics", host, port)
        return self

    def stop(self):
        self.httpd.shutdown()
        self.httpd.server_close()


def _error(status, error, message):
    return json.dumps({"error": error, "message": message}).encode()
