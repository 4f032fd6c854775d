"""A response schema costs what its size says: bounded at submit, checked on a budget, never re-checked on view."""
import json
import re

import pytest
from sqlalchemy import update

from app import schema_cost
from app.dispatch import service
from app.extensions import db
from app.models import Task
from tests.agent_support import CLOUD, run, stored_task
from tests.conftest import WorkerProcess, make_key, submit, wait_for_status
from tests.test_caller_schemas import unpublished, with_schema  # noqa: F401 (a fixture)
from tests.llm_server import ScriptedModel, tool_call
from tests.test_console import _signed_in_client

pytestmark = pytest.mark.slow


def allof_chain(levels):
    """The issue's schema: each level's allOf names the next twice, so the whole doubles per level (a few KB)."""
    defs = {f"a{i}": {"allOf": [{"$ref": f"#/$defs/a{i + 1}"}, {"$ref": f"#/$defs/a{i + 1}"}]} for i in range(levels)}
    defs[f"a{levels}"] = {"type": "object"}
    return {"$defs": defs, "$ref": "#/$defs/a0"}


TREE = {"$defs": {"node": {"type": "object", "required": ["name"], "properties": {
    "name": {"type": "string"}, "children": {"type": "array", "items": {"$ref": "#/$defs/node"}}}}},
    "$ref": "#/$defs/node"}
UNIQUE = {"type": "array", "uniqueItems": True, "items": {"type": "object"}}


@pytest.fixture(scope="module")
def model():
    server = ScriptedModel()
    yield server
    server.close()


@pytest.fixture(scope="module")
def model_worker(app, model):
    proc = WorkerProcess(env=model.env(), concurrency=1, name="schemas")
    yield proc
    proc.stop()


@pytest.fixture
def no_checks_here(monkeypatch):
    """The web process must show a task without checking anything against its schema."""
    def refuse(*_, **__):
        raise AssertionError("the console checked a value against a schema")
    monkeypatch.setattr("app.json_schemas.validator", refuse)
    monkeypatch.setattr("app.json_schemas.first_error", refuse)


@pytest.mark.parametrize("levels", [18, 26])
def test_an_allof_chain_is_refused_at_submit_naming_the_bound(client, api_key, unpublished, levels):
    schema = allof_chain(levels)
    assert len(json.dumps(schema)) < 3000
    response = submit(client, api_key, with_schema(schema))
    assert response.status_code == 400, response.get_json()
    body = response.get_json()
    assert body["error"] and f"its expanded size is over {schema_cost.MAX_EXPANDED_NODES:,} (subschemas with " \
                             "every $ref" in body["message"] and "the bound on a response schema's size" in body["message"]
    # The console's schema editor asks the same question.
    _signed_in_client(client, api_key)
    form = client.get("/console/tasks/new").get_data(as_text=True)
    token = re.search(r'name="csrf_token" value="([^"]+)"', form)[1]
    check = client.post("/console/schema-check.json",
                        data={"responseFormat": json.dumps(schema), "csrf_token": token}).get_json()
    assert check["valid"] is False and "the bound on a response schema's size" in check["message"]


@pytest.mark.parametrize("schema", [
    {"$ref": "#"},
    {"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"allOf": [{"type": "object"}, {"$ref": "#/$defs/a"}]}},
     "$ref": "#/$defs/a"},
])
def test_a_reference_cycle_without_a_base_case_is_refused_at_submit(client, api_key, unpublished, schema):
    response = submit(client, api_key, with_schema(schema))
    assert response.status_code == 400
    assert "has no base case" in response.get_json()["message"]


def test_a_recursion_that_doubles_per_level_and_other_bounds_are_refused(client, api_key, unpublished):
    twice = {"$defs": {"n": {"allOf": [{"properties": {"x": {"$ref": "#/$defs/n"}}},
                                       {"properties": {"x": {"$ref": "#/$defs/n"}}}]}}, "$ref": "#/$defs/n"}
    # Each level a property whose schema refers to the next level (the body itself nests 64 levels at most).
    levels = schema_cost.MAX_DEPTH // 2 + 5
    deep = {"$defs": {f"d{i}": {"type": "object", "properties": {"x": {"$ref": f"#/$defs/d{i + 1}"}}}
                      for i in range(levels)}, "$ref": "#/$defs/d0"}
    deep["$defs"][f"d{levels}"] = {"type": "object"}
    cases = [(twice, "applied more than once to the same member"),
             (deep, f"deeper than {schema_cost.MAX_DEPTH} subschemas"),
             ({"type": "string", "pattern": "a" * 1001}, "the bound on a response schema's patterns"),
             ({"$ref": "#/$defs/missing"}, "points to nothing in the schema")]
    for schema, words in cases:
        response = submit(client, api_key, with_schema(schema))
        assert response.status_code == 400 and words in response.get_json()["message"], (words, response.get_json())


def test_the_sdk_forms_and_a_tree_are_accepted(client, api_key, unpublished):
    # The SDK's json_schema form, as a pydantic model with a nested optional model renders it.
    pydantic = {"$defs": {"Price": {"properties": {"amount": {"type": "number"}, "currency": {"type": "string"}},
                                    "required": ["amount", "currency"], "title": "Price", "type": "object"}},
                "properties": {"name": {"type": "string"},
                               "price": {"anyOf": [{"$ref": "#/$defs/Price"}, {"type": "null"}], "default": None}},
                "required": ["name"], "title": "Product", "type": "object"}
    legacy = {"prompt": "x", **CLOUD, "responseFormat": {"type": "json_schema",
                                                          "json_schema": {"name": "Product", "schema": pydantic}}}
    assert submit(client, api_key, legacy).status_code == 202
    for schema in (TREE, UNIQUE, allof_chain(10), {"$ref": "https://json-schema.org/draft/2020-12/schema"}):
        assert submit(client, api_key, with_schema(schema)).status_code == 202, schema


def test_a_tree_schema_still_works_and_its_check_is_shown(client, api_key, model, model_worker, no_checks_here):
    tree = {"name": "root", "children": [{"name": "a", "children": [{"name": "a1"}]}, {"name": "b"}]}
    model.script(tool_call("answer", content=tree))
    request_id, body = run(client, api_key, with_schema(TREE, "Describe the tree."))
    assert body["status"] == "success", body["response"]["text"]
    assert body["response"]["output"] == {"type": "structured", "content": tree}
    assert stored_task(request_id).schema_check == {"valid": True, "problem": None}
    _signed_in_client(client, api_key)
    assert "✓ Matches the response schema." in client.get(f"/console/tasks/{request_id}").get_data(as_text=True)


def test_unique_items_over_3000_objects_is_checked_in_linear_time(client, api_key, model, model_worker):
    items = [{"id": i, "tags": [i, str(i)]} for i in range(3000)]
    model.script(tool_call("answer", content=items))
    _, body = run(client, api_key, with_schema(UNIQUE, "List the things."))
    assert body["status"] == "success", body
    assert body["response"]["output"]["content"] == items
    model.script(tool_call("answer", content=items + items[:1]),
                 # Equal under JSON Schema despite the key order and 1 vs 1.0: the repair is refused too.
                 tool_call("answer", content=[{"a": 1, "b": [2]}] + items + [{"b": [2.0], "a": 1}]))
    _, body = run(client, api_key, with_schema(UNIQUE, "List the things."))
    assert body["status"] == "error"
    assert body["response"]["text"] == ("The answer does not match the responseFormat JSON Schema: the array has "
                                        "non-unique elements (items 0 and 3001 are equal).")


def test_a_check_over_its_budget_ends_the_task_and_the_console_shows_the_stored_result(
        client, api_key, model, model_worker, no_checks_here):
    # Under the size bound (an allOf chain of 2^10 per item), but checked for each of 60 items.
    schema = {"$defs": allof_chain(10)["$defs"], "type": "array", "items": {"$ref": "#/$defs/a0"}}
    model.script(tool_call("answer", content=[{}] * 60))
    request_id, body = run(client, api_key, with_schema(schema, "List sixty things."))
    assert body["status"] == "error", body
    assert body["response"]["text"].startswith(
        "The answer could not be checked against the responseFormat JSON Schema: checking the answer against the "
        "schema went over its budget (2 s, 100,000 keyword evaluations).")
    assert len(model.bodies()) == 1  # no repair turn: the model cannot make the check cheaper
    _signed_in_client(client, api_key)
    for path in (f"/console/tasks/{request_id}", f"/console/tasks/{request_id}/state.json"):
        page = client.get(path)
        assert page.status_code == 200
        assert "Not checked against the response schema: checking the answer against the schema went over its " \
               "budget" in page.get_data(as_text=True)


def test_a_schema_stored_before_the_bounds_ends_with_a_clear_error(client, api_key, model, model_worker,
                                                                   monkeypatch):
    """A task accepted before submit refused `{"$ref": "#"}` ends `error` with the reason, not "internal error";
    the console shows an old task's heavy schema without checking it ("not recorded")."""
    publish = service.dispatch
    monkeypatch.setattr("app.dispatch.service.dispatch", lambda task_id, **_: True)
    request_id = submit(client, api_key, with_schema({"type": "object"}, "Answer.")).get_json()["requestId"]
    db.session.execute(update(Task).where(Task.id == request_id).values(
        options={"responseFormat": {"type": "jsonSchema", "jsonSchema": {"$ref": "#"}}}))
    db.session.commit()
    model.script(tool_call("answer", content={"a": 1}))
    publish(request_id, premarked=True)
    body = wait_for_status(client, api_key, request_id)
    assert body["status"] == "error"
    assert "the check recursed too deeply" in body["response"]["text"], body

    old = submit(client, api_key, with_schema({"type": "object"}, "Answer.")).get_json()["requestId"]
    db.session.execute(update(Task).where(Task.id == old).values(
        status="success", options={"responseFormat": {"type": "jsonSchema", "jsonSchema": allof_chain(22)}},
        response={"output": {"type": "structured", "content": {}}, "text": "{}", "structuredOutput": {},
                  "actionTrace": []}))
    db.session.commit()
    monkeypatch.setattr("app.json_schemas.first_error", lambda *_: pytest.fail("checked on view"))
    monkeypatch.setattr("app.json_schemas.validator", lambda *_: pytest.fail("checked on view"))
    _signed_in_client(client, api_key)
    page = client.get(f"/console/tasks/{old}")
    assert page.status_code == 200 and "Schema check: not recorded." in page.get_data(as_text=True)


def wide_allof(size_bytes):
    """The probe's schema: `{"allOf": [{}, {}, ...]}` of about `size_bytes`."""
    return {"allOf": [{}] * (size_bytes // 4)}


@pytest.fixture
def metaschema_walks(monkeypatch):
    """Schemas the 2020-12 metaschema's check was run on (the costly walk the bound must come before)."""
    import jsonschema

    walked, validator_for = [], jsonschema.validators.validator_for

    def recording(schema, *args, **kwargs):
        walked.append(schema)
        return validator_for(schema, *args, **kwargs)
    monkeypatch.setattr("app.json_schemas.jsonschema.validators.validator_for", recording)
    return walked


@pytest.mark.parametrize("size", [80_000, 400_000])
def test_a_wide_schema_is_refused_by_its_written_size_before_the_metaschema_walk(
        client, api_key, unpublished, metaschema_walks, size):
    schema = wide_allof(size)
    assert len(json.dumps(schema)) >= size
    response = submit(client, api_key, with_schema(schema))
    assert response.status_code == 400, response.get_json()
    assert f"it holds over {schema_cost.MAX_WRITTEN_SUBSCHEMAS:,} subschemas" in response.get_json()["message"]
    assert "the bound on a response schema's written size" in response.get_json()["message"]
    assert metaschema_walks == []  # refused before the walk that cost the web process seconds
    # At the bound it is accepted (and walked).
    assert submit(client, api_key, with_schema({"allOf": [{}] * (schema_cost.MAX_WRITTEN_SUBSCHEMAS - 1)})) \
        .status_code == 202


def test_the_consoles_schema_check_is_bounded_and_under_the_keys_rate_limit(client, app, monkeypatch,
                                                                            metaschema_walks):
    plans = {**app.config["RATE_LIMIT_PLANS"], "tiny": {"requests": "3/hour", "polls": "5/hour"}}
    monkeypatch.setitem(app.config, "RATE_LIMIT_PLANS", plans)
    key = make_key("schema-checker", "tiny")
    _signed_in_client(client, key)
    form = client.get("/console/tasks/new").get_data(as_text=True)
    token = re.search(r'name="csrf_token" value="([^"]+)"', form)[1]

    def check(schema):
        return client.post("/console/schema-check.json", data={"responseFormat": json.dumps(schema),
                                                                "csrf_token": token})
    wide = check(wide_allof(80_000)).get_json()
    assert wide["valid"] is False and "the bound on a response schema's written size" in wide["message"]
    assert metaschema_walks == []
    assert check(TREE).get_json()["valid"] is True
    answers = [check(TREE) for _ in range(3)]  # the plan's 3 requests an hour, the form's page included
    refused = answers[-1]
    assert refused.status_code == 429, refused.get_data(as_text=True)
    assert "Rate limit of the 'tiny' plan exceeded: 3/hour for requests" in refused.get_json()["message"]


@pytest.mark.parametrize("additional", [None, False])
def test_one_keyword_over_5000_patterns_and_5000_keys_stops_at_the_budget(additional):
    """The meter ticks inside patternProperties' and additionalProperties' own loops, not only between keywords
    (a schema from elsewhere, or stored before the bounds: submit refuses one this wide)."""
    from app import json_schemas

    schema = {"type": "object", "patternProperties": {f"^p{i}$": {"type": "string"} for i in range(5000)}}
    if additional is not None:
        schema = {"additionalProperties": additional, **schema}
    with pytest.raises(json_schemas.CheckTooCostly, match=re.escape(
            f"went over its budget ({json_schemas.CHECK_SECONDS:g} s, 100,000 keyword evaluations)")):
        json_schemas.first_error(schema, {f"k{i}": "x" for i in range(5000)})


def test_multiple_of_a_fraction_against_a_401_digit_number_is_a_clean_check():
    """What the worker's check of an answer meets (json_schemas.first_error): a result, never an OverflowError that
    ended the task as "internal error"."""
    from app import json_schemas

    huge = 10 ** 400
    assert json_schemas.first_error({"type": "number", "multipleOf": 0.5}, huge) is None
    assert json_schemas.first_error({"multipleOf": 0.3}, huge).message.endswith(
        "(401 digits) is not a multiple of 0.3")
    assert json_schemas.first_error({"multipleOf": 0.5}, float("nan")).message == "nan is not a multiple of 0.5"
    assert json_schemas.first_error({"multipleOf": 0.5}, 7.25).message == "7.25 is not a multiple of 0.5"
