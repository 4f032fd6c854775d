"""Codes and links per API key: identifiers claimed (one key each), messages received (by API or mail) and kept
sealed for the key, the newest one handed to a waiting task; a task paused for one is resumed when it arrives."""
import logging
from datetime import datetime

from sqlalchemy import delete, select, update
from sqlalchemy.exc import IntegrityError

from ..credentials.placeholders import arrivals, normalise
from ..crypto import seal, unseal
from ..task_publish import dispatch
from ..task_queries import isoformat
from ..errors import ApiError, invalid
from ..extensions import db
from ..models import CodeAddress, CodeMessage, Task, now_plus
from .extract import code_in, link_in

log = logging.getLogger(__name__)
KEPT_SECONDS = 86400  # a message older than a day is no one's current code
WHAT = {"code": "a one-time code", "link": "a sign-in link"}


def _claimed_elsewhere(identifier):
    return ApiError(409, "Address Claimed", f"'{identifier}' is claimed by another API key: mail to it is kept "
                                            "for that key alone.")


def claim(api_key_id, identifier):
    """Make `identifier` this key's (mail to it is kept for this key alone); (address, created). 409 when another
    key holds it."""
    identifier = normalise(identifier)
    owner = db.session.get(CodeAddress, identifier)
    if owner is not None:
        db.session.rollback()
        if owner.api_key_id != api_key_id:
            raise _claimed_elsewhere(identifier)
        return _address(owner), False
    row = CodeAddress(identifier=identifier, api_key_id=api_key_id)
    db.session.add(row)
    try:
        db.session.commit()
    except IntegrityError:  # claimed meanwhile
        db.session.rollback()
        return claim(api_key_id, identifier)
    return _address(row), True


def claim_for_task(api_key_id, text):
    """At submit, in the submit's transaction: the identifiers a task's `${code:...}`/`${link:...}` name become
    this key's if no key has them (a task waiting for an address claims it), 409 if another key has."""
    for _, identifier in arrivals(text):
        owner = db.session.get(CodeAddress, identifier)
        if owner is None:
            try:
                with db.session.begin_nested():
                    db.session.add(CodeAddress(identifier=identifier, api_key_id=api_key_id))
            except IntegrityError:
                owner = db.session.get(CodeAddress, identifier)
        if owner is not None and owner.api_key_id != api_key_id:
            raise _claimed_elsewhere(identifier)


def _address(row):
    return {"address": row.identifier, "createdAt": row.created_at}


def addresses(api_key_id):
    rows = db.session.execute(select(CodeAddress).where(CodeAddress.api_key_id == api_key_id)
                              .order_by(CodeAddress.identifier)).scalars()
    return {"addresses": [_address(row) for row in rows]}


def release(api_key_id, identifier):
    done = db.session.execute(delete(CodeAddress).where(CodeAddress.identifier == normalise(identifier),
                                                        CodeAddress.api_key_id == api_key_id))
    db.session.commit()
    if not done.rowcount:
        raise ApiError(404, "Address Not Found", f"This API key has not claimed '{identifier}'.")


def claimant(identifier):
    """The API key that claimed `identifier` (the SMTP receiver keeps its mail for that key), or None."""
    return db.session.execute(select(CodeAddress.api_key_id).where(
        CodeAddress.identifier == normalise(identifier))).scalar_one_or_none()


def receive(api_key_id, to, text=None, code=None, link=None, source="api"):
    """Keep the code and link of a message for this key; the code and link are taken from `text` unless given.
    400 when the message holds neither."""
    code = code or code_in(text)
    link = link or link_in(text)
    if not code and not link:
        raise invalid("No one-time code (4 to 10 digits, or letters and digits after the word 'code') and no "
                      "link found in the message: send `code` or `link` explicitly.")
    identifier = normalise(to)
    db.session.execute(delete(CodeMessage).where(CodeMessage.api_key_id == api_key_id,
                                                 CodeMessage.received_at < now_plus(-KEPT_SECONDS)))
    row = CodeMessage(api_key_id=api_key_id, identifier=identifier, has_code=bool(code), has_link=bool(link),
                      sealed=seal({"code": code, "link": link}), source=source)
    db.session.add(row)
    db.session.commit()
    resume_waiting(api_key_id, identifier, [kind for kind, found in (("code", code), ("link", link)) if found])
    return {"to": identifier, "code": bool(code), "link": bool(link)}


def gave_up(kind, identifier, seconds):
    """The error of a task whose wait for a code or link to `identifier` ran out."""
    return (f"Waited {seconds:g} s (CODE_WAIT_SECONDS) for {WHAT[kind]} sent to {identifier}; none arrived. "
            f"Send it with POST /fast/v2/codes {{\"to\": \"{identifier}\", ...}} or by mail to that address "
            "(claimed by this key) while the task waits.")


def waiting_for(kind, identifier, since, until):
    """(the text, hitlInputMetadata) of a task paused until a code or link for `identifier` arrives."""
    text = (f"Waiting for {WHAT[kind]} sent to {identifier} (until {isoformat(until)}, CODE_WAIT_SECONDS): "
            f"send it with POST /fast/v2/codes {{\"to\": \"{identifier}\", ...}} or by mail to that address. The "
            "task goes on when it arrives; it holds no worker meanwhile.")
    return text, {"type": "arrival", "kind": kind, "to": identifier, "waitingSince": isoformat(since),
                  "waitingUntil": isoformat(until)}


def wait_seconds(hitl):
    """How long a paused task's wait for a code or link lasts (the CODE_WAIT_SECONDS of the worker that paused it)."""
    since, until = (datetime.fromisoformat(hitl[name]) for name in ("waitingSince", "waitingUntil"))
    return round((until - since).total_seconds(), 3)


def resume_waiting(api_key_id, identifier, kinds, task_id=None):
    """Resume this key's tasks paused for a code or link (of `kinds`) to `identifier` (or task `task_id` alone):
    pending again, published to the worker that keeps its browser (as an answered question is), whichever machine
    received the message. Returns how many were resumed."""
    kind, to = Task.hitl["kind"].as_string(), Task.hitl["to"].as_string()
    waiting = [Task.api_key_id == api_key_id, Task.status == "input-required", Task.lease_owner.is_(None),
               Task.hitl["type"].as_string() == "arrival", to == normalise(identifier), kind.in_(kinds)]
    if task_id is not None:
        waiting.append(Task.id == task_id)
    resumed = db.session.execute(
        update(Task).where(*waiting).values(status="pending", response=None, input_deadline_at=None,
                                            dispatched_at=None)
        .returning(Task.id, Task.browser_node).execution_options(synchronize_session=False)).all()
    db.session.commit()
    for resumed_id, node in resumed:
        log.info("task %s: the %s it waited for arrived; resumed", resumed_id, "/".join(kinds))
        dispatch(resumed_id, node=node)
    return len(resumed)


def newest(api_key_id, identifier, kind, after_id, since):
    """(id, value) of the newest message for this key's `identifier` holding a `kind` ("code" or "link"),
    received at `since` or later and newer than message `after_id`; None while there is none. One short read."""
    has = CodeMessage.has_code if kind == "code" else CodeMessage.has_link
    try:
        row = db.session.execute(
            select(CodeMessage.id, CodeMessage.sealed).where(
                CodeMessage.api_key_id == api_key_id, CodeMessage.identifier == normalise(identifier), has,
                CodeMessage.received_at >= since, CodeMessage.id > after_id)
            .order_by(CodeMessage.id.desc()).limit(1)).first()
    finally:
        db.session.rollback()  # no transaction stays open across the wait that follows
    return None if row is None else (row.id, unseal(row.sealed)[kind])
