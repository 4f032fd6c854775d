"""Request and response bodies of /fast/v2/codes."""
import marshmallow as ma
from marshmallow import ValidationError, fields, validate, validates_schema

from ..schema_base import FullMatch, LenientSchema

IDENTIFIER = FullMatch(r"^[^\s{}]{1,320}$", error="an identifier is an email address or a phone number: 1 to "
                                                         "320 characters, no spaces or braces.")


class IncomingSchema(LenientSchema):
    to = fields.String(required=True, validate=IDENTIFIER, metadata={
        "description": "The address or phone number it was sent to: a task's `${code:TO}` / `${link:TO}`"})
    text = fields.String(allow_none=True, validate=validate.Length(max=100000), metadata={
        "description": "The message as received; its code and sign-in link are taken from it"})
    code = fields.String(allow_none=True, validate=validate.Length(min=1, max=100), metadata={
        "description": "The code itself, when the caller's hook has already found it"})
    link = fields.String(allow_none=True, validate=FullMatch(
        r"^https?://\S+$", error="a link is an http(s) URL."), metadata={"description": "A sign-in link itself"})

    @validates_schema
    def _something(self, data, **_):
        if not any(data.get(field) for field in ("text", "code", "link")):
            raise ValidationError("send the message as `text`, or its `code` or `link`.", "text")


class ReceivedSchema(ma.Schema):
    to = fields.String(required=True)
    code = fields.Boolean(required=True, metadata={"description": "Whether a code was found (never the code)"})
    link = fields.Boolean(required=True, metadata={"description": "Whether a link was found (never the link)"})


class AddressSchema(LenientSchema):
    address = fields.String(required=True, validate=IDENTIFIER, metadata={
        "description": "An address the SMTP receiver gets mail for (mail to it is kept for this key alone)"})


class ClaimedAddressSchema(ma.Schema):
    address = fields.String(required=True)
    createdAt = fields.DateTime(required=True)


class AddressListSchema(ma.Schema):
    addresses = fields.List(fields.Nested(ClaimedAddressSchema), required=True)
