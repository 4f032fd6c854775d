"""`mcpServers` on submit: each server's URL, label, credentials and the tools it may use."""
import re

from marshmallow import ValidationError, fields, validate, validates, validates_schema

from ..schema_base import HTTP_URL, ONE_LINE, LenientSchema, check_outbound

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
        check_outbound(value, ("http", "https"), HTTP_URL,  # and again at each connection
                        "url must be an http:// or https:// URL of an MCP server (a host name or IPv4 address)")
