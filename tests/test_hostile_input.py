"""Inputs a careless or hostile caller sends get a clear 4xx `{error, message}`, never a 500."""
import json
import socket

import pytest
import requests

from tests.conftest import make_key, submit, wait_until
from tests.processes import WebProcess

CLOUD = {"executionMode": "cloud"}
TASK_ROUTES = [("get", "/fast/v2/remote-dispatch/responses/{}"),
               ("post", "/fast/v2/remote-dispatch/responses/{}/input"),
               ("post", "/fast/v2/remote-dispatch/responses/{}/cancel"),
               ("get", "/fast/v2/remote-dispatch/responses/{}/webhooks"),
               ("post", "/fast/v2/remote-dispatch/responses/{}/webhooks/redeliver")]


@pytest.fixture(autouse=True)
def unpublished(monkeypatch):
    monkeypatch.setattr("app.dispatch.service.dispatch", lambda task_id, **_: True)


def post_raw(client, key, data, content_type="application/json", path="/fast/v2/remote-dispatch"):
    return client.post(path, data=data, content_type=content_type, headers={"x-api-key": key})


def error_of(response, status):
    text = response.get_data(as_text=True) if hasattr(response, "get_data") else response.text
    assert response.status_code == status, (response.status_code, text[:500])
    body = json.loads(text)
    assert set(body) == {"error", "message"} and all(isinstance(v, str) and v for v in body.values()), body
    return body


def nested(depth, leaf='"x"'):
    return "[" * depth + leaf + "]" * depth


@pytest.mark.parametrize("depth", [100, 500, 10_000, 100_000])
def test_deeply_nested_json_is_400(client, api_key, depth):
    body = '{"prompt": "answer hi", "executionMode": "cloud", "inputVariables": {"v": %s}}' % nested(depth)
    message = error_of(post_raw(client, api_key, body), 400)["message"]
    assert message == "body: JSON nested deeper than 64 levels."


WINDOW_ID = "00000000-0000-4000-8000-000000000000"
OTHER_JSON_ROUTES = ["/fast/v2/browser-windows", "/fast/v2/browser-windows/poll", "/fast/v2/extension-actions",
                     f"/fast/v2/browser-windows/commands/{WINDOW_ID}/result",
                     "/fast/v2/cloud-browser/stop-cloud-browser-session",
                     "/fast/v2/cloud-browser/generate-cdp-auth-headers",
                     "/fast/v2/cloud-browser/create-and-initialize-cloud-browser-session"]


@pytest.mark.parametrize("path", OTHER_JSON_ROUTES)
def test_every_route_refuses_deep_nesting_the_way_submit_does(client, api_key, path):
    message = error_of(post_raw(client, api_key, '{"browserWindowIds": %s}' % nested(1_000), path=path),
                       400)["message"]
    assert message == "body: JSON nested deeper than 64 levels."
    assert error_of(post_raw(client, api_key, '{"label": NaN}', path=path), 400)["message"].startswith(
        "body: Invalid JSON body: ")


def test_nesting_within_the_limit_is_accepted(client, api_key):
    body = '{"prompt": "answer hi", "executionMode": "cloud", "inputVariables": {"v": %s}}' % nested(60)
    assert post_raw(client, api_key, body).status_code == 202


@pytest.mark.parametrize("value", ["NaN", "Infinity", "-Infinity", "1e999", "-1e999", "1" * 5000])
@pytest.mark.parametrize("where", ["top", "nested"])
def test_numbers_json_and_postgres_cannot_hold_are_400(client, api_key, value, where):
    if where == "top":
        body = '{"prompt": "answer hi", "executionMode": "cloud", "clearChat": %s}' % value
    else:
        body = '{"prompt": "answer hi", "executionMode": "cloud", "inputVariables": {"a": [{"b": %s}]}}' % value
    message = error_of(post_raw(client, api_key, body), 400)["message"]
    assert message.startswith("body: Invalid JSON body: ")


@pytest.mark.parametrize("text", [r"\ud800", r"answer \udfff", r"x\ud800y"])
@pytest.mark.parametrize("field", ["prompt", "inputVariables"])
def test_lone_surrogates_are_400(client, api_key, text, field):
    value = f'"{text}"' if field == "prompt" else '{"k": "%s"}' % text
    body = '{"prompt": "answer hi", "executionMode": "cloud", "%s": %s}' % (field, value)
    assert "surrogate" in error_of(post_raw(client, api_key, body), 400)["message"]


def test_a_surrogate_in_a_key_is_400(client, api_key):
    body = r'{"prompt": "answer hi", "executionMode": "cloud", "inputVariables": {"\udc00": "v"}}'
    assert "surrogate" in error_of(post_raw(client, api_key, body), 400)["message"]


def test_a_proper_surrogate_pair_is_text(client, api_key):
    body = r'{"prompt": "answer \ud83d\ude00", "executionMode": "cloud"}'
    assert post_raw(client, api_key, body).status_code == 202


@pytest.mark.parametrize("method, route", TASK_ROUTES)
@pytest.mark.parametrize("segment", ["%00", "a%00b", "%ED%A0%80", "%F0%9F%98%80", "x" * 300])
def test_hostile_request_ids_are_404_on_every_task_route(client, api_key, method, route, segment):
    response = getattr(client, method)(route.format(segment), headers={"x-api-key": api_key},
                                       json={"answer": "yes"} if route.endswith("/input") else None)
    if "%00" in segment:  # no path of any route may hold NUL (app.parsing.refuse_nul_characters)
        assert error_of(response, 400)["message"] == "path: must not contain NUL characters (\\u0000)."
    else:
        assert error_of(response, 404)["error"] == "Request Not Found"


@pytest.mark.parametrize("cursor", ["1.a\x00b", "1.%ff", "x" * 400, "abc", "12.not-a-uuid",
                                    "12345678901234567.00000000-0000-0000-0000-000000000000",
                                    "WyIyMDI2LTAxLTAxVDAwOjAwOjAwKzAwOjAwIiwgImFceDAwYiJd"])
def test_a_forged_cursor_is_400(client, api_key, cursor):
    response = client.get("/fast/v2/remote-dispatch/responses", query_string={"cursor": cursor},
                          headers={"x-api-key": api_key})
    message = error_of(response, 400)["message"]
    assert message == "query: cursor: must not contain NUL characters (\\u0000)." if "\x00" in cursor else (
        "not a cursor" in message), message


def test_any_cursor_of_the_documented_form_is_a_position(client, api_key):
    ids = [submit(client, api_key, {"prompt": f"answer {n}", **CLOUD}).get_json()["requestId"] for n in range(2)]
    everything = "9999999999999999.ffffffff-ffff-ffff-ffff-ffffffffffff"
    nothing = "0.00000000-0000-0000-0000-000000000000"
    for cursor, expected in [(everything, ids[::-1]), (nothing, [])]:
        response = client.get("/fast/v2/remote-dispatch/responses", query_string={"cursor": cursor},
                              headers={"x-api-key": api_key})
        assert [task["requestId"] for task in response.get_json()["responses"]] == expected


def test_an_empty_cursor_is_the_first_page(client, api_key):
    request_id = submit(client, api_key, {"prompt": "answer hi", **CLOUD}).get_json()["requestId"]
    response = client.get("/fast/v2/remote-dispatch/responses?cursor=", headers={"x-api-key": api_key})
    assert response.status_code == 200
    assert [task["requestId"] for task in response.get_json()["responses"]] == [request_id]


@pytest.mark.parametrize("content_type", ["text/plain", "application/x-www-form-urlencoded", None])
def test_a_body_that_is_not_declared_json_is_415_and_says_so(client, api_key, content_type):
    response = client.post("/fast/v2/remote-dispatch", data=json.dumps({"prompt": "answer hi", **CLOUD}),
                           headers={"x-api-key": api_key, **({"Content-Type": content_type} if content_type else {})})
    assert error_of(response, 415)["message"] == (
        "Send the body as JSON with the header Content-Type: application/json.")


@pytest.mark.parametrize("body, kind", [("[]", "an array"), ('[{"prompt": "answer hi"}]', "an array"),
                                        ('"answer hi"', "a single value"), ("42", "a single value"),
                                        ("null", "a single value")])
@pytest.mark.parametrize("path", ["/fast/v2/remote-dispatch",
                                  "/fast/v2/remote-dispatch/generate-file-upload-presigned-post"])
def test_a_body_that_is_not_an_object_is_400_and_says_so(client, api_key, body, kind, path):
    message = error_of(post_raw(client, api_key, body, path=path), 400)["message"]
    assert message == f'body: must be a JSON object ({{"name": value, ...}}), not {kind}.'


def test_invalid_utf8_is_400(client, api_key):
    response = post_raw(client, api_key, b'{"prompt": "answer \xff\xfe"}')
    assert "UTF-8" in error_of(response, 400)["message"]


# The real web server (gunicorn) for what only it does: chunked bodies and over-long URLs.

@pytest.fixture(scope="module")
def web(app):
    proc = WebProcess({"MAX_BODY_BYTES": "65536"})
    yield proc
    proc.stop()


def chunks(total, size=8192):
    sent = 0
    while sent < total:
        part = min(size, total - sent)
        yield b'{"prompt": "' if sent == 0 else b"a" * part
        sent += part


def test_an_oversized_chunked_body_is_413(web):
    key = make_key("chunky")
    response = requests.post(web.base + "/fast/v2/remote-dispatch", data=chunks(1024 * 1024),
                             headers={"x-api-key": key, "Content-Type": "application/json"}, timeout=30)
    assert error_of(response, 413)["error"] == "Payload Too Large"


def test_a_small_chunked_body_is_read(web):
    key = make_key("chunky")
    body = json.dumps({"prompt": "answer hi", **CLOUD}).encode()
    response = requests.post(web.base + "/fast/v2/remote-dispatch", data=iter([body[:10], body[10:]]),
                             headers={"x-api-key": key, "Content-Type": "application/json"}, timeout=30)
    assert response.status_code == 202, response.text


@pytest.mark.parametrize("length", [9000, 100_000])
def test_an_over_long_url_is_414_json(web, length):
    response = requests.get(web.base + "/fast/v2/remote-dispatch/responses?cursor=" + "a" * length,
                            headers={"x-api-key": "whatever"}, timeout=30)
    assert response.headers["Content-Type"] == "application/json"
    body = error_of(response, 414)
    assert body == {"error": "URI Too Long",
                    "message": "The URL is too long: the request line may be at most 8190 bytes."}


def test_a_malformed_request_line_from_gunicorn_is_json_too(web):
    host, port = web.base.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nBad Header Name: 1\r\n\r\n")
        reply = b""
        while chunk := sock.recv(65536):
            reply += chunk
    head, _, body = reply.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 400 "), head
    assert b"Content-Type: application/json" in head
    parsed = json.loads(body)
    assert set(parsed) == {"error", "message"} and parsed["error"] == "Bad Request"


# Property-based: arbitrary JSON values, strings and path segments on every route.

from urllib.parse import quote  # noqa: E402

from hypothesis import HealthCheck, given, settings, strategies as st  # noqa: E402

ANY_TEXT = st.text(st.characters(exclude_categories=()), max_size=40)  # surrogates and NUL included
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | ANY_TEXT,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(ANY_TEXT, children, max_size=4),
    max_leaves=12)
SUBMIT_FIELDS = ["browserWindowId", "clearChat", "previousRequestId", "generateGif", "saveScreenshots",
                 "responseFormat", "attachments", "attachment", "timeZone", "mcpServers", "secretVariables",
                 "inputVariables", "chatHistory", "additionalContext", "reasoningMode", "callbackUrl",
                 "callbackSecret", "callbackHeaders", "wait", "cloudBrowserSessionName", "sessionId"]
NEAR_SUBMITS = st.fixed_dictionaries(
    {"prompt": ANY_TEXT | JSON_VALUES,
     "executionMode": st.sampled_from(["cloud", "cloud_browser", "client"]) | JSON_VALUES},
    optional={name: JSON_VALUES for name in SUBMIT_FIELDS})
BODIES = JSON_VALUES | NEAR_SUBMITS | st.fixed_dictionaries(
    {}, optional={"answer": ANY_TEXT | JSON_VALUES, "inputId": JSON_VALUES, "webhookId": JSON_VALUES,
                  "filename": ANY_TEXT | JSON_VALUES})
SEGMENTS = ANY_TEXT.map(lambda s: quote(s.encode("utf-8", "surrogatepass"), safe=""))
FUZZ = settings(max_examples=int(__import__("os").environ.get("FUZZ_EXAMPLES", "120")), deadline=None,
                suppress_health_check=list(HealthCheck))


def encoded(value):
    """JSON text as a careless client writes it: NaN and Infinity as Python prints them, surrogates escaped."""
    return json.dumps(value, allow_nan=True)


def assert_clean(response):
    text = response.get_data(as_text=True)
    assert response.status_code < 500, (response.status_code, text[:300])
    if response.status_code >= 400:
        body = json.loads(text)
        extra = {"requestId"} if response.status_code == 408 else set()  # wait timeout names the task
        assert set(body) - extra == {"error", "message"}, body
        assert isinstance(body["error"], str) and isinstance(body["message"], str), body


@pytest.fixture
def fuzz_key(app, monkeypatch):
    monkeypatch.setitem(app.config, "WAIT_TIMEOUT_SECONDS", 0.05)  # fuzzed `wait: true` must not block
    return make_key("fuzz", "dev")


@given(body=BODIES)
@FUZZ
def test_any_json_body_to_submit_gets_no_5xx(client, fuzz_key, body):
    assert_clean(post_raw(client, fuzz_key, encoded(body)))


@given(path=st.sampled_from(["/fast/v2/remote-dispatch/responses/{}/input",
                             "/fast/v2/remote-dispatch/responses/{}/webhooks/redeliver",
                             "/fast/v2/remote-dispatch/generate-file-upload-presigned-post",
                             "/fast/v2/remote-dispatch"]),
       segment=SEGMENTS, body=BODIES, content_type=st.sampled_from(["application/json", "text/plain"]))
@FUZZ
def test_any_body_to_any_json_route_gets_no_5xx(client, fuzz_key, path, segment, body, content_type):
    assert_clean(post_raw(client, fuzz_key, encoded(body), content_type=content_type, path=path.format(segment)))


WINDOW_BODIES = BODIES | st.fixed_dictionaries({}, optional={
    "label": JSON_VALUES, "browserWindowIds": JSON_VALUES | st.lists(ANY_TEXT, max_size=3), "running": JSON_VALUES,
    "wait": st.just(0) | JSON_VALUES, "status": st.sampled_from(["success", "error"]) | JSON_VALUES,
    "data": JSON_VALUES, "error": JSON_VALUES, "browserWindowId": ANY_TEXT | JSON_VALUES,
    "actionExecutionId": ANY_TEXT | JSON_VALUES, "timeout": st.just(1) | JSON_VALUES,
    "action": JSON_VALUES | st.fixed_dictionaries({"name": st.sampled_from(["go_to_url", "get_url"]) | JSON_VALUES},
                                                  optional={"url": ANY_TEXT | JSON_VALUES}),
    "session_id": ANY_TEXT | JSON_VALUES, "cdp_websocket_url": ANY_TEXT | JSON_VALUES})


@given(path=st.sampled_from(OTHER_JSON_ROUTES[:-1] + ["/fast/v2/browser-windows/commands/{}/result"]),
       segment=SEGMENTS, body=WINDOW_BODIES)
@FUZZ
def test_any_body_to_the_window_and_session_routes_gets_no_5xx(client, fuzz_key, path, segment, body):
    assert_clean(post_raw(client, fuzz_key, encoded(body), path=path.format(segment)))


@given(route=st.sampled_from(TASK_ROUTES), segment=SEGMENTS)
@FUZZ
def test_any_path_segment_on_task_routes_gets_no_5xx(client, fuzz_key, route, segment):
    method, path = route
    assert_clean(getattr(client, method)(path.format(segment), headers={"x-api-key": fuzz_key}))


@given(query=st.dictionaries(st.sampled_from(["status", "limit", "cursor", "other"]), ANY_TEXT, max_size=4))
@FUZZ
def test_any_list_query_gets_no_5xx(client, fuzz_key, query):
    query_string = "&".join(f"{quote(k)}={quote(v.encode('utf-8', 'surrogatepass'), safe='')}"
                            for k, v in query.items())
    assert_clean(client.get("/fast/v2/remote-dispatch/responses?" + query_string,
                            headers={"x-api-key": fuzz_key}))


UPLOAD_TEXT = st.text(max_size=40)  # multipart cannot carry surrogates


@given(path=st.sampled_from(["/fast/v2/files", "/fast/v2/files/presigned-upload"]),
       form=st.dictionaries(st.sampled_from(["key", "policy", "signature", "x-amz-signature", "other"]),
                            UPLOAD_TEXT, max_size=4),
       filename=UPLOAD_TEXT, content=st.binary(max_size=200), with_file=st.booleans())
@FUZZ
def test_any_upload_gets_no_5xx(client, fuzz_key, path, form, filename, content, with_file):
    import io

    data = dict(form)
    if with_file:
        data["file"] = (io.BytesIO(content), filename)
    assert_clean(client.post(path, data=data, content_type="multipart/form-data",
                             headers={"x-api-key": fuzz_key}))


def test_tokens_in_urls_are_not_written_to_the_access_log(app, web):
    """A live view's token (and a kept session's login or file link) is the whole permission: gunicorn's access
    log shows the request with "[token]" in its place."""
    from app.live import service as live

    with app.test_request_context():
        url = live._live_url({"k": 1, "s": "session"}, "view", "a person")["liveUrl"]
    token = url.rsplit("/", 1)[1]
    for path in (f"/live/{token}", f"/live/{token}/socket", f"/fast/v2/cloud-browser/login/{token}",
                 f"/fast/v2/cloud-browser/replay/file/{token}", f"/healthz?token={token}"):
        requests.get(web.base + path, headers={"Referer": f"{web.base}/live/{token}"}, timeout=30)
    # Each gunicorn worker writes its own lines, so they may land in any order: wait for all five.
    lines = ('"GET /live/[token] HTTP/1.1"', '"GET /live/[token]/socket HTTP/1.1"',
             "/fast/v2/cloud-browser/login/[token]", "/fast/v2/cloud-browser/replay/file/[token]",
             "/healthz?token=[token]")
    wait_until(lambda: all(line in web.output() for line in lines), "the five access log lines, each with [token]")
    log = web.output()
    assert token not in log and token[:20] not in log


# A NUL byte anywhere a caller can put one (a path parameter, a query string, a JSON body, a form), on every route
# the app has: the URL map is walked, so a route added later is covered without being named here.

NUL_TEXT = "a\x00b"
SOME_ID = "00000000-0000-4000-8000-000000000000"


def _spec():
    from app.api import api

    return api.spec.to_dict()


def _resolved(spec, schema):
    while schema and "$ref" in schema:
        schema = spec["components"]["schemas"][schema["$ref"].rsplit("/", 1)[1]]
    return schema or {}


def _spec_names(spec):
    """Every query parameter and body field any operation declares (sent to every route: unknown ones are ignored)."""
    query, body = {"token", "expires", "signature", "name", "key", "id"}, set()
    for operations in spec["paths"].values():
        for operation in operations.values():
            if not isinstance(operation, dict):
                continue
            query.update(p["name"] for p in operation.get("parameters", []) if p.get("in") == "query")
            content = (operation.get("requestBody") or {}).get("content", {})
            for media in content.values():
                body.update(_resolved(spec, media.get("schema")).get("properties", {}))
    return sorted(query), sorted(body)


def _routes(app):
    for rule in app.url_map.iter_rules():
        for method in sorted(rule.methods - {"HEAD", "OPTIONS"}):
            yield rule, method


def _with_params(rule, value):
    import re

    return re.sub(r"<(?:[^:<>]+:)?[^<>]+>", value, rule.rule)


def test_a_nul_byte_anywhere_on_any_route_is_a_4xx_error(app, client):
    from urllib.parse import urlencode

    key = make_key("nul", "dev")
    headers = {"x-api-key": key}
    query_names, body_names = _spec_names(_spec())
    query = urlencode({name: NUL_TEXT for name in query_names})
    failures, tried = [], 0
    for rule, method in _routes(app):
        requests_ = []
        if rule.arguments:
            requests_.append(("path", _with_params(rule, "a%00b"), {}))
            requests_.append(("path", _with_params(rule, "%00"), {}))
        plain = _with_params(rule, SOME_ID)
        requests_.append(("query", plain + "?" + query, {}))
        if method in ("POST", "PUT", "PATCH", "DELETE"):
            requests_.append(("json", plain, {"json": {name: NUL_TEXT for name in body_names}}))
            requests_.append(("form", plain, {"data": {name: NUL_TEXT for name in body_names}}))
        for kind, url, extra in requests_:
            tried += 1
            response = client.open(url, method=method, headers=headers, **extra)
            text = response.get_data(as_text=True)
            # A path, a query or a form with NUL is refused before any route reads it; a JSON body's known fields
            # are refused by its schema, its unknown ones ignored (the route may then answer as it would anyway).
            # The console (a person's browser) shows its errors as its own HTML error page, with the same message.
            refused = 400 <= response.status_code < 500 if kind != "json" else response.status_code != 500
            console = rule.rule.startswith("/console/")
            said = ("must not contain NUL characters" in text if kind != "json" else True) if console else (
                _is_error_body(text))
            if rule.rule == "/mcp" and kind == "json":  # MCP's errors are JSON-RPC's (docs/mcp-server.md)
                said = said or ('"jsonrpc": "2.0"' in text and '"error"' in text)
            if not refused or (response.status_code >= 400 and not said):
                failures.append((method, rule.rule, kind, response.status_code, text[:120]))
    assert tried > 150
    assert not failures, "\n".join(map(str, failures))


def _is_error_body(text):
    try:
        body = json.loads(text)
    except ValueError:
        return False
    return isinstance(body, dict) and {"error", "message"} <= set(body) and all(
        isinstance(body[k], str) and body[k] for k in ("error", "message"))


# Every pattern a schema checks a text against is matched in full: `$` also matches before a final "\n", so
# `re.match("^name$", "name\n")` accepts the newline (a profile named "work\n" was stored and listed).

def _schema_classes():
    import marshmallow

    import app as package

    seen, stack = [], list(marshmallow.Schema.__subclasses__())
    while stack:
        cls = stack.pop()
        stack.extend(cls.__subclasses__())
        if cls.__module__.startswith(package.__name__ + ".") and cls not in seen:
            seen.append(cls)
    return seen


def _patterned_fields(app):
    """(schema class, field name, pattern) for every field a Regexp validator or a documented pattern constrains."""
    from marshmallow import validate

    found = []
    for cls in _schema_classes():
        for name, field in cls._declared_fields.items():
            patterns = [v.regex.pattern for v in field.validators if isinstance(v, validate.Regexp)]
            patterns += [field.metadata["pattern"]] if isinstance(field.metadata.get("pattern"), str) else []
            found += [(cls, field.data_key or name, pattern) for pattern in patterns]
    return found


def _field_errors(cls, name, value):
    from marshmallow import ValidationError

    try:
        cls().load({name: value}, partial=True)
    except ValidationError as exc:
        return exc.messages.get(name)
    return None


def test_every_pattern_checked_by_a_schema_refuses_a_trailing_newline(app):
    from hypothesis import find, settings as hsettings
    from hypothesis.errors import NoSuchExample

    checked, accepted_none = [], []
    for cls, name, pattern in _patterned_fields(app):
        ecma = pattern.replace("\\Z", "$")  # the document's (ECMA) pattern has no \Z; Python's fullmatch is the rule
        try:  # a value the field accepts: then the same value with a newline after it must be refused
            value = find(st.from_regex(ecma, fullmatch=True).filter(lambda v: "\n" not in v and "\x00" not in v),
                         lambda v: _field_errors(cls, name, v) is None, settings=hsettings(max_examples=200))
        except NoSuchExample:
            accepted_none.append((cls.__name__, name))
            continue
        checked.append((cls.__name__, name))
        assert _field_errors(cls, name, value + "\n"), (cls.__name__, name, value)
    assert ("ProfileOptionSchema", "name") in checked and ("CustomHeaderSchema", "key") in checked, (
        checked, accepted_none)


@pytest.mark.parametrize("headers", [{"x-trace\n": "1"}, {"Authorization\n": "Bearer t"}])
def test_a_callback_header_name_ending_in_a_newline_is_refused(client, api_key, headers):
    body = {"prompt": "answer hi", "executionMode": "cloud", "callbackUrl": "https://example.com/hook",
            "callbackHeaders": headers}
    assert error_of(submit(client, api_key, body), 422)["error"] == "Invalid Callback Headers"


def test_a_profile_name_ending_in_a_newline_is_refused_and_not_stored(client, api_key):
    body = {"prompt": "/Operator answer hi", "executionMode": "cloud_browser",
            "profile": {"name": "work\n", "persist": True}}
    assert error_of(submit(client, api_key, body), 400)["message"].startswith("profile: name: a profile name has")
    listed = client.get("/fast/v2/profiles", headers={"x-api-key": api_key}).get_json()
    assert listed == {"profiles": []}
