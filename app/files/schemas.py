"""Request and response schemas of the file endpoints."""
import marshmallow as ma
from flask_smorest.fields import Upload
from marshmallow import ValidationError, fields, validate
from werkzeug.datastructures import FileStorage

from ..schema_base import Cursor, LenientSchema
from ..task_results import StoredFileSchema  # noqa: F401 (the files' own schema)


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


class ListedFileSchema(StoredFileSchema):
    requestId = fields.String(allow_none=True, metadata={
        "description": "A download: the task whose browser downloaded it (null: an upload, or a kept session's "
                       "own download)"})
    sessionId = fields.String(allow_none=True, metadata={
        "description": "A download in a kept cloud session: the session"})
    createdAt = fields.String(required=True)


FILE_CURSOR_PATTERN = r"^([0-9]{1,16}\.file_[A-Za-z0-9_-]{1,195})?$"


class FileCursor(Cursor):
    """`<createdAt in microseconds since 1970>.<key>` of the last file of the previous page; "" is the first."""

    pattern = FILE_CURSOR_PATTERN


class FileListQuerySchema(LenientSchema):
    limit = fields.Integer(load_default=20, validate=validate.Range(min=1, max=100))
    cursor = FileCursor(metadata={"type": "string", "pattern": FILE_CURSOR_PATTERN,
                                  "description": "nextCursor of the previous page (empty: the first page)"})


class FileListSchema(ma.Schema):
    files = fields.List(fields.Nested(ListedFileSchema), required=True,
                        metadata={"description": "The key's files (uploads and downloads), newest first"})
    nextCursor = FileCursor(allow_none=True, metadata={
        "type": "string", "pattern": FILE_CURSOR_PATTERN,
        "description": "Pass as cursor for the next page; null on the last page"})


class PresignRequestSchema(LenientSchema):
    filename = fields.String(required=True, validate=validate.Length(min=1, max=500))


class PresignedPostSchema(ma.Schema):
    url = fields.String(required=True, metadata={"description": "POST fields + file here (no API key)"})
    fields = fields.Dict(keys=fields.String(), values=fields.String(), required=True,
                         metadata={"description": "Form fields to send along with `file`: key and policy"})
