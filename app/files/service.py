"""Storing uploads (in the database, scoped to the API key), signed upload policies, expiry."""
import mimetypes
import secrets
import time

from flask import current_app
from itsdangerous import BadSignature, URLSafeSerializer
from sqlalchemy import delete, select
from sqlalchemy.exc import IntegrityError

from ..errors import ApiError, invalid
from ..extensions import db
from ..models import ApiKey, StoredFile, now_plus

# Multipart framing around the file (boundaries, part headers, the presigned fields).
MULTIPART_OVERHEAD = 64 * 1024
UPLOAD_SOURCE = "remoteDispatchUpload"  # the SDK's inputVariables file reference: {"source", "id", ...}


def new_file_key():
    return "file_" + secrets.token_urlsafe(24)


def upload_limit():
    return current_app.config["MAX_UPLOAD_BYTES"]


def too_large():
    return ApiError(413, "Payload Too Large",
                    f"The file is larger than the upload limit of {upload_limit()} bytes (MAX_UPLOAD_BYTES).")


def refuse_oversized_request(request):
    """Before the body is read: refuse a declared length over the limit, and cap what may be read."""
    cap = upload_limit() + MULTIPART_OVERHEAD
    if request.content_length is not None and request.content_length > cap:
        raise too_large()
    request.max_content_length = cap  # a chunked body is cut off (413) once it passes the cap


def store(api_key_id, storage, key=None, filename=None, max_bytes=None):
    """Save an uploaded werkzeug FileStorage; returns the API view of the stored file."""
    limit = min(upload_limit(), max_bytes) if max_bytes is not None else upload_limit()
    data = storage.stream.read(limit + 1)  # werkzeug spooled the part to disk: read at most limit + 1
    if len(data) > limit:
        raise too_large()
    filename = _clean_name(filename or storage.filename or "upload")
    declared = storage.mimetype if storage.mimetype and storage.mimetype.isprintable() else None
    content_type = (declared if declared != "application/octet-stream" else None) \
        or mimetypes.guess_type(filename)[0] or "application/octet-stream"
    stored = StoredFile(key=key or new_file_key(), api_key_id=api_key_id, filename=filename,
                        content_type=content_type, size=len(data), data=data)
    db.session.add(stored)
    try:
        db.session.commit()
    except IntegrityError:
        db.session.rollback()
        raise ApiError(409, "Conflict", f"A file was already uploaded with key '{stored.key}'; "
                                        "ask for a new presigned post.") from None
    return view(stored)


def view(stored):
    return {"key": stored.key, "filename": stored.filename, "size": stored.size,
            "contentType": stored.content_type}


def _clean_name(name):
    # Control characters (NUL among them, which Postgres text cannot hold) have no place in a name.
    name = "".join(c for c in name if c.isprintable())
    name = name.replace("\\", "/").rsplit("/", 1)[-1].strip() or "upload"
    return name[:500]


# The SDK's presigned flow: a policy signed with our key, bound to the API key, the file's key
# and name, and the size limit; it expires after PRESIGNED_POST_TTL_SECONDS.

def _signer():
    return URLSafeSerializer(current_app.config["ENCRYPTION_KEY"], salt="presigned-file-upload")


def presign(api_key_id, filename, upload_url):
    key = new_file_key()
    policy = {"a": api_key_id, "k": key, "f": _clean_name(filename), "n": upload_limit(),
              "e": int(time.time()) + int(current_app.config["PRESIGNED_POST_TTL_SECONDS"])}
    return {"url": upload_url, "fields": {"key": key, "policy": _signer().dumps(policy)}}


def forbidden(message):
    return ApiError(403, "Forbidden", message)


def store_presigned(fields, storage):
    """The unauthenticated upload: the signed policy is the permission."""
    try:
        policy = _signer().loads(fields["policy"])
    except BadSignature:
        raise forbidden("The upload policy's signature is not valid (tampered with, or not issued "
                        "by this service).") from None
    if not isinstance(policy, dict) or policy.get("k") != fields["key"]:
        raise forbidden("The key field does not match the signed upload policy.")
    if policy.get("e", 0) < time.time():
        raise forbidden("The upload policy has expired; ask for a new presigned post.")
    owner = db.session.get(ApiKey, policy.get("a"))
    if owner is None or owner.revoked_at is not None:
        raise forbidden("The API key that asked for this upload policy is no longer valid.")
    return store(owner.id, storage, key=policy["k"], filename=policy["f"], max_bytes=policy["n"])


# Submit: every referenced file must be one of the caller's uploads.

def referenced_keys(data):
    """The file keys a submit refers to: attachments[].key and the SDK's inputVariables file references."""
    keys = [item["key"] for item in data.get("attachments") or []]

    def walk(value):
        if isinstance(value, dict):
            if value.get("source") == UPLOAD_SOURCE and isinstance(value.get("id"), str):
                keys.append(value["id"])
            else:
                for item in value.values():
                    walk(item)
        elif isinstance(value, list):
            for item in value:
                walk(item)

    walk(data.get("inputVariables") or {})
    return list(dict.fromkeys(keys))


def require_files(api_key_id, keys):
    """400 naming the first key that is not a file uploaded with this API key."""
    if not keys:
        return
    found = set(db.session.execute(select(StoredFile.key).where(
        StoredFile.key.in_(keys), StoredFile.api_key_id == api_key_id)).scalars())
    for key in keys:
        if key not in found:
            raise invalid(f"attachment key '{key}' is not a file uploaded with this API key "
                          "(upload it with POST /fast/v2/files; files expire after FILE_TTL_SECONDS).")


def purge_expired():
    """Delete files older than FILE_TTL_SECONDS; returns how many."""
    ttl = current_app.config["FILE_TTL_SECONDS"]
    purged = db.session.execute(delete(StoredFile).where(StoredFile.created_at < now_plus(-ttl))).rowcount
    db.session.commit()
    return purged
