"""POST /fast/v2/remote-dispatch: every field's rule and every error body."""
import pytest

from app.extensions import db
from app.models import BrowserWindow, Task
from tests.conftest import make_key, submit

CLOUD = {"executionMode": "cloud"}


def test_accepts_a_task_with_202_and_stores_it(client, api_key):
    response = submit(client, api_key, {"prompt": "answer hi", **CLOUD})
    assert response.status_code == 202
    request_id = response.get_json()["requestId"]
    task = db.session.get(Task, request_id)
    assert task.status == "pending"
    assert task.agent == "general"
    assert task.execution_mode == "cloud"
    assert task.options["timeZone"] == "America/Los_Angeles"
    assert task.options["clearChat"] is True
    assert task.dispatched_at is not None


def test_operator_prefix_selects_the_web_agent(client, api_key):
    response = submit(client, api_key, {"prompt": "/Operator answer hi", **CLOUD})
    assert db.session.get(Task, response.get_json()["requestId"]).agent == "web"


@pytest.mark.parametrize("headers, message", [
    ({}, "Missing API key: send it in the x-api-key header."),
    ({"x-api-key": "rd_not-a-key"}, "Invalid API key."),
])
def test_unauthorized(client, headers, message):
    response = client.post("/fast/v2/remote-dispatch", json={"prompt": "x", **CLOUD}, headers=headers)
    assert response.status_code == 401
    assert response.get_json() == {"error": "Unauthorized", "message": message}


def test_revoked_key_is_unauthorized(client, app, api_key):
    runner = app.test_cli_runner()
    assert runner.invoke(args=["keys", "revoke", "alice"]).exit_code == 0
    response = submit(client, api_key, {"prompt": "answer hi", **CLOUD})
    assert response.status_code == 401
    assert response.get_json() == {"error": "Unauthorized", "message": "Invalid API key."}


BAD_BODIES = [
    ({"executionMode": "cloud"}, "prompt: Missing data for required field."),
    ({"prompt": "", **CLOUD}, "prompt: prompt must not be empty."),
    ({"prompt": 5, **CLOUD}, "prompt: Not a valid string."),
    ({"prompt": "x", "executionMode": "desktop"},
     "executionMode: Must be one of: client, cloud, cloud_browser."),
    ({"prompt": "x"}, "browserWindowId: browserWindowId is required when executionMode is 'client' "
                      "(or use executionMode 'cloud' or 'cloud_browser')."),
    ({"prompt": "x", "clearChat": "maybe", **CLOUD}, "clearChat: Not a valid boolean."),
    ({"prompt": "x", "timeZone": "Mars/Olympus", **CLOUD},
     "timeZone: 'Mars/Olympus' is not an IANA time zone (e.g. Europe/Paris)."),
    ({"prompt": "x", "callbackUrl": "http://example.com/hook", **CLOUD},
     "callbackUrl: callbackUrl must be an https:// URL."),
    ({"prompt": "x", "callbackUrl": "not a url", **CLOUD}, "callbackUrl: callbackUrl must be an https:// URL."),
    ({"prompt": "x", "responseFormat": {"type": "xml", "jsonSchema": {}}, **CLOUD},
     "responseFormat: type: type must be 'jsonSchema'."),
    ({"prompt": "x", "responseFormat": {"type": "jsonSchema"}, **CLOUD},
     "responseFormat: jsonSchema: Missing data for required field."),
    ({"prompt": "x", "responseFormat": {"type": "jsonSchema", "jsonSchema": {"type": "banana"}}, **CLOUD},
     "responseFormat: jsonSchema: not a valid JSON Schema: 'banana' is not valid under any of the given schemas."),
    ({"prompt": "x", "attachments": [{"name": "a.txt"}], **CLOUD},
     "attachments: 0: key: Missing data for required field."),
    ({"prompt": "x", "secretVariables": {"PASSWORD": 42}, **CLOUD},
     "secretVariables: PASSWORD: value: Not a valid string."),
    ({"prompt": "x", "wait": "soon", **CLOUD}, "wait: Not a valid boolean."),
    # A misspelt field is named, with the field meant (issue 35: "promt" was accepted and the prompt missing).
    ({"promt": "answer hi", **CLOUD}, "promt: unknown field; did you mean 'prompt'?"),
    ({"prompt": "x", "callbackURL": "https://example.com/hook", **CLOUD},
     "callbackURL: unknown field; did you mean 'callbackUrl'?"),
    ({"prompt": "x", "secretVariable": {"PASSWORD": "p"}, **CLOUD},
     "secretVariable: unknown field; did you mean 'secretVariables'?"),
]


@pytest.mark.parametrize("body, message", BAD_BODIES)
def test_invalid_request(client, api_key, body, message):
    response = submit(client, api_key, body)
    assert response.status_code == 400
    assert response.get_json() == {"error": "Invalid Request", "message": message}


def test_malformed_json_is_400(client, api_key):
    response = client.post("/fast/v2/remote-dispatch", data="{bad", content_type="application/json",
                           headers={"x-api-key": api_key})
    assert response.status_code == 400
    assert response.get_json() == {"error": "Invalid Request", "message": "body: Invalid JSON body."}


def test_disallowed_callback_headers_are_422_and_named(client, api_key):
    response = submit(client, api_key, {
        "prompt": "x", **CLOUD, "callbackUrl": "https://example.com/hook",
        "callbackHeaders": {"Authorization": "Bearer t", "X-Trace": "1", "Cookie": "a=b", "Host": "h"}})
    assert response.status_code == 422
    assert response.get_json() == {
        "error": "Invalid Callback Headers",
        "message": "callbackHeaders: header(s) 'Cookie', 'Host' not allowed: only Authorization and "
                   "headers starting with x- may be sent."}


def test_allowed_callback_headers_are_accepted(client, api_key):
    response = submit(client, api_key, {
        "prompt": "x", **CLOUD, "callbackUrl": "https://example.com/hook",
        "callbackHeaders": {"authorization": "Bearer t", "x-custom": "1", "X-Other": "2"}})
    assert response.status_code == 202


def test_unknown_browser_window_is_404(client, api_key):
    response = submit(client, api_key, {"prompt": "x", "browserWindowId": "nope"})
    assert response.status_code == 404
    assert response.get_json() == {"error": "Browser Window Not Found",
                                   "message": "Browser window 'nope' is not available to this API key."}


def test_another_keys_window_is_404_and_own_window_is_accepted(client, api_key, other_key):
    from app.crypto import hash_key
    from app.models import ApiKey
    from sqlalchemy import select

    owner = db.session.execute(select(ApiKey).where(ApiKey.key_hash == hash_key(other_key))).scalar_one()
    db.session.add(BrowserWindow(id="win-bob", api_key_id=owner.id))
    db.session.commit()
    assert submit(client, api_key, {"prompt": "x", "browserWindowId": "win-bob"}).status_code == 404
    response = submit(client, other_key, {"prompt": "x", "browserWindowId": "win-bob"})
    assert response.status_code == 202
    assert db.session.get(Task, response.get_json()["requestId"]).browser_window_id == "win-bob"


def test_previous_request_must_belong_to_the_same_key(client, api_key, other_key):
    theirs = submit(client, other_key, {"prompt": "answer a", **CLOUD}).get_json()["requestId"]
    response = submit(client, api_key, {"prompt": "answer b", "previousRequestId": theirs, **CLOUD})
    assert response.status_code == 400
    assert response.get_json() == {
        "error": "Invalid Request",
        "message": f"previousRequestId '{theirs}' is not a request made with this API key."}
    mine = submit(client, api_key, {"prompt": "answer a", **CLOUD}).get_json()["requestId"]
    assert submit(client, api_key, {"prompt": "b", "previousRequestId": mine, **CLOUD}).status_code == 202


def test_unknown_fields_are_ignored_and_sdk_aliases_accepted(client, api_key):
    import io

    f1 = client.post("/fast/v2/files", headers={"x-api-key": api_key}, content_type="multipart/form-data",
                     data={"file": (io.BytesIO(b"hi"), "f1.txt")}).get_json()["key"]
    response = submit(client, api_key, {
        "prompt": "answer hi", **CLOUD, "somethingNew": {"a": 1}, "saveScreenshots": True,
        "attachment": {"key": f1}, "reasoningMode": "fast",
        "responseFormat": {"type": "json_schema",
                           "json_schema": {"name": "R", "schema": {"type": "object"}}},
        "mcpServers": [{"url": "https://mcp.example.com", "label": None, "description": None,
                        "authentication": None, "selectedTools": None}],
        # What the narada SDK sends that this service does not use.
        "executionTraceContext": {"t": 1}, "userResourceCredentials": {}, "vectorStores": [], "criticContext": "c",
    })
    assert response.status_code == 202
    task = db.session.get(Task, response.get_json()["requestId"])
    assert task.options["generateGif"] is True
    assert task.options["attachments"] == [{"key": f1}]
    assert task.options["responseFormat"] == {"type": "jsonSchema", "jsonSchema": {"type": "object"}}
    assert "somethingNew" not in task.options


def test_session_id_is_an_alias_of_browser_window_id(client, api_key):
    response = submit(client, api_key, {"prompt": "x", "sessionId": "w-1"})
    assert response.status_code == 404  # resolved as browserWindowId, which does not exist
    assert response.get_json()["error"] == "Browser Window Not Found"


def test_secrets_and_callback_credentials_are_encrypted_at_rest(client, api_key):
    response = submit(client, api_key, {
        "prompt": "answer ${PW}", **CLOUD, "secretVariables": {"PW": "hunter2"},
        "callbackUrl": "https://example.com/h", "callbackSecret": "s3cret",
        "callbackHeaders": {"Authorization": "Bearer tok"}})
    task = db.session.get(Task, response.get_json()["requestId"])
    stored = " ".join(str(v) for v in (task.secrets_sealed, task.callback_sealed, task.options))
    for plain in ("hunter2", "s3cret", "Bearer tok"):
        assert plain not in stored


def test_api_keys_are_stored_hashed(api_key):
    from app.models import ApiKey
    from sqlalchemy import select

    stored = db.session.execute(select(ApiKey.key_hash, ApiKey.prefix)).all()
    assert all(api_key not in row.key_hash for row in stored)
    assert make_key("carol") != api_key


@pytest.mark.parametrize("body, field", [
    ({"prompt": "answer a\u0000b", **CLOUD}, "prompt"),
    ({"prompt": "x", "inputVariables": {"k": ["ok", "n\u0000l"]}, **CLOUD}, "inputVariables"),
    ({"prompt": "x", "secretVariables": {"P\u0000W": "v"}, **CLOUD}, "secretVariables"),
])
def test_nul_characters_are_refused_with_400(client, api_key, body, field):
    response = submit(client, api_key, body)
    assert response.status_code == 400
    assert response.get_json() == {"error": "Invalid Request",
                                   "message": f"{field}: must not contain NUL characters (\\u0000)."}
