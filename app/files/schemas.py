"""Request and response schemas of the file endpoints."""
import marshmallow as ma
from flask_smorest.fields import Upload
from marshmallow import ValidationError, fields, validate
from werkzeug.datastructures import FileStorage

from ..dispatch.schemas import LenientSchema


class FilePart(Upload):
    """A multipart file part; a plain form field named `file` (no filename) is not a file."""

    def _deserialize(self, value, attr, data, **kwargs):
        if not isinstance(value, FileStorage):
            raise ValidationError("must be a file part (multipart, with a filename).")
        return value


class UploadSchema(LenientSchema):
    file = FilePart(required=True, metadata={"description": "The file (multipart field `file`)"})


class PresignedUploadSchema(UploadSchema):
    key = fields.String(required=True, validate=validate.Length(min=1, max=200),
                        metadata={"description": "fields.key of the presigned post"})
    policy = fields.String(required=True, validate=validate.Length(min=1, max=4000),
                           metadata={"description": "fields.policy of the presigned post"})


class StoredFileSchema(ma.Schema):
    key = fields.String(required=True, metadata={"description": "Pass as attachments[].key when submitting"})
    filename = fields.String(required=True)
    size = fields.Integer(required=True, metadata={"description": "Bytes"})
    contentType = fields.String(required=True)


class PresignRequestSchema(LenientSchema):
    filename = fields.String(required=True, validate=validate.Length(min=1, max=500))


class PresignedPostSchema(ma.Schema):
    url = fields.String(required=True, metadata={"description": "POST fields + file here (no API key)"})
    fields = fields.Dict(keys=fields.String(), values=fields.String(), required=True,
                         metadata={"description": "Form fields to send along with `file`: key and policy"})
