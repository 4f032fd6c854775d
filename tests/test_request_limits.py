"""Rate limits per API-key plan (429 with headers) and the request body size limit (413)."""
import pytest

from tests.conftest import make_key, submit

CLOUD = {"executionMode": "cloud"}


@pytest.fixture
def tiny_plan(app, monkeypatch):
    plans = {**app.config["RATE_LIMIT_PLANS"], "tiny": {"requests": "3/hour", "polls": "5/hour"}}
    monkeypatch.setitem(app.config, "RATE_LIMIT_PLANS", plans)
    return make_key("tiny-caller", "tiny")


@pytest.fixture(autouse=True)
def unpublished(monkeypatch):
    monkeypatch.setattr("app.dispatch.service.dispatch", lambda task_id, **_: True)


def poll(client, key, request_id):
    return client.get(f"/fast/v2/remote-dispatch/responses/{request_id}", headers={"x-api-key": key})


def test_429_after_the_plans_limit_with_retry_after_and_ratelimit_headers(client, tiny_plan):
    accepted = [submit(client, tiny_plan, {"prompt": "answer hi", **CLOUD}) for _ in range(3)]
    assert [r.status_code for r in accepted] == [202, 202, 202]
    assert [r.headers["X-RateLimit-Remaining"] for r in accepted] == ["2", "1", "0"]
    assert all(r.headers["X-RateLimit-Limit"] == "3" for r in accepted)

    refused = submit(client, tiny_plan, {"prompt": "answer hi", **CLOUD})
    assert refused.status_code == 429
    assert refused.get_json() == {
        "error": "Too Many Requests",
        "message": "Rate limit of the 'tiny' plan exceeded: 3/hour for requests. "
                   "Retry after the number of seconds in the Retry-After header."}
    assert 0 < int(refused.headers["Retry-After"]) <= 3600
    assert refused.headers["X-RateLimit-Limit"] == "3"
    assert refused.headers["X-RateLimit-Remaining"] == "0"
    assert int(refused.headers["X-RateLimit-Reset"]) > 0


def test_submit_cancel_and_list_share_a_budget_polls_have_their_own(client, tiny_plan):
    request_id = submit(client, tiny_plan, {"prompt": "answer hi", **CLOUD}).get_json()["requestId"]
    listed = client.get("/fast/v2/remote-dispatch/responses", headers={"x-api-key": tiny_plan})
    assert listed.status_code == 200
    cancel = client.post(f"/fast/v2/remote-dispatch/responses/{request_id}/cancel",
                         headers={"x-api-key": tiny_plan})
    assert cancel.status_code == 200
    assert submit(client, tiny_plan, {"prompt": "answer hi", **CLOUD}).status_code == 429

    polls = [poll(client, tiny_plan, request_id) for _ in range(5)]
    assert [r.status_code for r in polls] == [200] * 5
    assert polls[0].headers["X-RateLimit-Limit"] == "5"
    assert poll(client, tiny_plan, request_id).status_code == 429


def test_limits_are_counted_per_api_key(client, tiny_plan):
    for _ in range(3):
        submit(client, tiny_plan, {"prompt": "answer hi", **CLOUD})
    assert submit(client, tiny_plan, {"prompt": "answer hi", **CLOUD}).status_code == 429
    other = make_key("another-tiny-caller", "tiny")
    assert submit(client, other, {"prompt": "answer hi", **CLOUD}).status_code == 202


def test_a_key_on_an_unknown_plan_gets_the_default_plan(client, app, monkeypatch):
    plans = {**app.config["RATE_LIMIT_PLANS"], "free": {"requests": "1/hour", "polls": "1/hour"}}
    monkeypatch.setitem(app.config, "RATE_LIMIT_PLANS", plans)
    key = make_key("legacy", "gold-2019")
    assert submit(client, key, {"prompt": "answer hi", **CLOUD}).status_code == 202
    refused = submit(client, key, {"prompt": "answer hi", **CLOUD})
    assert refused.status_code == 429
    assert "'free' plan" in refused.get_json()["message"]


def test_body_over_the_size_limit_is_413(client, app, api_key, monkeypatch):
    monkeypatch.setitem(app.config, "MAX_CONTENT_LENGTH", 1024)
    response = submit(client, api_key, {"prompt": "answer " + "x" * 2000, **CLOUD})
    assert response.status_code == 413
    body = response.get_json()
    assert body["error"] == "Payload Too Large"
    assert body["message"]
    assert set(body) == {"error", "message"}
    assert submit(client, api_key, {"prompt": "answer small", **CLOUD}).status_code == 202


def test_malformed_json_is_still_400(client, api_key):
    response = client.post("/fast/v2/remote-dispatch", data="{bad", content_type="application/json",
                           headers={"x-api-key": api_key})
    assert response.status_code == 400
    assert response.get_json() == {"error": "Invalid Request", "message": "body: Invalid JSON body."}


@pytest.mark.parametrize("plans, default, problem", [
    ({"free": {"requests": "60/minute"}}, "free", "plan 'free' needs a 'polls' limit"),
    ({"free": {"requests": "lots", "polls": "1/second"}}, "free", "plan 'free' needs a 'requests' limit"),
    ({"free": {"requests": "1/second", "polls": "1/second"}}, "gold", "RATE_LIMIT_DEFAULT_PLAN 'gold'"),
])
def test_a_misconfigured_plan_stops_the_app_from_starting(plans, default, problem):
    from flask import Flask

    from app import ratelimits

    bare = Flask("misconfigured")
    bare.config.update(RATE_LIMIT_PLANS=plans, RATE_LIMIT_DEFAULT_PLAN=default)
    with pytest.raises(ValueError, match=problem):
        ratelimits.init_app(bare)
