"""Named profiles per API key: claimed by a persist use, read at a browser's start, replaced at its end, listed,
deleted, expired. Readers take the last saved state; one writer at a time (a second persist use is a 409 naming the
holder while the first runs); a save replaces the whole state in one UPDATE, so no reader ever sees half of one."""
import logging
import re

from flask import current_app
from sqlalchemy import delete, exists, or_, select, update
from sqlalchemy.exc import IntegrityError

from ..crypto import seal, unseal
from ..errors import ApiError
from ..extensions import db
from ..models import CloudSession, Profile, Task, now, now_plus
from . import state as profile_state

log = logging.getLogger(__name__)
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")
NAME_RULE = "1 to 100 characters: letters, digits, '.', '_' and '-', starting with a letter or a digit"
RUNNING = ("pending", "input-required")


def claim(api_key_id, name, holder):
    """Make `holder` (a task or session id, not committed yet) the profile's one writer, creating the profile if the
    key has none of that name; 409 naming the current writer while it runs. In the caller's transaction: the row
    stays locked until it commits, so two claims never both win."""
    if db.session.execute(select(Profile.id).where(Profile.api_key_id == api_key_id, Profile.name == name)
                          ).first() is None:
        try:
            with db.session.begin_nested():
                db.session.add(Profile(api_key_id=api_key_id, name=name, size_bytes=0))
        except IntegrityError:  # created meanwhile by a concurrent claim
            pass
    writer = db.session.execute(select(Profile.writer).where(Profile.api_key_id == api_key_id, Profile.name == name)
                                .with_for_update()).scalar_one()
    if writer and writer != holder and _running(writer):  # a new statement: it sees what committed while we waited
        what = "task" if db.session.get(Task, writer) is not None else "cloud browser session"
        raise ApiError(409, "Profile In Use",
                       f"Profile '{name}' is being written by {what} {writer} (persist: true); one writer at a time. "
                       "Wait until it ends, or use the profile without persist.")
    db.session.execute(update(Profile).where(Profile.api_key_id == api_key_id, Profile.name == name)
                       .values(writer=holder))


def _running(holder):
    return db.session.execute(select(or_(
        exists().where(Task.id == holder, Task.status.in_(RUNNING)),
        exists().where(CloudSession.id == holder, CloudSession.status != "ended")))).scalar()


def load(api_key_id, name):
    """The profile's saved state (None: the key has no such profile, or nothing saved yet); it counts as a use."""
    sealed = db.session.execute(
        update(Profile).where(Profile.api_key_id == api_key_id, Profile.name == name).values(last_used_at=now())
        .returning(Profile.state_sealed)).scalar_one_or_none()
    db.session.commit()
    return unseal(sealed) if sealed else None


def save(api_key_id, name, holder, state):
    """Replace the profile's state with `state` if `holder` is still its writer, and let go of it; returns what the
    trace says. Over PROFILE_MAX_BYTES nothing is saved (the profile keeps its earlier state)."""
    most, refused = current_app.config["PROFILE_MAX_BYTES"], state.get("tooLarge")
    size = most + 1 if refused else profile_state.size(state)
    values = {"writer": None, "last_used_at": now()}
    if size <= most:
        values.update(state_sealed=seal(state), size_bytes=size, updated_at=now())
    saved = db.session.execute(update(Profile).where(Profile.api_key_id == api_key_id, Profile.name == name,
                                                     Profile.writer == holder).values(**values)
                               .returning(Profile.id)).first() is not None
    db.session.commit()
    if not saved:
        return f"profile '{name}' not saved: it was deleted while in use"
    if refused:
        return (f"profile '{name}' not saved: its state is over PROFILE_MAX_BYTES ({most}): the IndexedDB of "
                f"{refused['origin']} passed it ({refused['bytes']} bytes) and was not read further; it keeps its "
                "earlier state")
    if size > most:
        return (f"profile '{name}' not saved: its state is {size} bytes, over PROFILE_MAX_BYTES ({most}); "
                "it keeps its earlier state")
    return f"profile '{name}' saved ({profile_state.summary(state)}, {size} bytes)"


def rename_writer(holder, new):
    """The session `holder` took a pooled browser's id (app/sessions/service.start_here): it writes under that id.
    In the caller's transaction."""
    db.session.execute(update(Profile).where(Profile.writer == holder).values(writer=new))


def release(holder):
    """`holder` ends without saving (its browser could not be read): the profile is free for the next writer."""
    db.session.execute(update(Profile).where(Profile.writer == holder).values(writer=None))
    db.session.commit()


def written_by(holder):
    """(api_key_id, name) of the profile `holder` writes, or None."""
    return db.session.execute(select(Profile.api_key_id, Profile.name).where(Profile.writer == holder)).first()


def listing(api_key_id):
    rows = db.session.execute(select(Profile).where(Profile.api_key_id == api_key_id).order_by(Profile.name)
                              ).scalars().all()
    return {"profiles": [{"name": row.name, "size": row.size_bytes, "createdAt": row.created_at,
                          "updatedAt": row.updated_at, "lastUsedAt": row.last_used_at} for row in rows]}


def remove(api_key_id, name):
    """Delete the key's profile; 404 if it has none of that name. A writer running now saves nothing at its end."""
    gone = db.session.execute(delete(Profile).where(Profile.api_key_id == api_key_id, Profile.name == name)).rowcount
    db.session.commit()
    if not gone:
        raise ApiError(404, "Profile Not Found", f"No profile '{name}' for this API key.")


def purge_idle():
    """Delete the profiles no task or session used for PROFILE_IDLE_DAYS (none being written); returns how many."""
    seconds = int(current_app.config["PROFILE_IDLE_DAYS"] * 86400)
    purged = db.session.execute(delete(Profile).where(Profile.last_used_at < now_plus(-seconds),
                                                      Profile.writer.is_(None))).rowcount
    db.session.commit()
    if purged:
        log.info("deleted %d profiles unused for PROFILE_IDLE_DAYS", purged)
    return purged
