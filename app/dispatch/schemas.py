"""Request and response schemas of the remote-dispatch endpoints."""
import difflib
import re
from datetime import datetime, timedelta, timezone
from zoneinfo import available_timezones

import jsonschema
import marshmallow as ma
from flask import current_app
from marshmallow import EXCLUDE, ValidationError, fields, post_load, pre_load, validate, validates, validates_schema

from .. import json_schemas, schema_cost, totp
from ..api import ErrorSchema
from ..egress import upstream
from ..egress.policy import Policy, Unresolvable, UnsafeUrl, host_pattern, normalise
from ..sandbox import settings as browser_settings
from ..scripts.format import ELEMENTS, RECORDED

EXECUTION_MODES = ("client", "cloud", "cloud_browser")
STATUSES = ("pending", "success", "error", "input-required")
# What HTTP/1.1 can carry in a field value (RFC 9110 §5.5: visible chars, SP, HTAB, obs-text).
HEADER_VALUE = re.compile(r"(?:[\x21-\x7e\x80-\xff][\x20\x21-\x7e\x80-\xff\t]*)?")
CALLBACK_HEADER = re.compile(r"^(authorization|x-[!#$%&'*+.^_`|~0-9a-z-]+)$", re.IGNORECASE)

# URL patterns the document states and validation applies (re.fullmatch), so the two agree: a host
# name or IPv4 address (no userinfo, no IPv6 literal), an optional port in range, then anything.
_PORT = r"(:(6553[0-5]|655[0-2][0-9]|65[0-4][0-9]{2}|6[0-4][0-9]{3}|[1-5][0-9]{4}|[0-9]{1,4}))?"
# (Explicit classes, not \S: Python and JSON Schema (ECMA) regexes disagree on what is whitespace.)
_HOST_PORT_REST = r"[A-Za-z0-9.-]+" + _PORT + r"([/?#][^\u0000-\u0020\u007f]*)?$"
HTTPS_URL = r"^https://" + _HOST_PORT_REST
HTTP_URL = r"^https?://" + _HOST_PORT_REST
ONE_LINE = r"^[^\r\n]*$"
ZONES = frozenset(available_timezones())
# Submit fields that are not ours by name but are sent: the narada SDK's and older clients' names for fields of
# ours (SubmitSchema._accept_sdk_aliases), and fields the SDK sends that this service does not use.
SENT_BY_CLIENTS = frozenset({"saveScreenshots", "attachment", "sessionId", "executionTraceContext",
                             "userResourceCredentials", "vectorStores", "criticContext"})


class FullMatch(validate.Regexp):
    """`validate.Regexp` over the whole text: re.match with `$` would accept a final "\\n" ("work\\n")."""

    def __call__(self, value):
        if self.regex.fullmatch(value) is None:
            raise ValidationError(self._format_error(value))
        return value


class LenientSchema(ma.Schema):
    """Unknown fields are ignored, as the contract promises; NUL characters are refused; documented patterns hold."""

    class Meta:
        unknown = EXCLUDE

    @pre_load
    def _no_nul_characters(self, data, **_):
        """Postgres text cannot hold U+0000: refuse it here (400) rather than fail at the insert.
        Only the schema's own fields: unknown ones are ignored, whatever they hold."""
        if isinstance(data, dict):
            known = {field.data_key or name for name, field in self.load_fields.items()}
            for name, value in data.items():
                if name in known and _has_nul(value):
                    if name == "callbackHeaders" and isinstance(value, dict) and not _has_nul(list(value)):
                        # a header value: a 400 naming the header, like its other unsendable values
                        name += "." + next(k for k, v in value.items() if _has_nul(v))
                    raise ValidationError("must not contain NUL characters (\\u0000).", name)
        return data

    @validates_schema
    def _documented_patterns(self, data, **_):
        """A field's documented `pattern` is matched in full (re.fullmatch: `$` alone accepts a final "\\n"), so
        the document and validation agree; a field's own validator, where it has one, has said why first."""
        errors = {}
        for name, field in self.load_fields.items():
            pattern, value = field.metadata.get("pattern"), data.get(name)
            if isinstance(pattern, str) and isinstance(value, str) and re.fullmatch(pattern, value) is None:
                errors[field.data_key or name] = ["does not have the documented form (the pattern " + pattern + ")."]
        if errors:
            raise ValidationError(errors)


def _has_nul(value):
    if isinstance(value, str):
        return "\x00" in value
    if isinstance(value, dict):
        return any(_has_nul(k) or _has_nul(v) for k, v in value.items())
    if isinstance(value, list):
        return any(_has_nul(v) for v in value)
    return False


class AttachmentSchema(LenientSchema):
    key = fields.String(required=True, validate=validate.Length(min=1))


class StrictBoolean(fields.Boolean):
    """JSON true or false only (marshmallow would also take "yes", 1, "on", ...), as documented."""

    truthy = {True}
    falsy = {False}

    def _deserialize(self, value, attr, data, **kwargs):
        if not isinstance(value, bool):  # 0 and 1 are in {False} and {True}: equal and of the same hash
            raise self.make_error("invalid")
        return value


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


MCP_AUTH_TYPES = ("none", "bearer-token", "custom-headers")
HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]{1,100}$")
# Headers the HTTP client and the MCP transport set themselves.
RESERVED_HEADERS = {"host", "content-length", "content-type", "transfer-encoding", "connection", "accept",
                    "mcp-session-id", "mcp-protocol-version", "last-event-id"}


def _any_case(word):
    return "".join(f"[{c.upper()}{c.lower()}]" if c.isalpha() else re.escape(c) for c in word)


# HEADER_NAME, and none of RESERVED_HEADERS in any letter case (the document's form of _is_header_name).
CUSTOM_HEADER_NAME = (r"^(?!(" + "|".join(_any_case(h) for h in sorted(RESERVED_HEADERS)) + r")$)"
                      r"[!#$%&'*+.^_`|~0-9A-Za-z-]{1,100}$")


class CustomHeaderSchema(LenientSchema):
    key = fields.String(required=True, metadata={"pattern": CUSTOM_HEADER_NAME})
    value = fields.String(required=True, validate=validate.Length(max=8000),
                          metadata={"pattern": ONE_LINE})

    @validates("key")
    def _is_header_name(self, value, **_):
        if not HEADER_NAME.fullmatch(value):
            raise ValidationError(f"{value!r} is not an HTTP header name.")
        if value.lower() in RESERVED_HEADERS:
            raise ValidationError(f"the header {value!r} is set by the MCP client and cannot be sent.")

    @validates_schema
    def _one_line(self, data, **_):
        if any(c in data.get("value", "") for c in "\r\n"):
            raise ValidationError("header values must be one line.", "value")


class McpAuthenticationSchema(LenientSchema):
    type = fields.String(required=True, validate=validate.OneOf(
        MCP_AUTH_TYPES, error="type must be one of none, bearer-token, custom-headers."))
    bearerToken = fields.String(allow_none=True, validate=validate.Length(min=1, max=8000),
                                metadata={"pattern": ONE_LINE})
    # The document's form of _credentials_for_type.
    OPENAPI_EXTRAS = {"anyOf": [
        {"title": "no credentials", "required": ["type"],
         "properties": {"type": {"type": "string", "enum": ["none"]}}},
        {"title": "a bearer token", "required": ["type", "bearerToken"], "properties": {
            "type": {"type": "string", "enum": ["bearer-token"]},
            "bearerToken": {"type": "string", "minLength": 1, "maxLength": 8000, "pattern": ONE_LINE}}},
        {"title": "custom headers", "required": ["type", "customHeaders"], "properties": {
            "type": {"type": "string", "enum": ["custom-headers"]},
            "customHeaders": {"type": "array", "minItems": 1, "maxItems": 20}}},
    ]}
    customHeaders = fields.List(fields.Nested(CustomHeaderSchema), allow_none=True,
                                validate=validate.Length(max=20))

    @validates_schema
    def _credentials_for_type(self, data, **_):
        kind = data.get("type")
        if kind == "bearer-token" and not data.get("bearerToken"):
            raise ValidationError("bearerToken is required when type is 'bearer-token'.", "bearerToken")
        if kind == "bearer-token" and any(c in data["bearerToken"] for c in "\r\n"):
            raise ValidationError("bearerToken must be one line.", "bearerToken")
        if kind == "custom-headers" and not data.get("customHeaders"):
            raise ValidationError("customHeaders (a list of {key, value}) is required when type is "
                                  "'custom-headers'.", "customHeaders")




def mcp_namespace(label, index):
    """The prefix of a server's tool names: its label in ^[A-Za-z0-9_-]+$ (model tool-name rules)."""
    cleaned = re.sub(r"[^A-Za-z0-9_-]+", "_", (label or "").strip()).strip("_")[:30]
    return cleaned or f"mcp{index + 1}"


def _check_outbound(url, schemes, pattern, what):
    """The documented `pattern`, then app.egress's checks at submit time: forms parsers disagree on
    always; the addresses unless private URLs are allowed (then names need not resolve yet)."""
    if not re.fullmatch(pattern, url):
        if url.lower().startswith(tuple(f"{scheme}://" for scheme in schemes)):
            try:
                normalise(url, schemes)
            except UnsafeUrl as exc:  # a URL of the right scheme: say why, when the egress parser knows
                raise ValidationError(f"{what} ({exc}).") from None
        raise ValidationError(f"{what}.")
    try:
        if current_app.config["ALLOW_PRIVATE_URLS"]:
            normalise(url, schemes)
        else:
            Policy.from_config(current_app.config).check_url(url, schemes)
    except UnsafeUrl as exc:
        raise ValidationError(f"{exc}.") from None


class McpServerSchema(LenientSchema):
    url = fields.String(required=True, validate=validate.Length(min=1, max=2000), metadata={
        "pattern": HTTP_URL,
        "description": "The server's URL. A host that is not a valid name or a canonical address (an IPv4 "
                       "address other than a.b.c.d, such as 127.1) is refused (400), as are hosts that resolve to "
                       "non-public addresses."})
    label = fields.String(allow_none=True, validate=validate.Length(max=100))
    description = fields.String(allow_none=True, validate=validate.Length(max=2000))
    authentication = fields.Nested(McpAuthenticationSchema, allow_none=True)
    selectedTools = fields.List(fields.String(validate=validate.Length(min=1, max=200)), allow_none=True)

    @validates("url")
    def _is_http_url(self, value, **_):
        if re.fullmatch(r"https?://[^/?#]*@.*", value):
            raise ValidationError("url must not carry credentials; use authentication.")
        _check_outbound(value, ("http", "https"), HTTP_URL,  # and again at each connection
                        "url must be an http:// or https:// URL of an MCP server (a host name or IPv4 address)")


class ProxySchema(LenientSchema):
    """The caller's own proxy (app/egress/upstream.py): the browser's traffic leaves through it, behind the egress
    proxy, whose fences apply to every destination first."""
    server = fields.String(required=True, validate=validate.Length(min=1, max=300), metadata={
        "description": "http://host:port, https://host:port (TLS to the proxy) or socks5://host:port; the port "
                       "given, no path, no credentials in it. Its address passes the outbound policy as any: a "
                       "private address is refused (400) unless the instance allows it"})
    username = fields.String(allow_none=True, validate=validate.Length(min=1, max=upstream.MAX_CREDENTIAL_CHARS),
                             metadata={"description": "Basic (HTTP) or RFC 1929 (SOCKS5) user name; no ':'"})
    password = fields.String(allow_none=True, validate=validate.Length(max=upstream.MAX_CREDENTIAL_CHARS),
                             metadata={"description": "Kept encrypted; never in a trace, log, recording or poll"})

    @validates("server")
    def _is_proxy_address(self, value, **_):
        try:
            _, host, port = upstream.parse_server(value)
        except upstream.InvalidProxy as exc:
            raise ValidationError(str(exc).removeprefix("proxy.server ")) from None
        if current_app.config["ALLOW_PRIVATE_URLS"]:
            return
        try:  # decided now where it can be; the egress proxy checks it again at each connection
            Policy.from_config(current_app.config).check_host(host, port)
        except Unresolvable:  # maybe not yet, or not from the web machine: the task says why if it stays so
            return
        except UnsafeUrl as exc:
            raise ValidationError(f"{exc}.") from None

    @validates_schema
    def _sendable_credentials(self, data, **_):
        for name in ("username", "password"):
            if any(ord(c) < 0x20 or ord(c) == 0x7f for c in data.get(name) or ""):
                raise ValidationError(f"{name} must not contain control characters.", name)
        if ":" in (data.get("username") or ""):
            raise ValidationError("username must not contain ':' (Basic credentials are user:password).",
                                  "username")
        if data.get("password") and not data.get("username"):
            raise ValidationError("a password needs a username.", "username")


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


class ProfileOptionSchema(LenientSchema):
    """`profile` on submit and on creating a kept session (app/profiles)."""

    name = fields.String(required=True, validate=FullMatch(
        r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$", error="a profile name has 1 to 100 characters: letters, digits, '.', "
                                                   "'_' and '-', starting with a letter or a digit."))
    persist = StrictBoolean(load_default=False, metadata={
        "description": "Save the browser's state into the profile at the end (one writer at a time: 409 naming "
                       "the task or session writing it now)."})


class SizeSchema(LenientSchema):
    width = fields.Integer(strict=True, required=True, validate=validate.Range(min=240, max=7680))
    height = fields.Integer(strict=True, required=True, validate=validate.Range(min=240, max=4320))


class GeolocationSchema(LenientSchema):
    latitude = fields.Float(required=True, allow_nan=False, validate=validate.Range(min=-90, max=90))
    longitude = fields.Float(required=True, allow_nan=False, validate=validate.Range(min=-180, max=180))
    accuracy = fields.Float(allow_none=True, allow_nan=False, validate=validate.Range(min=0, max=100000), metadata={
        "description": "Metres (default 20)"})


class BrowserSettingsSchema(LenientSchema):
    """`browserSettings` on submit (cloud_browser) and on creating a kept session: the identity its browser shows
    sites, every value agreeing (app/sandbox/settings.py; docs/browser-identity.md)."""

    device = fields.String(allow_none=True, validate=validate.OneOf(
        sorted(browser_settings.DEVICES), error="unknown device '{input}': one of {choices}."), metadata={
        "description": "A device preset: desktops (Linux, Chromium's own User-Agent) and Android phones (Chrome for "
                       "Android's User-Agent, platform, client hints, touch, screen and pixel ratio). Default "
                       f"{browser_settings.DEFAULT_DEVICE} with the deployment's window size"})
    viewport = fields.Nested(SizeSchema, allow_none=True, metadata={
        "description": "The page's size (innerWidth x innerHeight); it must fit the screen"})
    screen = fields.Nested(SizeSchema, allow_none=True, metadata={
        "description": "A desktop's screen (a phone's is its preset's)"})
    locale = fields.String(allow_none=True, validate=validate.Length(max=20), metadata={
        "description": "A BCP 47 language tag (fr-FR, pt-BR, zh-Hant-TW): navigator.languages, Accept-Language, "
                       "Intl"})
    timeZone = fields.String(allow_none=True, metadata={
        "description": "IANA time zone. On a task it is the task's `timeZone` (give it once, or twice the same)"})
    geolocation = fields.Nested(GeolocationSchema, allow_none=True, metadata={
        "description": "navigator.geolocation's position, and its permission granted to every page; without it, "
                       "no page is granted geolocation"})
    colorScheme = fields.String(allow_none=True, validate=validate.OneOf(browser_settings.COLOR_SCHEMES), metadata={
        "description": "prefers-color-scheme"})

    @validates("locale")
    def _is_language_tag(self, value, **_):
        if value is not None and browser_settings.canonical_locale(value) is None:
            raise ValidationError(f"'{value}' is not a BCP 47 language tag of a language, an optional script and an "
                                  "optional region (e.g. fr-FR, pt-BR, zh-Hant-TW).")

    @validates("timeZone")
    def _is_iana_zone(self, value, **_):
        if value is not None and value not in ZONES:
            raise ValidationError(f"'{value}' is not an IANA time zone (e.g. Europe/Paris).")

    @validates_schema
    def _consistent(self, data, **_):
        found = browser_settings.problems(data)
        if found:
            raise ValidationError(found)

    @post_load
    def _canonical(self, data, **_):
        """Only what was given (explicit nulls dropped), the locale in its canonical case."""
        data = {name: value for name, value in data.items() if value is not None}
        if data.get("locale"):
            data["locale"] = browser_settings.canonical_locale(data["locale"])
        return data


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
        _check_outbound(value, ("https",), HTTPS_URL, "callbackUrl must be an https:// URL")  # and at each delivery

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


class OutputSchema(ma.Schema):
    type = fields.String(required=True, metadata={"enum": ["text", "structured"]})
    content = fields.Raw(required=True)


class TakeoverSchema(ma.Schema):
    by = fields.String(metadata={"description": "Who had control (the name of the key that opened the live view)"})
    events = fields.Integer(metadata={"description": "How many inputs they made (each an entry that follows)"})


class CompletionCheckSchema(ma.Schema):
    done = fields.Boolean(metadata={"description": "Was the task done, as the check judged"})
    reason = fields.String(metadata={"description": "Why (the model's words, or the built-in rule's)"})
    by = fields.String(metadata={"enum": ["model", "rules"], "description": "Who judged: the model's "
                                 "constrained check, or the built-in rules"})
    tokens = fields.Integer(metadata={"description": "The model tokens the check took (counted in usage)"})


class TraceEntrySchema(ma.Schema):
    url = fields.String()
    action = fields.String()
    credits = fields.Float()
    startTs = fields.String()
    endTs = fields.String()
    durationMs = fields.Integer()
    result = fields.String(metadata={"description": "MCP tool calls: the tool's result, truncated"})
    target = fields.String(metadata={
        "description": "Browser steps on an element: the element as the page view showed it (`[3] <button> Send`)"})
    failed = fields.Boolean(metadata={"description": "The action did not do what it should; `error` says why"})
    error = fields.String(metadata={"description": "Why the action failed"})
    browserSession = fields.String(metadata={
        "description": "Browser modes: the session that ran the action "
                       "(cloudBrowserSessionName, or task-<requestId>)"})
    refused = fields.List(fields.String(), metadata={
        "description": "Browser steps: what the egress policy refused meanwhile (\"GET host:port: why\")"})
    waited = fields.String(metadata={
        "description": "A step that used `${code:TO}` or `${link:TO}`: how long it waited for it (\"waited 41 s "
                       "for a code to ada@example.test\")"})
    running = fields.Boolean(metadata={
        "description": "Progress only: a `wait` step still running (replaced by its entry when it ends)"})
    planner = fields.String(metadata={
        "description": "The final entry: which planner ran the task, `builtin` (the step grammar) or "
                       "`model <LLM_MODEL>`"})
    check = fields.Nested(CompletionCheckSchema, metadata={
        "description": "Web tasks that name a page: the completion check's verdict (its own entry when a model "
                       "judged or the trace showed what is missing; the final entry carries the latest)"})
    replayed = fields.Boolean(metadata={
        "description": "Replays: true for a step run from the script, false for one the model planned (healed)"})
    takeover = fields.Nested(TakeoverSchema, metadata={
        "description": "Live view: a person had control (who, and how many inputs); the entry's times say when "
                       "and how long"})
    by = fields.String(metadata={"description": "Live view: the person whose input this entry records"})


class StoredFileSchema(ma.Schema):
    key = fields.String(required=True, metadata={"description": "Pass as attachments[].key when submitting; "
                                                                "GET /fast/v2/files/{key} returns the bytes"})
    filename = fields.String(required=True)
    size = fields.Integer(required=True, metadata={"description": "Bytes"})
    contentType = fields.String(required=True)


class ResponseSchema(ma.Schema):
    output = fields.Nested(OutputSchema)
    actionTrace = fields.List(fields.Nested(TraceEntrySchema), allow_none=True)
    files = fields.List(fields.Nested(StoredFileSchema), metadata={
        "description": "Browser modes: the files the task's browser downloaded, now files of the key "
                       "(GET /fast/v2/files/{key}; an `attachments` item of a later task). Absent when it "
                       "downloaded none; one over a cap is left out, with an actionTrace entry that says so"})
    text = fields.String(metadata={"deprecated": True})
    structuredOutput = fields.Raw(allow_none=True, metadata={"deprecated": True})


class UsageSchema(ma.Schema):
    actions = fields.Integer()
    credits = fields.Float()


class ReplayInfoSchema(ma.Schema):
    replayOf = fields.String()
    scriptId = fields.String()
    version = fields.Integer(metadata={"description": "The version of the script replayed"})
    healed = fields.List(fields.Integer(), metadata={
        "description": "Steps (from 1) the model planned because the script's step could not run"})
    newVersion = fields.Integer(allow_none=True, metadata={
        "description": "The script version this healed run yielded (GET .../script)"})


class TaskResultSchema(ma.Schema):
    requestId = fields.String(required=True)
    status = fields.String(required=True, metadata={"enum": list(STATUSES)})
    browserWindowId = fields.String(allow_none=True)
    executionMode = fields.String()
    response = fields.Nested(ResponseSchema, allow_none=True)
    createdAt = fields.String(required=True)
    completedAt = fields.String(allow_none=True)
    usage = fields.Nested(UsageSchema, allow_none=True)
    hitlInputMetadata = fields.Dict(allow_none=True, metadata={
        "description": "While input-required: the question ({inputId, action}) to answer through .../input, or, "
                       "with type 'arrival', the one-time code or sign-in link the task waits for ({type, kind, to, "
                       "waitingSince, waitingUntil}), which resumes it when it arrives (POST /fast/v2/codes)."})
    trigger = fields.String(metadata={"enum": ["api", "schedule"], "description": "What submitted the task"})
    scheduleId = fields.String(allow_none=True, metadata={"description": "The schedule whose run this is"})
    progress = fields.Dict(allow_none=True, metadata={
        "description": "While pending: the actions taken so far."})
    replay = fields.Nested(ReplayInfoSchema, allow_none=True, metadata={
        "description": "Replays (replayOf, script or scriptId): which script version ran and which steps healed"})
    gifUrl = fields.String(allow_none=True, metadata={
        "description": "With generateGif: where to fetch the task's animated GIF (GET, same API key); "
                       "null while there is none yet (it is stored when the browser closes)."})


class RecordingMarkerSchema(ma.Schema):
    step = fields.Integer(metadata={"description": "The actionTrace entry's index"})
    action = fields.String(metadata={"description": "The action's name (go_to, click, type ...)"})
    offsetMs = fields.Integer(metadata={"description": "When the action started, from the recording's start"})


class RecordingSchema(ma.Schema):
    requestId = fields.String(required=True)
    format = fields.String(required=True, metadata={"enum": ["rrweb"], "description": (
        "rrweb 2 events: play them with rrweb-player (as the console does) or rrweb's Replayer")})
    startedAt = fields.Integer(metadata={"description": "The first event's time (ms since the epoch)"})
    durationMs = fields.Integer()
    truncated = fields.Boolean(metadata={"description": (
        "true: the run's events reached RECORDING_MAX_BYTES and the recording ends there (a custom event tagged "
        "\"truncated\" marks the moment)")})
    markers = fields.List(fields.Nested(RecordingMarkerSchema), metadata={
        "description": "One per browser action, at the moment it started (the worker's own: pages cannot add any)"})
    events = fields.List(fields.Dict(), metadata={"description": "The rrweb events, in time order"})


class WaitTimeoutSchema(ErrorSchema):
    requestId = fields.String(required=True, metadata={"description": "The task, which keeps running"})


class SubmitHeadersSchema(LenientSchema):
    idempotencyKey = fields.String(data_key="Idempotency-Key", validate=validate.Length(min=1, max=255),
                                   metadata={"description": (
                                       "Repeating a submit with the same key and body within 24 h returns "
                                       "the original requestId instead of starting a second task.")})


_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_MICROSECOND = timedelta(microseconds=1)
CURSOR_PATTERN = r"^([0-9]{1,16}\.[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})?$"


class Cursor(fields.Field):
    """`<createdAt in microseconds since 1970>.<requestId>` of the last task of the previous page.

    Every string of this form is a position in the list (the tasks created before it), so the
    document's pattern says exactly which cursors are accepted; "" is the first page.
    """

    def _serialize(self, value, attr, obj, **kwargs):
        if value is None:
            return None
        created_at, task_id = value
        if created_at.tzinfo is None:  # SQLite (embedded) gives naive UTC
            created_at = created_at.replace(tzinfo=timezone.utc)
        return f"{(created_at - _EPOCH) // _MICROSECOND}.{task_id}"

    pattern = CURSOR_PATTERN  # a list of other rows (GET /files) names its own ids

    def _deserialize(self, value, attr, data, **kwargs):
        if not isinstance(value, str) or not re.fullmatch(self.pattern, value):
            raise ValidationError("not a cursor returned by this API (use nextCursor).")
        if value == "":
            return None  # the first page, as with no cursor at all
        micros, row_id = value.split(".", 1)
        return _EPOCH + int(micros) * _MICROSECOND, row_id


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
