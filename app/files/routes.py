"""Routes of /fast/v2/files and the SDK's presigned upload."""
from flask import g, request
from flask.views import MethodView
from werkzeug.datastructures import CombinedMultiDict

from ..auth import require_api_key
from ..dispatch.routes import NOT_JSON, TOO_LARGE
from ..links import public_url
from ..parsing import Blueprint, StrictParser
from ..ratelimits import requests_limit
from . import service
from .schemas import (
    PresignedPostSchema, PresignedUploadSchema, PresignRequestSchema, StoredFileSchema, UploadSchema,
)



class MultipartParser(StrictParser):
    """`files` means the whole multipart body: its form fields and its files (one documented schema)."""

    def load_files(self, req, schema):
        return self._makeproxy(CombinedMultiDict([req.files, req.form]), schema)


class FilesBlueprint(Blueprint):
    ARGUMENTS_PARSER = MultipartParser()


blp = FilesBlueprint("files", __name__, url_prefix="/fast/v2",
                     description="Upload files to attach to tasks.")

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
