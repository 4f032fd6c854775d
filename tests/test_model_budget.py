"""A model call is bounded by the task's clock and ended by cancel (its connection dropped), and no
transaction stays open while the model computes."""
import time
from contextlib import closing
from datetime import datetime

import pytest
from sqlalchemy import text as sql

from app.extensions import db
from tests.agent_support import stored_task
from tests.conftest import WorkerProcess, submit, wait_for_status, wait_until
from tests.llm_server import ScriptedModel, held, text

pytestmark = pytest.mark.slow
BUDGET = 8  # TASK_TIMEOUT_SECONDS of this module's worker
CLOUD = {"executionMode": "cloud", "prompt": "What is the answer?"}


@pytest.fixture(scope="module")
def model():
    with closing(ScriptedModel()) as server:
        yield server


@pytest.fixture(scope="module")
def model_worker(app, model):
    # Generous per-request timeout and retries: the task's budget, not these, must end a long call.
    env = model.env(TASK_TIMEOUT_SECONDS=BUDGET, LLM_TIMEOUT_SECONDS=120, LLM_MAX_RETRIES=3)
    proc = WorkerProcess(env=env, name="model-budget")
    yield proc
    proc.stop()


def stamp(value):
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def cancel(client, key, request_id):
    return client.post(f"/fast/v2/remote-dispatch/responses/{request_id}/cancel", headers={"x-api-key": key})


def long_idle_transactions():
    """Connections of the test database idle inside a transaction for more than a second (the test's own
    session holds none: it is removed first)."""
    db.session.remove()
    with db.engine.connect() as conn:
        rows = conn.execute(sql(
            "SELECT pid, query FROM pg_stat_activity WHERE datname = current_database() "
            "AND state = 'idle in transaction' AND now() - state_change > interval '1 second' "
            "AND pid <> pg_backend_pid()")).all()
        conn.rollback()
    return rows


def test_cancel_ends_a_task_while_the_model_computes(client, api_key, model, model_worker):
    model.script(held(60, text("too late")))
    request_id = submit(client, api_key, CLOUD).get_json()["requestId"]
    wait_until(lambda: model.requests, "the model call")
    time.sleep(1.5)  # longer than the idle time long_idle_transactions() looks for
    # While the model computes, the worker holds no transaction (it would pin a connection and freeze now()).
    assert long_idle_transactions() == []
    assert cancel(client, api_key, request_id).status_code == 202
    body = wait_for_status(client, api_key, request_id, timeout=BUDGET + 30)
    assert body["status"] == "error" and body["response"]["text"] == "cancelled"
    wait_until(lambda: model.dropped == 1, "the model's connection to be dropped")
    assert len(model.requests) == 1


def test_the_task_budget_ends_a_model_call_without_a_retry(client, api_key, model, model_worker):
    model.script(held(60, text("too late")), text("a retry must not happen"))
    request_id = submit(client, api_key, CLOUD).get_json()["requestId"]
    body = wait_for_status(client, api_key, request_id, timeout=BUDGET + 30)
    assert body["status"] == "error"
    assert body["response"]["text"] == (
        f"Time limit reached: task time budget of {BUDGET} s exhausted during a model call.")
    wait_until(lambda: model.dropped == 1, "the model's connection to be dropped")
    assert len(model.requests) == 1  # not re-sent to a server still computing the abandoned request


def test_completed_at_is_the_real_end_after_a_slow_model_call(client, api_key, model, model_worker):
    model.script(held(3, text("forty-two")))
    request_id = submit(client, api_key, CLOUD).get_json()["requestId"]
    body = wait_for_status(client, api_key, request_id, timeout=BUDGET + 30)
    assert body["status"] == "success" and body["response"]["text"] == "forty-two"
    ended = stamp(body["response"]["actionTrace"][-1]["endTs"])
    assert stamp(body["completedAt"]) >= ended
    assert stored_task(request_id).completed_at >= ended
