"""Request and response bodies of /fast/v2/credentials: values go in, only names, sites and field names come out."""
import marshmallow as ma
from marshmallow import ValidationError, fields, validate, validates, validates_schema

from .. import totp
from ..schema_base import FullMatch, LenientSchema
from .placeholders import site_problem

NAME_RULE = "1 to 100 characters: letters, digits, '_' and '-', starting with a letter or a digit"


class CredentialValuesSchema(LenientSchema):
    """A rotation (PUT): the values and sites that replace the stored ones."""

    username = fields.String(allow_none=True, validate=validate.Length(min=1, max=1000))
    password = fields.String(allow_none=True, validate=validate.Length(min=1, max=1000))
    totp = fields.String(allow_none=True, metadata={
        "description": "An `otpauth://totp/...` URI (RFC 6238); `${cred:NAME.code}` types its current code"})
    sites = fields.List(fields.String(), required=True, validate=validate.Length(min=1, max=50), metadata={
        "description": "Where its values may be typed: hosts ('bank.example', '127.0.0.1'), '*.' and a domain for its "
                       "subdomains ('*.bank.example'), either with ':port' for that port alone. The page's "
                       "top-level origin and the frame typed into must both be on one of them."})

    @validates("sites")
    def _sites(self, value, **_):
        problems = [why for site in value if (why := site_problem(site))]
        if problems:
            raise ValidationError(problems)

    @validates("totp")
    def _totp(self, value, **_):
        if value is None:
            return
        if not totp.is_totp_uri(value):
            raise ValidationError("not an otpauth://totp/... URI.")
        try:
            totp.parse(value)
        except totp.MalformedUri as exc:
            raise ValidationError(f"{exc}.") from None

    @validates_schema
    def _some_value(self, data, **_):
        if not any(data.get(field) for field in ("username", "password", "totp")):
            raise ValidationError("a credential needs at least one of username, password and totp.", "username")


class NewCredentialSchema(CredentialValuesSchema):
    name = fields.String(required=True, validate=FullMatch(
        r"^[A-Za-z0-9][A-Za-z0-9_-]{0,99}$", error=f"a credential name is {NAME_RULE}."), metadata={
        "description": f"{NAME_RULE}; a task writes `${{cred:NAME.username}}`, `${{cred:NAME.password}}`, "
                       "`${cred:NAME.code}`"})


class CredentialSchema(ma.Schema):
    name = fields.String(required=True)
    sites = fields.List(fields.String(), required=True)
    fields_ = fields.List(fields.String(), required=True, data_key="fields", attribute="fields", metadata={
        "description": "Which values it holds: username, password, code (a TOTP generator); never the values"})
    createdAt = fields.DateTime(required=True)
    updatedAt = fields.DateTime(required=True, metadata={"description": "When it was created or last rotated"})


class CredentialListSchema(ma.Schema):
    credentials = fields.List(fields.Nested(CredentialSchema), required=True)
