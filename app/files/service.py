"""Files of an API key (in the database): uploads, signed upload policies, what its browsers download, expiry."""
import mimetypes
import os
import secrets
import stat
import time

from flask import current_app
from itsdangerous import BadSignature, URLSafeSerializer
from sqlalchemy import delete, func, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import load_only

from ..task_queries import isoformat, older_than
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
    stored = StoredFile(key=key or new_file_key(), api_key_id=api_key_id, filename=filename,
                        content_type=_content_type(filename, declared), size=len(data), data=data)
    db.session.add(stored)
    try:
        db.session.commit()
    except IntegrityError:
        db.session.rollback()
        raise ApiError(409, "Conflict", f"A file was already uploaded with key '{stored.key}'; "
                                        "ask for a new presigned post.") from None
    return view(stored)


def _content_type(filename, declared=None):
    return (declared if declared != "application/octet-stream" else None) \
        or mimetypes.guess_type(filename)[0] or "application/octet-stream"


def view(stored):
    return {"key": stored.key, "filename": stored.filename, "size": stored.size,
            "contentType": stored.content_type}


def listed(stored):
    """A file as GET /files lists it: where a download came from, and when it was stored."""
    return {**view(stored), "requestId": stored.task_id, "sessionId": stored.session_id,
            "createdAt": isoformat(stored.created_at)}


def owned_file(api_key_id, key):
    """The key's file, or 404 (unknown and another key's files look the same)."""
    stored = db.session.get(StoredFile, key) if isinstance(key, str) and len(key) <= 200 else None
    if stored is None or stored.api_key_id != api_key_id:
        raise ApiError(404, "File Not Found", f"No file '{key}' for this API key (files expire after "
                                              "FILE_TTL_SECONDS).")
    return stored


def list_files(api_key_id, limit=20, cursor=None):
    """The key's files (uploads and downloads), newest first, `limit` at a time; `cursor` continues a page."""
    query = select(StoredFile).where(StoredFile.api_key_id == api_key_id)
    if cursor:
        query = query.where(older_than(*cursor, model=StoredFile, id_column="key"))
    # The bytes stay in the database: a page loads the names and sizes only.
    query = query.options(load_only(StoredFile.key, StoredFile.filename, StoredFile.size, StoredFile.content_type,
                                    StoredFile.task_id, StoredFile.session_id, StoredFile.created_at))
    rows = db.session.execute(query.order_by(StoredFile.created_at.desc(), StoredFile.key.desc())
                              .limit(limit + 1)).scalars().all()
    more = len(rows) > limit
    rows = rows[:limit]
    return {"files": [listed(row) for row in rows],
            "nextCursor": (rows[-1].created_at, rows[-1].key) if more else None}


# Downloads: what a browser saved, moved out of its reach (app/sandbox/box.collect_downloads), becomes a file of
# the key, within the caps.

def download_caps():
    """(the largest one downloaded file may be and the setting that says so, all of one task's files)."""
    config = current_app.config
    per_file = min((config["DOWNLOAD_MAX_FILE_BYTES"], "DOWNLOAD_MAX_FILE_BYTES"),
                   (config["MAX_UPLOAD_BYTES"], "MAX_UPLOAD_BYTES"))
    return per_file, config["DOWNLOAD_MAX_TASK_BYTES"]


def keep_downloads(api_key_id, folder, names, task_id=None, session_id=None):
    """Store the downloaded files `names` of `folder` as files of the key; returns, per name, {"name", "file"}
    (its view) or {"name", "leftOut"} (why not: over a cap, or not a regular file). A file left out is removed: it
    is never served, and would only take the machine's disk."""
    (file_cap, file_setting), task_cap = download_caps()
    config = current_app.config
    session_cap, session_count = config["DOWNLOAD_MAX_SESSION_BYTES"], config["DOWNLOAD_MAX_SESSION_FILES"]
    used = _stored(StoredFile.task_id == task_id)[1] if task_id else 0
    session_files, session_used = _stored(StoredFile.session_id == session_id) if session_id else (0, 0)
    kept = []
    for name in names:
        path = os.path.join(folder, name)
        try:  # no link is followed: only a regular file the browser wrote is read
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError:
            continue
        with os.fdopen(fd, "rb") as source:
            info = os.fstat(source.fileno())
            size = info.st_size
            if not stat.S_ISREG(info.st_mode):
                left_out = "not a regular file"
            elif size > file_cap:
                left_out = f"{size} bytes, over the limit of {file_cap} bytes for one downloaded file ({file_setting})"
            elif task_id and used + size > task_cap:
                left_out = (f"{size} bytes, which would take this task's downloads past {task_cap} bytes "
                            "(DOWNLOAD_MAX_TASK_BYTES)")
            elif session_id and session_files >= session_count:
                left_out = (f"this session already has {session_files} downloaded files "
                            "(DOWNLOAD_MAX_SESSION_FILES)")
            elif session_id and session_used + size > session_cap:
                left_out = (f"{size} bytes, which would take this session's downloads past {session_cap} bytes "
                            "(DOWNLOAD_MAX_SESSION_BYTES)")
            else:
                data = source.read(file_cap + 1)[:file_cap]
                filename = _clean_name(name)
                stored = StoredFile(key=new_file_key(), api_key_id=api_key_id, filename=filename,
                                    content_type=_content_type(filename), size=len(data), data=data,
                                    task_id=task_id, session_id=session_id)
                db.session.add(stored)
                used += len(data)
                session_used += len(data)
                session_files += 1
                kept.append({"name": name, "file": view(stored)})
                continue
        kept.append({"name": name, "leftOut": left_out})
        try:
            os.unlink(path)
        except OSError:
            pass
    db.session.commit()
    return kept


def _stored(where):
    """(how many, how many bytes) of the files `where` selects."""
    return tuple(db.session.execute(select(func.count(), func.coalesce(func.sum(StoredFile.size), 0))
                                    .where(where)).one())


def task_files(task_id):
    """The files a task's browser downloaded, in the order they were stored."""
    rows = db.session.execute(
        select(StoredFile).options(load_only(StoredFile.key, StoredFile.filename, StoredFile.size,
                                             StoredFile.content_type, StoredFile.created_at))
        .where(StoredFile.task_id == task_id).order_by(StoredFile.created_at, StoredFile.key)).scalars()
    return [view(row) for row in rows]


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
    """400 naming the first key that is not a file of this API key (an upload, or a download of its browsers)."""
    if not keys:
        return
    found = set(db.session.execute(select(StoredFile.key).where(
        StoredFile.key.in_(keys), StoredFile.api_key_id == api_key_id)).scalars())
    for key in keys:
        if key not in found:
            raise invalid(f"attachment key '{key}' is not a file of this API key "
                          "(upload it with POST /fast/v2/files; files expire after FILE_TTL_SECONDS).")


def purge_expired():
    """Delete files older than FILE_TTL_SECONDS; returns how many."""
    ttl = current_app.config["FILE_TTL_SECONDS"]
    purged = db.session.execute(delete(StoredFile).where(StoredFile.created_at < now_plus(-ttl))).rowcount
    db.session.commit()
    return purged
