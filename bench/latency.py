"""Benchmark 3: submit → claimed, finalised → webhook received, finalised → `wait` returns."""
import json
import os
import select
import ssl
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from bench import common

SAMPLES = common.scaled(100, 15)
SECTION = "3 latency"
CELERY_BASELINE = "bare Celery publish → no-op task runs"


def measure(stack):
    stack.tasks_worker
    noop_ms = noop_latencies(stack)
    rows = common.latency_rows(SECTION, "submit → claimed by a worker", claim_latencies(stack),
                               CELERY_BASELINE, noop_ms)
    rows += webhook_rows(stack, noop_ms)
    rows += wait_rows(stack)
    return rows


def claim_latencies(stack):
    """tasks.started_at - created_at (database clock) of tasks submitted one at a time to an idle worker."""
    ids = []
    for _ in range(SAMPLES):
        ids.append(stack.submit().json()["requestId"])
        stack.wait_finished(ids[-1:], 30)
    return [float(ms) for (ms,) in stack.sql(
        "SELECT extract(epoch FROM started_at - created_at) * 1000 FROM tasks WHERE id = ANY(:ids)", ids=ids)]


def noop_latencies(stack):
    """Publish → run of the bare no-op task, one at a time."""
    from bench.noop_celery import noop

    listener = stack.done_listener
    stack.noop_worker
    samples = []
    for _ in range(SAMPLES):
        listener.clear()
        noop.delay(time.time(), listener.port)
        [(sent, ran, _)] = listener.wait_for(1, 30)
        samples.append((ran - sent) * 1000)
    return samples


def completed_at(stack, request_id):
    return float(stack.sql("SELECT extract(epoch FROM completed_at) FROM tasks WHERE id = :id",
                           id=request_id)[0][0])


# ---------------------------------------------------------------- finalised → webhook received

def webhook_rows(stack, noop_ms):
    figure = "finalised → webhook received"
    probe_id = stack.submit().json()["requestId"]
    probe = common.http().get(f"{stack.web.url}/fast/v2/remote-dispatch/responses/{probe_id}/webhooks",
                              headers={"x-api-key": stack.api_key}, timeout=10)
    if probe.status_code != 200:  # no delivery log endpoint: the webhooks feature is not in this build
        return [common.not_present(SECTION, f"{figure} p50/p99 (ms)")]
    receiver = Receiver()
    try:
        stack.start(common.start_celery("webhooks-worker", "workers", "webhooks", env=receiver.trust_env))
        samples = []
        for _ in range(SAMPLES):
            body = json.dumps({"prompt": common.PROMPT, "executionMode": "cloud",
                               "callbackUrl": receiver.url, "callbackSecret": "bench"})
            request_id = stack.submit(body).json()["requestId"]
            arrived = receiver.wait_for(request_id, 30)
            if arrived is None:
                return [common.not_present(SECTION, f"{figure} p50/p99 (ms)",
                                           "no delivery within 30 s; see var/bench/webhooks-worker.log")]
            samples.append((arrived - completed_at(stack, request_id)) * 1000)
    finally:
        receiver.close()
    return common.latency_rows(SECTION, figure, samples, CELERY_BASELINE, noop_ms)


class Receiver:
    """An HTTPS webhook receiver on loopback (trustme certificates) recording when each event arrives."""

    def __init__(self):
        import trustme

        ca = trustme.CA()
        self.ca_file = common.LOG_DIR / "webhook-ca.pem"
        ca.cert_pem.write_to_path(str(self.ca_file))
        self.trust_env = {"WEBHOOK_CA_BUNDLE": str(self.ca_file)}
        self.arrivals = {}
        self.cond = threading.Condition()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                with receiver.cond:
                    receiver.arrivals.setdefault(json.loads(body).get("requestId"), time.time())
                    receiver.cond.notify_all()
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ca.issue_cert("127.0.0.1", "localhost").configure_cert(context)
        self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        self.url = f"https://localhost:{self.server.server_address[1]}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def wait_for(self, request_id, timeout):
        with self.cond:
            self.cond.wait_for(lambda: request_id in self.arrivals, timeout)
            return self.arrivals.get(request_id)

    def close(self):
        self.server.shutdown()


# ---------------------------------------------------------------- finalised → wait returns

def wait_rows(stack):
    figure = "finalised → wait returns"
    body = json.dumps({"prompt": common.PROMPT, "executionMode": "cloud", "wait": True})
    probe = stack.submit(body, timeout=60)
    if probe.status_code != 200 or "status" not in probe.json():  # 202: wait is not in this build
        return [common.not_present(SECTION, f"{figure} p50/p99 (ms)")]
    samples = []
    for _ in range(SAMPLES):
        response = stack.submit(body, timeout=60)
        returned = time.time()
        samples.append((returned - completed_at(stack, response.json()["requestId"])) * 1000)
    return common.latency_rows(SECTION, figure, samples, "bare Postgres NOTIFY → LISTEN", notify_latencies())


def notify_latencies():
    """Round trip of a bare NOTIFY from one connection to a LISTENing one."""
    import psycopg2

    url = os.environ["DATABASE_URL"]
    listener, notifier = psycopg2.connect(url), psycopg2.connect(url)
    try:
        for conn in (listener, notifier):
            conn.autocommit = True
        listener.cursor().execute("LISTEN bench_wait")
        samples = []
        for _ in range(SAMPLES):
            sent = time.time()
            notifier.cursor().execute("NOTIFY bench_wait")
            while not listener.notifies:
                select.select([listener], [], [], 5)
                listener.poll()
            listener.notifies.clear()
            samples.append((time.time() - sent) * 1000)
        return samples
    finally:
        listener.close()
        notifier.close()


if __name__ == "__main__":
    common.main(measure)
