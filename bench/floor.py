"""Floors: the irreducible work of a submit and of a task run, done with psycopg2 and kombu directly.

`app` is a bare WSGI function (mounted at /bench/floor in the same gunicorn as the product, see
bench/wsgi.py) that does what a submit cannot avoid: parse the JSON body, one API-key lookup by
hash, one INSERT of the task row + COMMIT, one publish with publisher confirms of a Celery-format
message. `run_floor` (a bare Celery task, bench/noop_celery.py) does a task run's claim and finish
statements and nothing else. The ratios measured ÷ floor say what our code costs above the work.
"""
import contextlib
import hashlib
import json
import os
import socket
import threading
import uuid

import psycopg2
import psycopg2.pool
from kombu import Connection, Exchange, Queue

from app.broker import celery_message

SUBMIT_QUEUE = "bench_floor_submit"  # nobody consumes it during the submit benchmark; purged after
PIPELINE_QUEUE = "bench_floor"  # consumed by the floor worker (bench/noop_celery.py)
TASK_NAME = "bench.floor_run"


def _dsn():
    return os.environ["DATABASE_URL"].replace("postgresql+psycopg2://", "postgresql://")


class _Pool:
    """Database connections pooled as the service pools them (its SQLAlchemy pool's size and overflow, per
    process), so the floor holds no more Postgres connections than the product; one kombu producer per
    thread that asks (gthread threads), as the service's Celery producer pool gives one per thread."""

    def __init__(self):
        from app import _engine_options

        options = _engine_options(_dsn())
        self._local = threading.local()
        self._db = psycopg2.pool.ThreadedConnectionPool(0, options["pool_size"] + options["max_overflow"], _dsn())

    @contextlib.contextmanager
    def db(self):
        conn = self._db.getconn()
        try:
            yield conn
        finally:
            self._db.putconn(conn, close=bool(conn.closed))

    def producer(self):
        producer = getattr(self._local, "producer", None)
        if producer is None:
            connection = Connection(os.environ["CELERY_BROKER_URL"],
                                    transport_options={"confirm_publish": True})
            producer = self._local.producer = connection.Producer(serializer="json")
        return producer


_pool = _Pool()
_declared = set()
_declare_lock = threading.Lock()


def app(environ, start_response):
    """POST /bench/floor[?queue=bench_floor]: the floor of a submit."""
    length = int(environ.get("CONTENT_LENGTH") or 0)
    data = json.loads(environ["wsgi.input"].read(length) or b"{}")
    key = environ.get("HTTP_X_API_KEY", "")
    with _pool.db() as conn, conn.cursor() as cur:
        cur.execute("SELECT id FROM api_keys WHERE key_hash = %s AND revoked_at IS NULL",
                    (hashlib.sha256(key.encode()).hexdigest(),))
        row = cur.fetchone()
        if row is None:
            conn.rollback()
            start_response("401 UNAUTHORIZED", [("Content-Type", "application/json")])
            return [b'{"error": "Unauthorized"}']
        task_id = str(uuid.uuid4())
        cur.execute("INSERT INTO tasks (id, api_key_id, status, agent, execution_mode, prompt, options, attempt, "
                    "cancel_requested, created_at, updated_at) VALUES (%s, %s, 'pending', 'general', %s, %s, "
                    "'{}', 0, false, now(), now())",
                    (task_id, row[0], data.get("executionMode", "cloud"), data.get("prompt", "")))
        conn.commit()
    name = PIPELINE_QUEUE if "queue=bench_floor" in environ.get("QUERY_STRING", "") else SUBMIT_QUEUE
    _, headers, body = celery_message(TASK_NAME, [task_id], "bench-floor")
    producer = _pool.producer()
    target = Queue(name, Exchange(name), routing_key=name, durable=True)
    if name not in _declared:
        with _declare_lock:
            target.declare(channel=producer.channel)  # idempotent; once per process and queue
            _declared.add(name)
    producer.publish(body, exchange=name, routing_key=name, headers=headers, content_type="application/json",
                     content_encoding="utf-8", delivery_mode=2, retry=False)
    start_response("202 ACCEPTED", [("Content-Type", "application/json")])
    return [json.dumps({"requestId": task_id}).encode()]


# ------------------------------------------------------------------ the task-run floor

_worker_db = threading.local()
OWNER = f"{socket.gethostname()}:{os.getpid()}:floor"
FINISH_RESPONSE = json.dumps({"output": {"type": "text", "content": "hi"}, "actionTrace": [], "text": "hi",
                              "structuredOutput": None})
FINISH_USAGE = json.dumps({"actions": 0, "credits": 0.0})


def claim_and_finish(task_id):
    """The claim (compare-and-swap, lease) and the finish (one transaction with NOTIFY) a real run does."""
    conn = getattr(_worker_db, "conn", None)
    if conn is None or conn.closed:
        conn = _worker_db.conn = psycopg2.connect(_dsn())
    with conn.cursor() as cur:
        cur.execute("UPDATE tasks SET lease_owner = %s, lease_expires_at = now() + interval '60 seconds', "
                    "attempt = attempt + 1, started_at = coalesce(started_at, now()), updated_at = now() "
                    "WHERE id = %s AND status = 'pending' AND lease_owner IS NULL RETURNING attempt",
                    (OWNER, task_id))
        claimed = cur.fetchone()
        conn.commit()
        if claimed is None:
            return
        cur.execute("UPDATE tasks SET status = 'success', response = %s, usage = %s, trace = '[]', error = NULL, "
                    "lease_owner = NULL, lease_expires_at = NULL, completed_at = now(), secrets_sealed = NULL, "
                    "hitl = NULL, updated_at = now() WHERE id = %s AND status IN ('pending', 'input-required') "
                    "AND lease_owner = %s RETURNING callback_url",
                    (FINISH_RESPONSE, FINISH_USAGE, task_id, OWNER))
        cur.fetchone()
        cur.execute("SELECT pg_notify('task_finished', %s)", (task_id,))
    conn.commit()


