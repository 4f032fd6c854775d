"""A caller's JSON Schema stays inside its document (no fetch, anywhere) and its patterns run on RE2."""
import json
import subprocess
import sys

import pytest
from sqlalchemy import update

from app import lifecycle
from app.extensions import db
from app.models import Task
from tests.conftest import ROOT, submit
from tests.page_server import PageServer
from tests.test_console import _signed_in_client
from workers.agent.actions import Outcome
from workers.agent.loop import _structured

CLOUD = {"executionMode": "cloud"}
SECRET = "INTERNAL-SECRET-42"
EVIL = "^(a+)+$"  # exponential for a backtracking engine on "aaaa...a!"


@pytest.fixture
def canary():
    """A loopback server that records every request; what it serves would leak a secret into an error."""
    server = PageServer({f"/{name}.json": json.dumps({"enum": [SECRET]}) for name in "abcd"})
    server.base = server.url("").rstrip("/")
    yield server
    server.close()


@pytest.fixture
def unpublished(monkeypatch):
    monkeypatch.setattr("app.dispatch.service.dispatch", lambda task_id, **_: True)


def remote_schemas(base):
    """(schema, the reference its 400 names): remote $ref, $id + relative, one in properties, $dynamicRef."""
    return [
        ({"$ref": f"{base}/a.json"}, f"{base}/a.json"),
        ({"$id": f"{base}/root.json", "type": "object", "properties": {"x": {"$ref": "a.json"}}}, "a.json"),
        ({"type": "object", "properties": {"x": {"$ref": f"{base}/b.json#/enum"}}}, f"{base}/b.json#/enum"),
        ({"type": "object", "properties": {"x": {"$dynamicRef": f"{base}/c.json"}}}, f"{base}/c.json"),
    ]


def with_schema(schema, prompt="answer hi"):
    return {"prompt": prompt, **CLOUD, "responseFormat": {"type": "jsonSchema", "jsonSchema": schema}}


def test_a_remote_reference_is_refused_at_submit_and_nothing_is_fetched(client, api_key, canary, unpublished):
    for schema, ref in remote_schemas(canary.base):
        response = submit(client, api_key, with_schema(schema))
        assert response.status_code == 400, schema
        message = json.dumps(response.get_json())
        assert "points outside the schema" in message and repr(ref) in message, message
    # The SDK's form ({"type": "json_schema", "json_schema": {"schema": ...}}) goes through the same check.
    legacy = {"prompt": "answer hi", **CLOUD, "responseFormat": {
        "type": "json_schema", "json_schema": {"name": "x", "schema": {"$ref": f"{canary.base}/d.json"}}}}
    response = submit(client, api_key, legacy)
    assert response.status_code == 400 and f"{canary.base}/d.json" in json.dumps(response.get_json())
    assert canary.requests == []


def test_references_inside_the_schema_keep_working(client, api_key, unpublished):
    schema = {"type": "object", "$defs": {"name": {"type": "string", "pattern": "^[A-Z]"}},
              "properties": {"who": {"$ref": "#/$defs/name"}}, "required": ["who"]}
    assert submit(client, api_key, with_schema(schema)).status_code == 202
    assert _structured(Outcome("success", '{"who": "Ada"}'), schema) == ({"who": "Ada"}, None)
    content, problem = _structured(Outcome("success", '{"who": "ada"}'), schema)
    assert content is None and "'ada' does not match '^[A-Z]'" in problem
    metaschema = {"$ref": "https://json-schema.org/draft/2020-12/schema"}  # bundled, never fetched
    assert submit(client, api_key, with_schema(metaschema)).status_code == 202


def test_the_worker_never_fetches_a_reference_while_checking_an_answer(canary):
    # A schema stored before submit refused such references: the worker's check resolves nothing remote.
    for schema, _ in remote_schemas(canary.base):
        content, problem = _structured(Outcome("success", '{"x": "x"}'), schema)
        assert content is None and "cannot be resolved inside it" in problem and SECRET not in problem
    assert canary.requests == []


def test_the_console_never_fetches_a_reference_of_a_task_schema(client, api_key, canary, unpublished):
    request_id = submit(client, api_key, {"prompt": "answer hi", **CLOUD}).get_json()["requestId"]
    schema = remote_schemas(canary.base)[0][0]
    db.session.execute(update(Task).where(Task.id == request_id).values(
        options={"responseFormat": {"type": "jsonSchema", "jsonSchema": schema}}))
    db.session.commit()
    response = {"output": {"type": "structured", "content": "x"}, "text": "x", "structuredOutput": "x",
                "actionTrace": []}
    assert lifecycle.finish(request_id, "success", response, {"actions": 0, "credits": 0})
    _signed_in_client(client, api_key)
    for _ in range(2):
        page = client.get(f"/console/tasks/{request_id}")
        assert page.status_code == 200
        assert "Schema check: not recorded." in page.get_data(as_text=True)  # never checked on view
        state = client.get(f"/console/tasks/{request_id}/state.json")
        assert state.status_code == 200 and SECRET not in state.get_data(as_text=True)
    assert canary.requests == []


@pytest.mark.parametrize("where", [
    {"pattern": "(a)\\1"},
    {"pattern": "^(?=a)"},
    {"patternProperties": {"(?<!x)y": {}}},
])
def test_a_pattern_re2_cannot_run_is_refused_at_submit(client, api_key, unpublished, where):
    schema = {"type": "object", "properties": {"v": {"type": "string", **where}}}
    response = submit(client, api_key, with_schema(schema))
    assert response.status_code == 400
    pattern = where.get("pattern") or next(iter(where["patternProperties"]))
    message = response.get_json()["message"]
    assert f"the pattern {json.dumps(pattern)} at #/properties/v is not supported" in message, message


CATASTROPHIC = f"""
import json
from workers.agent.actions import Outcome
from workers.agent.loop import _structured
subject = "a" * 40 + "!"
for schema in ({{"type": "string", "pattern": {EVIL!r}}},
               {{"type": "object", "patternProperties": {{{EVIL!r}: {{"type": "integer"}}}}}},
               {{"type": "object", "patternProperties": {{{EVIL!r}: {{}}}}, "additionalProperties": False}},
               {{"type": "object", "propertyNames": {{"pattern": {EVIL!r}}}}}):
    print(json.dumps(_structured(Outcome("success", json.dumps(subject if schema["type"] == "string"
                                                             else {{subject: "x"}})), schema)[1]))
"""


def test_a_catastrophic_pattern_is_matched_at_once(client, api_key, unpublished):
    """The issue's `^(a+)+$` against 40 a's and '!': Python's `re` would run for hours; RE2 answers at once.
    (A process of its own, so a regression fails the test by its timeout instead of hanging the run.)"""
    assert submit(client, api_key, with_schema({"type": "string", "pattern": EVIL})).status_code == 202
    done = subprocess.run([sys.executable, "-c", CATASTROPHIC], cwd=ROOT, capture_output=True, text=True,
                          timeout=60, check=True)
    problems = [json.loads(line) for line in done.stdout.splitlines()]
    assert len(problems) == 4
    assert "does not match '^(a+)+$'" in problems[0]
    assert problems[1] is None  # the key does not match: nothing to check under it
    assert "does not match any of the regexes: '^(a+)+$'" in problems[2]
    assert "does not match '^(a+)+$'" in problems[3]
