"""Routes of /fast/v2/files and the SDK's presigned upload."""
from flask import g, request
from flask.views import MethodView
from werkzeug.datastructures import CombinedMultiDict

from ..api import NOT_JSON, RATE_LIMITED, TOO_LARGE
from ..auth import require_api_key
from ..links import public_url
from ..parsing import Blueprint, StrictParser
from ..ratelimits import requests_limit
from . import service
from .serving import served
from .schemas import (
    FileListQuerySchema, FileListSchema, PresignedPostSchema, PresignedUploadSchema, PresignRequestSchema,
    StoredFileSchema, UploadSchema,
)


class MultipartParser(StrictParser):
    """`files` means the whole multipart body: its form fields and its files (one documented schema)."""

    def load_files(self, req, schema):
        return self._makeproxy(CombinedMultiDict([req.files, req.form]), schema)


class FilesBlueprint(Blueprint):
    ARGUMENTS_PARSER = MultipartParser()


blp = FilesBlueprint("files", __name__, url_prefix="/fast/v2",
                     description="Upload files to attach to tasks; fetch the files your tasks' browsers "
                                 "downloaded.")

UNAUTHENTICATED = ("files.PresignedUpload",)
UPLOADS = ("files.Files", "files.PresignedUpload")


@blp.before_request
def _authenticate_and_bound():
    """The presigned upload carries its permission in the form; everything else needs the API key.
    Uploads are refused (413) before their body is read when they declare more than the limit."""
    if request.endpoint not in UNAUTHENTICATED:
        require_api_key()
    if request.endpoint in UPLOADS:
        service.refuse_oversized_request(request)


@blp.route("/files")
class Files(MethodView):
    @requests_limit
    @blp.arguments(UploadSchema, location="files", error_status_code=400)
    @blp.response(201, StoredFileSchema)
    @blp.alt_response(400, schema="Error", description="No `file` field")
    @blp.alt_response(401, schema="Error", description="Invalid API key")
    @blp.alt_response(413, schema="Error", description="Larger than MAX_UPLOAD_BYTES")
    def post(self, files):
        """Upload a file

        Multipart, field `file`. The returned key goes into a task's `attachments`. Files are
        kept FILE_TTL_SECONDS, readable only by tasks of the same API key.
        """
        return service.store(g.api_key.id, files["file"])

    @requests_limit
    @blp.arguments(FileListQuerySchema, location="query", error_status_code=400)
    @blp.response(200, FileListSchema)
    @blp.alt_response(400, schema="Error", description="Invalid limit or cursor")
    @blp.alt_response(401, schema="Error", description="Invalid API key")
    @blp.alt_response(429, schema="Error", description=RATE_LIMITED)
    def get(self, query):
        """List your files

        Uploads and the files your tasks' and kept sessions' browsers downloaded, newest first, until they
        expire (FILE_TTL_SECONDS).
        """
        return service.list_files(g.api_key.id, query["limit"], query.get("cursor"))


@blp.route("/files/<string:key>")
class File(MethodView):
    @requests_limit
    @blp.response(200, {"type": "string", "format": "binary"}, content_type="*/*",
                  description="The file's bytes, with its Content-Type and an attachment Content-Disposition")
    @blp.alt_response(401, schema="Error", description="Invalid API key")
    @blp.alt_response(404, schema="Error", description="Unknown file, expired, or another key's")
    @blp.alt_response(429, schema="Error", description=RATE_LIMITED)
    def get(self, key):
        """Get a file

        An upload, or a file a browser downloaded (a task's `response.files`); only with the key that owns it.
        """
        return served(service.owned_file(g.api_key.id, key))


@blp.route("/remote-dispatch/generate-file-upload-presigned-post")
class Presign(MethodView):
    @requests_limit
    @blp.arguments(PresignRequestSchema)
    @blp.response(200, PresignedPostSchema)
    @blp.alt_response(400, schema="Error", description="Invalid request")
    @blp.alt_response(401, schema="Error", description="Invalid API key")
    @blp.alt_response(413, schema="Error", description=TOO_LARGE)
    @blp.alt_response(415, schema="Error", description=NOT_JSON)
    def post(self, data):
        """Get a presigned upload

        For the official SDK: POST `fields` plus the file (multipart field `file`) to `url`, with
        no API key. The signed policy expires after PRESIGNED_POST_TTL_SECONDS.
        """
        return service.presign(g.api_key.id, data["filename"], public_url("files.PresignedUpload"))


@blp.route("/files/presigned-upload")
class PresignedUpload(MethodView):
    @blp.arguments(PresignedUploadSchema, location="files", error_status_code=400)
    @blp.response(201, StoredFileSchema)
    @blp.alt_response(400, schema="Error", description="Missing key, policy or file")
    @blp.alt_response(403, schema="Error", description="Invalid, tampered or expired policy")
    @blp.alt_response(409, schema="Error", description="This policy's file was already uploaded")
    @blp.alt_response(413, schema="Error", description="Larger than the policy's size limit")
    @blp.doc(security=[])
    def post(self, form):
        """Upload with a presigned policy

        The multipart POST of a presigned post's `fields` and `file`; no API key.
        """
        return service.store_presigned(form, form["file"])
