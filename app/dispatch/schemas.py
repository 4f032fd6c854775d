"""Request schemas of the remote-dispatch endpoints (submit, answer, list) and the few responses of their own; what
other blueprints share is below them (app/schema_base.py, app/browser_options.py, app/task_results.py)."""
import difflib
import re

import jsonschema
import marshmallow as ma
from flask import current_app
from marshmallow import ValidationError, fields, pre_load, validate, validates, validates_schema

from .. import json_schemas, schema_cost, totp
from ..api import ErrorSchema
from ..browser_options import ZONES, BrowserSettingsSchema, ProfileOptionSchema, ProxySchema
from ..egress.policy import UnsafeUrl, host_pattern
from ..schema_base import CURSOR_PATTERN, HEADER_VALUE, HTTPS_URL, Cursor, LenientSchema, StrictBoolean, check_outbound
from ..scripts.format import ELEMENTS, RECORDED
from ..task_results import STATUSES, TaskResultSchema
from .mcp_schemas import McpServerSchema, mcp_namespace

EXECUTION_MODES = ("client", "cloud", "cloud_browser")
CALLBACK_HEADER = re.compile(r"^(authorization|x-[!#$%&'*+.^_`|~0-9a-z-]+)$", re.IGNORECASE)

# Submit fields that are not ours by name but are sent: the narada SDK's and older clients' names for fields of
# ours (SubmitSchema._accept_sdk_aliases), and fields the SDK sends that this service does not use.
SENT_BY_CLIENTS = frozenset({"saveScreenshots", "attachment", "sessionId", "executionTraceContext",
                             "userResourceCredentials", "vectorStores", "criticContext"})


class AttachmentSchema(LenientSchema):
    key = fields.String(required=True, validate=validate.Length(min=1))


class ResponseFormatSchema(LenientSchema):
    type = fields.String(required=True, validate=validate.OneOf(
        ["jsonSchema"], error="type must be 'jsonSchema'."))
    jsonSchema = fields.Dict(required=True, metadata={"description": (
        "A valid JSON Schema (400 if not). References resolve only inside it (a remote `$ref` is refused, "
        "nothing is fetched); `pattern`, `patternProperties` and `format: regex` run on RE2 (400 for a "
        "pattern RE2 cannot run, such as one with a backreference or lookaround). Its cost is bounded (400 naming "
        f"the bound): at most {schema_cost.MAX_WRITTEN_SUBSCHEMAS:,} subschemas written in it (counted first), "
        f"{schema_cost.MAX_EXPANDED_NODES:,} subschemas with every `$ref` and allOf/anyOf/oneOf "
        f"followed (enum, const and required values count too), {schema_cost.MAX_DEPTH} deep, patterns of "
        f"{schema_cost.MAX_PATTERN_CHARS:,} characters; a `$ref` cycle must go down into a property or an item, once "
        f"per member and level. The answer's check has a budget of {json_schemas.CHECK_SECONDS:g} s "
        f"({json_schemas.CHECK_STEPS:,} keyword evaluations): over it, the task ends `error`.")})

    @validates("jsonSchema")
    def _is_json_schema(self, value, **_):
        try:
            json_schemas.check(value)
        except jsonschema.SchemaError as exc:
            raise ValidationError(f"not a valid JSON Schema: {exc.message}") from None
        except json_schemas.UnsafeSchema as exc:
            raise ValidationError(f"not accepted: {exc}") from None


class ChatMessageSchema(LenientSchema):
    role = fields.String(required=True, validate=validate.OneOf(["user", "assistant", "system"]))
    content = fields.String(required=True)


STEP_ACTIONS = RECORDED + ("answer",)


class StepSchema(LenientSchema):
    action = fields.String(required=True, validate=validate.OneOf(STEP_ACTIONS))
    args = fields.Dict(keys=fields.String(), load_default=dict, metadata={
        "description": "The action's arguments; secrets as ${name}, inputVariables as {{name}}"})
    target = fields.Dict(keys=fields.String(), allow_none=True, metadata={
        "description": "The element's locator: tag, role, name, text, label, attrs (id, name, data-*, href), "
                       "css; index is a hint only"})
    page = fields.Dict(keys=fields.String(), allow_none=True, metadata={
        "description": "The page the step expects: url (scheme, host and path) and title"})

    source = fields.Dict(keys=fields.String(), allow_none=True, metadata={
        "description": "A drag's element (the one dragged), located as `target` is; its `target` is where it drops "
                       "(or args x, y: by how many pixels)"})

    @validates_schema
    def _targeted_steps_have_a_locator(self, data, **_):
        key = ELEMENTS.get(data["action"], ("target",))[0]  # the element every such step acts on
        if data["action"] in ELEMENTS and not (data.get(key) or {}).get("tag") and not data["args"].get(key):
            raise ValidationError(f"a '{data['action']}' step needs a {key} locator (tag and a name, text or "
                                  "attribute).", key)


class ScriptBodySchema(LenientSchema):
    steps = fields.List(fields.Nested(StepSchema), required=True,
                        validate=validate.Length(min=1, max=200, error="a script has 1 to 200 steps."))
    version = fields.Integer(load_default=1, validate=validate.Range(min=1))
    prompt = fields.String(allow_none=True, metadata={"description": "The task the script was recorded from; "
                                                                     "the model heals with it"})
    format = fields.String(allow_none=True)
    healed = fields.List(fields.Integer(), allow_none=True)
    parameters = fields.List(fields.String(), allow_none=True)
    defaults = fields.Dict(keys=fields.String(), allow_none=True, metadata={
        "description": "The inputVariables values of the recorded run, used where a replay gives none"})
    secrets = fields.List(fields.String(), allow_none=True)
    source = fields.String(allow_none=True)


class SubmitSchema(LenientSchema):
    prompt = fields.String(validate=validate.Length(min=1, error="prompt must not be empty."),
                           metadata={"description": "The task; at most MAX_PROMPT_CHARS characters. Required unless "
                                                    "the task replays a script (then the model heals with it).",
                                     "maxLength": 100_000})
    replayOf = fields.String(allow_none=True, metadata={
        "description": "Replay the script of this successful web task of the key, without a model (give one of "
                       "replayOf, script and scriptId; a replay needs executionMode cloud_browser or client)"})
    script = fields.Nested(ScriptBodySchema, allow_none=True, metadata={
        "description": "Replay this script (the `script` of GET .../responses/{requestId}/script)"})
    scriptId = fields.String(allow_none=True, metadata={"description": "Replay the latest version of this saved script"})
    browserWindowId = fields.String(allow_none=True)
    executionMode = fields.String(load_default="client", validate=validate.OneOf(EXECUTION_MODES))
    clearChat = StrictBoolean(load_default=True)
    previousRequestId = fields.String(allow_none=True, metadata={
        "description": "A request made with this API key (400 if not) whose conversation this one "
                       "continues."})
    generateGif = StrictBoolean(load_default=False)
    responseFormat = fields.Nested(ResponseFormatSchema, allow_none=True, metadata={
        "description": "The answer's JSON Schema: `{\"type\": \"jsonSchema\", \"jsonSchema\": {...}}`, or the JSON Schema "
                       "itself (`{\"type\": \"object\", ...}`), or OpenAI's `{\"type\": \"json_schema\", "
                       "\"json_schema\": {\"schema\": {...}}}`. The output is then `structured` and valid against it."})
    attachments = fields.List(fields.Nested(AttachmentSchema), allow_none=True, metadata={
        "description": "Files uploaded with this API key (400 if a key is not one)."})
    timeZone = fields.String(load_default="America/Los_Angeles", allow_none=True,
                             metadata={"description": "An IANA time zone name of the server's tz database "
                                                      "(400 if unknown); null: the default."})
    mcpServers = fields.List(fields.Nested(McpServerSchema), allow_none=True, validate=validate.Length(max=10),
                             metadata={"description": "Each with its own label (400 if two labels give the same "
                                                      "tool-name prefix)."})
    secretVariables = fields.Dict(keys=fields.String(), values=fields.String(), allow_none=True, metadata={
        "description": "Values the model never sees: steps and the model write `${NAME}`, the value is typed when "
                       "the step runs and redacted everywhere else. A value that is an `otpauth://totp/...` URI "
                       "(RFC 6238: `secret` in base32, `digits` 6-8, `period`, `algorithm` SHA1, SHA256 or SHA512) "
                       "is a one-time code generator: `${NAME}` types the code valid at that moment (400 naming "
                       "the variable if the URI is malformed)."})
    inputVariables = fields.Dict(keys=fields.String(), allow_none=True)
    chatHistory = fields.List(fields.Nested(ChatMessageSchema), allow_none=True)
    additionalContext = fields.Dict(keys=fields.String(), values=fields.String(), allow_none=True)
    reasoningMode = fields.String(allow_none=True)
    callbackUrl = fields.String(allow_none=True, metadata={
        "pattern": HTTPS_URL,
        "description": "HTTPS webhook address. A host that is not a valid name or a canonical address (an IPv4 "
                       "address other than a.b.c.d, such as 127.1 or 0x7f.0.0.1) is refused (400), as are hosts "
                       "that resolve to non-public addresses."})
    callbackSecret = fields.String(allow_none=True)
    callbackHeaders = fields.Dict(keys=fields.String(), values=fields.String(), allow_none=True)
    wait = StrictBoolean(load_default=False)
    cloudBrowserSessionName = fields.String(allow_none=True)
    cloudBrowserSessionId = fields.String(allow_none=True, validate=validate.Length(max=64), metadata={
        "description": "Run in this kept cloud browser session (POST /cloud-browser/"
                       "create-and-initialize-cloud-browser-session); its browserWindowId may be sent too."})
    profile = fields.Nested(ProfileOptionSchema, allow_none=True, metadata={
        "description": "Start the browser with this named profile of the key (cookies, localStorage and IndexedDB "
                       "saved by an earlier task or session; a name the key has none of starts empty); with `persist` "
                       "the browser's state at the end replaces it. `cloud_browser` web tasks only (400 otherwise): a kept "
                       "session takes its profile when it is created (docs/profiles.md)."})
    allowedDomains = fields.List(fields.String(validate=validate.Length(min=1, max=300)), allow_none=True,
                                 validate=validate.Length(min=1, max=100), metadata={
        "description": "Fence the task's browser and page reads to these hosts: `example.com` (that host), "
                       "`*.example.com` (it and its subdomains), either with `:port` (that port only), e.g. "
                       "`127.0.0.1:8123`. Every other host is refused, redirects and a page's own requests "
                       "included (400 for a pattern that is not one of these forms). It narrows the server's "
                       "outbound policy, never widens it."})
    browserSettings = fields.Nested(BrowserSettingsSchema, allow_none=True, metadata={
        "description": "`cloud_browser` tasks (replays too): the identity the browser shows sites: a device preset, "
                       "viewport, screen, locale, time zone, geolocation, colour scheme, every value agreeing (400 "
                       "saying why for a combination that cannot). Settings a browser must start with (device, "
                       "viewport, screen, locale) get a fresh browser, not a pooled one. Not for `client` or `cloud` "
                       "mode, nor in a kept session (give it when creating the session): 400 naming the field"})
    proxy = fields.Nested(ProxySchema, allow_none=True, metadata={
        "description": "`cloud_browser` tasks (replays too): the browser's traffic leaves through this proxy, behind "
                       "the service's egress proxy (allowedDomains and the outbound policy apply to each "
                       "destination first). A 407 or an unreachable proxy ends the task `error` saying so. Not for "
                       "`client` or `cloud` mode, nor in a kept session (give it when creating the session): 400 "
                       "naming the field"})

    @pre_load
    def _accept_sdk_aliases(self, data, **_):
        """Aliases sent by the narada SDK and by older clients (DESIGN.md §5)."""
        if not isinstance(data, dict):
            return data
        self._no_near_misses(data)
        data = dict(data)
        if "saveScreenshots" in data and "generateGif" not in data:
            data["generateGif"] = data.pop("saveScreenshots")
        if data.get("attachment") is not None and not data.get("attachments"):
            data["attachments"] = [data.pop("attachment")]
        if data.get("sessionId") is not None and not data.get("browserWindowId"):
            data["browserWindowId"] = data.pop("sessionId")
        legacy = data.get("responseFormat")
        if isinstance(legacy, dict) and legacy.get("type") == "json_schema":
            spec = legacy.get("json_schema") or {}
            data["responseFormat"] = {"type": "jsonSchema",
                                      "jsonSchema": spec.get("schema") if isinstance(spec, dict) else spec}
        elif isinstance(legacy, dict) and legacy.get("type") != "jsonSchema" and "jsonSchema" not in legacy:
            data["responseFormat"] = {"type": "jsonSchema", "jsonSchema": legacy}  # a plain JSON Schema
        if data.get("timeZone") is None:
            data.pop("timeZone", None)
        chosen = data.get("browserSettings")
        zone = chosen.get("timeZone") if isinstance(chosen, dict) else None
        if zone is not None and data.setdefault("timeZone", zone) != zone:
            raise ValidationError(f"the task's timeZone is '{data['timeZone']}' and its browserSettings.timeZone "
                                  f"'{zone}': give the time zone once.", "browserSettings")
        return data

    def _no_near_misses(self, data):
        """A misspelt field ("promt", "callbackURL") is a 400 naming it and the field meant; any other unknown
        field stays ignored, so a client that sends fields this service does not know (a newer SDK) keeps working."""
        ours = {(field.data_key or name).lower(): field.data_key or name for name, field in self.load_fields.items()}
        for name in data:
            if name in SENT_BY_CLIENTS or not isinstance(name, str) or name in ours.values():
                continue
            meant = difflib.get_close_matches(name.lower(), sorted(ours), n=1, cutoff=0.8)
            if meant:
                raise ValidationError(f"unknown field; did you mean '{ours[meant[0]]}'?", name)

    @validates("prompt")
    def _prompt_within_limit(self, value, **_):
        _within_prompt_limit(value, "prompt")

    @validates("secretVariables")
    def _one_time_codes_parse(self, value, **_):
        problems = totp.problems(value)
        if problems:
            raise ValidationError({name: [f"{why}."] for name, why in problems.items()})

    @validates("timeZone")
    def _is_iana_zone(self, value, **_):
        if value not in ZONES:
            raise ValidationError(f"'{value}' is not an IANA time zone (e.g. Europe/Paris).")

    @validates("callbackUrl")
    def _is_https_url(self, value, **_):
        if value is None:
            return
        check_outbound(value, ("https",), HTTPS_URL, "callbackUrl must be an https:// URL")  # and at each delivery

    @validates("allowedDomains")
    def _are_host_patterns(self, value, **_):
        for index, pattern in enumerate(value or []):
            try:
                host_pattern(pattern)
            except UnsafeUrl as exc:
                raise ValidationError({index: [f"{exc}."]}) from None

    @validates("callbackHeaders")
    def _allowed_headers(self, value, **_):
        bad = sorted(name for name in (value or {}) if not CALLBACK_HEADER.fullmatch(name))
        if bad:
            raise ValidationError(
                f"header(s) {', '.join(repr(b) for b in bad)} not allowed: only Authorization "
                "and headers starting with x- may be sent.")

    @validates_schema
    def _sendable_header_values(self, data, **_):
        # A 400 (a malformed value) under its own key, apart from the spec's 422 for a disallowed name.
        headers = data.get("callbackHeaders") or {}
        errors = {f"callbackHeaders.{name}": [
            f"the value of header '{name}' cannot be sent: it must be Latin-1 text without control "
            "characters (CR, LF, NUL) or leading whitespace."]
            for name, value in sorted(headers.items()) if not HEADER_VALUE.fullmatch(value)}
        if errors:
            raise ValidationError(errors)

    @validates("mcpServers")
    def _distinct_labels(self, value, **_):
        labels = [mcp_namespace(server.get("label"), i).lower() for i, server in enumerate(value or [])]
        if len(labels) != len(set(labels)):
            raise ValidationError("each MCP server needs its own label (letters, digits, '_' and '-' "
                                  "count; they prefix the server's tool names).")

    # The document's form of _client_needs_window (OpenAPI 3.0 has no if/then).
    OPENAPI_EXTRAS = {"anyOf": [
        {"title": "client mode: a browser window", "required": ["browserWindowId"],
         "properties": {"browserWindowId": {"type": "string", "minLength": 1}}},
        {"title": "cloud modes: no window needed", "required": ["executionMode"],
         "properties": {"executionMode": {"type": "string", "enum": ["cloud", "cloud_browser"]}}},
    ]}

    @validates_schema
    def _a_prompt_or_a_script(self, data, **_):
        replays = [name for name in ("replayOf", "script", "scriptId") if data.get(name) is not None]
        if len(replays) > 1:
            raise ValidationError(f"give one of replayOf, script and scriptId, not {' and '.join(replays)}.",
                                  replays[-1])
        if not replays and data.get("prompt") is None:
            raise ValidationError("Missing data for required field.", "prompt")
        if replays and data.get("executionMode") == "cloud" and not data.get("cloudBrowserSessionId"):
            raise ValidationError("a replay needs a browser: use executionMode 'cloud_browser' or 'client'.",
                                  "executionMode")

    @validates_schema
    def _browser_options_need_a_browser_of_ours(self, data, **_):
        """`profile`, `proxy` and `browserSettings` shape the browser the service starts for a task: a kept session
        takes them when it is created, and other modes have no browser of ours."""
        mode = data.get("executionMode", "client")
        for field, what in (("profile", "its profile"), ("proxy", "its proxy"),
                            ("browserSettings", "its identity settings")):
            if data.get(field) is None:
                continue
            if data.get("cloudBrowserSessionId"):
                name = "browser_settings" if field == "browserSettings" else field
                raise ValidationError(f"a kept session's browser takes {what} when the session is created "
                                      f"({name} on create-and-initialize-cloud-browser-session), not per task.", field)
            if mode != "cloud_browser":
                raise ValidationError(
                    f"{field} needs a browser the service starts: executionMode 'cloud_browser' or a kept session ("
                    + {"client": "'client' runs in the caller's own browser, with its own sign-ins and network "
                                 "settings", "cloud": "'cloud' reads pages without a browser"}.get(mode, mode) + ").",
                    field)

    @validates_schema
    def _client_needs_window(self, data, **_):
        if (data.get("executionMode", "client") == "client" and not data.get("browserWindowId")
                and not data.get("cloudBrowserSessionId")):
            raise ValidationError(
                "browserWindowId is required when executionMode is 'client' "
                "(or use executionMode 'cloud' or 'cloud_browser').", "browserWindowId")


class InputAnswerSchema(LenientSchema):
    inputId = fields.String(allow_none=True, metadata={
        "description": "The question's hitlInputMetadata.inputId; when given it must match."})
    answer = fields.String(required=True, metadata={
        "description": "The user's answer (at most MAX_PROMPT_CHARS characters).", "maxLength": 100_000})

    @validates("answer")
    def _answer_within_limit(self, value, **_):
        _within_prompt_limit(value, "answer")


def _within_prompt_limit(value, name):
    """MAX_PROMPT_CHARS bounds what one task stores and echoes back (prompt, output, trace)."""
    limit = current_app.config["MAX_PROMPT_CHARS"]
    if len(value) > limit:
        raise ValidationError(
            f"{name} is {len(value)} characters long; the limit is {limit} (MAX_PROMPT_CHARS).")


class AcceptedSchema(ma.Schema):
    requestId = fields.String(required=True)


class WaitTimeoutSchema(ErrorSchema):
    requestId = fields.String(required=True, metadata={"description": "The task, which keeps running"})


class SubmitHeadersSchema(LenientSchema):
    idempotencyKey = fields.String(data_key="Idempotency-Key", validate=validate.Length(min=1, max=255),
                                   metadata={"description": (
                                       "Repeating a submit with the same key and body within 24 h returns "
                                       "the original requestId instead of starting a second task.")})


class ListQuerySchema(LenientSchema):
    status = fields.String(validate=validate.OneOf(STATUSES))
    scheduleId = fields.String(validate=validate.Length(max=36), metadata={
        "description": "Only the runs of this schedule (/fast/v2/schedules)"})
    limit = fields.Integer(load_default=20, validate=validate.Range(min=1, max=100))
    cursor = Cursor(metadata={"type": "string", "pattern": CURSOR_PATTERN,
                              "description": "nextCursor of the previous page (empty: the first page)"})


class TaskListSchema(ma.Schema):
    responses = fields.List(fields.Nested(TaskResultSchema), required=True,
                            metadata={"description": "The key's tasks, newest first"})
    nextCursor = Cursor(allow_none=True, metadata={
        "type": "string", "pattern": CURSOR_PATTERN,
        "description": "Pass as cursor for the next page; null on the last page"})
