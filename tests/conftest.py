"""Fixtures: a migrated Postgres test database, the RabbitMQ test vhost, API keys, workers."""
import json
import os
import statistics
import subprocess
import tempfile
import time

import pytest
from cryptography.fernet import Fernet
from flask.testing import FlaskClient

from tests.processes import ROOT, WorkerProcess  # noqa: F401 (re-exported for tests)

# Under pytest-xdist each worker (gw0, gw1, ...) has a database, a vhost, a VAR_DIR and a rate-limit prefix of its
# own, so no test sees another worker's tasks, queues, files or counts. xdist sets PYTEST_XDIST_WORKER in the
# worker's process before this file is imported; the worker creates its database and vhost here, once.
XDIST_WORKER = os.environ.get("PYTEST_XDIST_WORKER")
if XDIST_WORKER:
    os.environ["TEST_DB"] = os.environ.get("TEST_DB", "remote_dispatch_test") + "_" + XDIST_WORKER
    os.environ["TEST_VHOST"] = os.environ.get("TEST_VHOST", "rd_test") + "_" + XDIST_WORKER
    if "TEST_DATABASE_URL" not in os.environ and "TEST_BROKER_URL" not in os.environ:
        subprocess.run(["bash", str(ROOT / "tests" / "ensure_services.sh")], check=True, stdout=subprocess.DEVNULL)

TEST_DATABASE_URL = os.environ.get(
    "TEST_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/" + os.environ.get("TEST_DB", "remote_dispatch_test"))
TEST_BROKER_URL = os.environ.get(
    "TEST_BROKER_URL", "amqp://guest:guest@127.0.0.1:5672/" + os.environ.get("TEST_VHOST", "rd_test"))

# The app under test reads these when create_app() runs; worker processes inherit them.
os.environ.update({
    "DATABASE_URL": TEST_DATABASE_URL,
    "CELERY_BROKER_URL": TEST_BROKER_URL,
    "ENCRYPTION_KEY": os.environ.get("TEST_ENCRYPTION_KEY") or Fernet.generate_key().decode(),
    "VAR_DIR": tempfile.mkdtemp(prefix="rd-test-var-"),
    "SWEEP_INTERVAL_SECONDS": "1",
    "ALLOW_PRIVATE_URLS": "true",
    # Browsers start cold, as the tests counting browser processes expect; tests/test_browser_pool.py and
    # tests/test_session_pool.py turn them on.
    "BROWSER_POOL_SIZE": "0",
    "SESSION_POOL_SIZE": "0",
    # Shared rate-limit counting (tests/ensure_services.sh starts Redis), so web processes with
    # WEB_CONCURRENCY=2 are allowed; each test database counts under its own prefix.
    "RATELIMIT_STORAGE_URI": os.environ.get("TEST_RATELIMIT_STORAGE_URI", "redis://127.0.0.1:6379/0"),
    "RATELIMIT_KEY_PREFIX": "rd-" + os.environ.get("TEST_DB", "remote_dispatch_test"),
})


FIGURES = {}  # figure name -> value a test measured, printed at the end of the run (with no xdist: -n 0)


def pytest_terminal_summary(terminalreporter):
    if FIGURES:
        terminalreporter.section("measured figures")
        for name, value in FIGURES.items():
            terminalreporter.write_line(f"{name}: {value}")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """With TEST_TIMELINE set (a file path), each test's start and end (setup to teardown) and the xdist worker that
    ran it are appended there as one JSON line: `python -m tests.timeline FILE` shows where a run's wall time went."""
    path = os.environ.get("TEST_TIMELINE")
    start = time.time()
    yield
    if path:
        line = json.dumps({"worker": XDIST_WORKER or "main", "test": item.nodeid, "start": start, "end": time.time()})
        with open(path, "a") as timeline:
            timeline.write(line + "\n")


def pytest_collection_modifyitems(config, items):
    """`make test` runs the suite in two phases (TEST_PHASE): `parallel`, under xdist, every test but those marked
    `alone` (or `disruptive`); then `alone`, those only, in one process with nothing else of the run beside them."""
    phase = os.environ.get("TEST_PHASE")
    if phase not in ("parallel", "alone"):
        return
    keep, drop = [], []
    for item in items:
        alone = item.get_closest_marker("alone") or item.get_closest_marker("disruptive")
        (keep if bool(alone) == (phase == "alone") else drop).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep
    if phase == "parallel":
        _longest_files_first(items)


def _longest_files_first(items):
    """xdist hands files out in this order (`--dist loadfile`): the longest first (tests/durations.json, a measured
    run's spans; a file it does not know counts as the median), so no long file starts last while the other workers
    wait for it. Each file's own tests keep their order."""
    path = ROOT / "tests" / "durations.json"
    known = json.loads(path.read_text()) if path.exists() else {}
    typical = statistics.median(known.values()) if known else 0
    items.sort(key=lambda item: -known.get(item.nodeid.split("::")[0], typical))


@pytest.fixture(scope="session")
def app():
    return migrated_app()


def migrated_app():
    """The app on an empty, freshly migrated test database (the suite's, or a benchmark's that reuses it)."""
    from flask_migrate import upgrade
    from sqlalchemy import text

    from app import create_app
    from app.cli import with_migrations
    from app.extensions import db

    app = with_migrations(create_app({"TESTING": True}))
    with app.app_context():
        with db.engine.begin() as conn:
            conn.execute(text("DROP SCHEMA public CASCADE; CREATE SCHEMA public"))
        upgrade()
    return app


@pytest.fixture(autouse=True)
def _clean_state(app):
    """Every test starts with empty tables and empty queues."""
    from app.extensions import db

    clean_state(app)
    ctx = app.app_context()
    ctx.push()
    yield
    db.session.remove()
    ctx.pop()


def clean_state(app):
    """Empty every table and queue. A module-scoped fixture that starts a worker calls it first too: otherwise the
    new worker can claim a task a previous module's test left queued before this test's own cleaning runs."""
    from sqlalchemy import text
    from sqlalchemy.exc import OperationalError

    from app.extensions import db

    with app.app_context():
        end_cloud_sessions()
        # session_hosts is the registry of the machines' workers (their stream endpoints), not a test's state: a
        # worker a module started stays registered between its tests.
        tables = ", ".join(t.name for t in db.metadata.sorted_tables if t.name != "session_hosts")
        for attempt in range(5):
            try:
                db.session.execute(text(f"TRUNCATE {tables} RESTART IDENTITY CASCADE"))
                db.session.commit()
                break
            except OperationalError as exc:
                # A process the previous test started may still be finishing a write (a session's browser
                # ending, a sweep): its row locks and TRUNCATE's table locks, taken in another order, can
                # deadlock, and Postgres ends our side. Let it finish, then empty the tables again.
                db.session.rollback()
                if "deadlock detected" not in str(exc) or attempt == 4:
                    raise
                time.sleep(0.5)
        purge_queues(app)


def end_cloud_sessions():
    """Cloud sessions keep a browser beyond the request that made them (any test that creates one, the
    contract fuzzer too): end those a test left, before their rows are emptied away."""
    from sqlalchemy import select

    from app.extensions import db
    from app.models import CloudSession
    from app.sessions import service

    for session_id in db.session.execute(
            select(CloudSession.id).where(CloudSession.status != service.ENDED)).scalars().all():
        service.end(session_id, "test cleanup")


@pytest.fixture(scope="session", autouse=True)
def _no_browser_outlives_the_run(app):
    yield
    with app.app_context():
        end_cloud_sessions()


def purge_queues(app):
    from app.broker import QUEUES

    with app.extensions["broker"].connection() as conn:
        channel = conn.default_channel
        for queue in QUEUES:
            try:
                channel.queue_purge(queue)
            except Exception:  # queue not declared yet
                channel = conn.channel()


class FreshSessionClient(FlaskClient):
    """Each production request gets its own database session; tests share one app context
    with their requests, so start every request from a fresh session to match."""

    def open(self, *args, **kwargs):
        from app.extensions import db

        db.session.remove()
        return super().open(*args, **kwargs)


@pytest.fixture
def client(app):
    app.test_client_class = FreshSessionClient
    return app.test_client()


def make_key(name="caller", plan="free"):
    from app.cli import create_key

    return create_key(name, plan)[1]


@pytest.fixture
def api_key():
    return make_key("alice")


@pytest.fixture
def other_key():
    return make_key("bob")


def submit(client, key, body, **kwargs):
    return client.post("/fast/v2/remote-dispatch", json=body, headers={"x-api-key": key}, **kwargs)


def poll(client, key, request_id):
    return client.get(f"/fast/v2/remote-dispatch/responses/{request_id}", headers={"x-api-key": key})


def wait_for_status(client, key, request_id, statuses=("success", "error"), timeout=60):
    """Poll like a caller until the task reaches one of `statuses`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        body = poll(client, key, request_id).get_json()
        if body["status"] in statuses:
            return body
        time.sleep(0.2)
    raise AssertionError(f"task {request_id} still {body['status']} after {timeout}s: {body}")


def wait_until(predicate, what="condition", timeout=30):
    """Return `predicate()`'s first truthy value; fail after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture(scope="module")
def worker(app):
    """One worker consuming every work queue, for the tests of one module."""
    proc = WorkerProcess(name="module")
    yield proc
    proc.stop()


@pytest.fixture(scope="session")
def webhook_ca():
    """A trustme CA; returns (ca, path of its PEM) for WEBHOOK_CA_BUNDLE."""
    import trustme

    ca = trustme.CA()
    path = os.path.join(os.environ["VAR_DIR"], "webhook-ca.pem")
    ca.cert_pem.write_to_path(path)
    return ca, path


@pytest.fixture
def receiver(webhook_ca):
    """A real HTTPS webhook receiver on loopback, trusted through `webhook_ca`."""
    from tests.webhook_receiver import WebhookReceiver

    server = WebhookReceiver(webhook_ca[0]).start()
    yield server
    server.stop()


def delivery_of(request_id):
    """The webhook delivery row of a task (fresh from the database), or None."""
    from sqlalchemy import select

    from app.extensions import db
    from app.models import WebhookDelivery

    db.session.rollback()
    return db.session.execute(
        select(WebhookDelivery).where(WebhookDelivery.task_id == request_id)).scalar_one_or_none()


def attempts_of(webhook_id):
    """The logged attempts of a delivery, oldest first."""
    from sqlalchemy import select

    from app.extensions import db
    from app.models import WebhookAttempt

    db.session.rollback()
    return db.session.execute(select(WebhookAttempt).where(WebhookAttempt.delivery_id == webhook_id)
                              .order_by(WebhookAttempt.id)).scalars().all()
