"""Stored credentials per API key: created, listed, rotated, deleted; read (unsealed) only by a worker at a task's
start, and checked by name at submit."""
from sqlalchemy import delete, select, update
from sqlalchemy.exc import IntegrityError

from ..crypto import seal, unseal
from ..errors import ApiError, invalid
from ..extensions import db
from ..models import Credential, now
from .placeholders import FIELDS, credential_names

VALUE_FIELDS = {"username": "username", "password": "password", "totp": "code"}


def _not_found(name):
    return ApiError(404, "Credential Not Found", f"No credential named '{name}' for this API key.")


def _shown(row):
    return {"name": row.name, "sites": row.sites, "fields": row.fields, "createdAt": row.created_at,
            "updatedAt": row.updated_at}


def _values(data):
    values = {field: data[field] for field in VALUE_FIELDS if data.get(field)}
    return values, [VALUE_FIELDS[field] for field in VALUE_FIELDS if field in values]


def _sites(data):
    return list(dict.fromkeys(site.strip().lower() for site in data["sites"]))


def create(api_key_id, data):
    values, fields = _values(data)
    row = Credential(api_key_id=api_key_id, name=data["name"], sites=_sites(data), fields=fields,
                     values_sealed=seal(values))
    db.session.add(row)
    try:
        db.session.commit()
    except IntegrityError:
        db.session.rollback()
        raise ApiError(409, "Credential Exists", f"This key already has a credential named '{data['name']}'; "
                                                 "rotate it with PUT /fast/v2/credentials/{name}.") from None
    return _shown(row)


def listing(api_key_id):
    rows = db.session.execute(select(Credential).where(Credential.api_key_id == api_key_id)
                              .order_by(Credential.name)).scalars()
    return {"credentials": [_shown(row) for row in rows]}


def _row(api_key_id, name):
    row = db.session.execute(select(Credential).where(Credential.api_key_id == api_key_id,
                                                      Credential.name == name)).scalar_one_or_none()
    if row is None:
        raise _not_found(name)
    return row


def one(api_key_id, name):
    return _shown(_row(api_key_id, name))


def rotate(api_key_id, name, data):
    values, fields = _values(data)
    done = db.session.execute(update(Credential).where(Credential.api_key_id == api_key_id, Credential.name == name)
                              .values(values_sealed=seal(values), fields=fields, sites=_sites(data),
                                      updated_at=now()))
    db.session.commit()
    if not done.rowcount:
        raise _not_found(name)
    return one(api_key_id, name)


def remove(api_key_id, name):
    done = db.session.execute(delete(Credential).where(Credential.api_key_id == api_key_id, Credential.name == name))
    db.session.commit()
    if not done.rowcount:
        raise _not_found(name)


def check_named(api_key_id, text):
    """At submit: every `${cred:NAME.field}` in `text` names a credential of this key that has that field (400
    otherwise, naming it)."""
    wanted = credential_names(text)
    if not wanted:
        return
    have = dict(db.session.execute(select(Credential.name, Credential.fields).where(
        Credential.api_key_id == api_key_id, Credential.name.in_(wanted))).all())
    for name, fields in sorted(wanted.items()):
        for field in sorted(fields):
            if field not in FIELDS:
                raise invalid(f"${{cred:{name}.{field}}}: a credential's fields are "
                              + ", ".join(FIELDS) + ".")
        if name not in have:
            raise invalid(f"${{cred:{name}.…}}: this API key has no stored credential named '{name}' "
                          "(create it with POST /fast/v2/credentials).")
        for field in sorted(fields - set(have[name])):
            raise invalid(f"${{cred:{name}.{field}}}: the credential '{name}' has no {field} "
                          f"(it has {', '.join(have[name])}).")


def for_task(api_key_id, text):
    """{placeholder name ("cred:NAME.field"): (value, sites)} of the credentials `text` names, unsealed (a worker,
    at a task's start). A credential deleted since the submit is simply absent: its placeholder stays unfilled."""
    wanted = credential_names(text)
    if not wanted:
        return {}
    rows = db.session.execute(select(Credential).where(Credential.api_key_id == api_key_id,
                                                       Credential.name.in_(wanted))).scalars().all()
    found = {}
    for row in rows:
        values = unseal(row.values_sealed)
        for field, shown in VALUE_FIELDS.items():
            if field in values:
                found[f"cred:{row.name}.{shown}"] = (values[field], list(row.sites))
    db.session.rollback()
    return found
