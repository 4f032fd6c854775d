"""What the schemas of every blueprint build on: LenientSchema (unknown fields ignored, NUL refused, documented
patterns matched in full), FullMatch, StrictBoolean, the list Cursor, the URL patterns the document states, and the
outbound check a caller's URL passes at submit time."""
import re
from datetime import datetime, timedelta, timezone

import marshmallow as ma
from flask import current_app
from marshmallow import EXCLUDE, ValidationError, fields, pre_load, validate, validates_schema

from .egress.policy import Policy, UnsafeUrl, normalise

# What HTTP/1.1 can carry in a field value (RFC 9110 §5.5: visible chars, SP, HTAB, obs-text).
HEADER_VALUE = re.compile(r"(?:[\x21-\x7e\x80-\xff][\x20\x21-\x7e\x80-\xff\t]*)?")


# URL patterns the document states and validation applies (re.fullmatch), so the two agree: a host
# name or IPv4 address (no userinfo, no IPv6 literal), an optional port in range, then anything.
_PORT = r"(:(6553[0-5]|655[0-2][0-9]|65[0-4][0-9]{2}|6[0-4][0-9]{3}|[1-5][0-9]{4}|[0-9]{1,4}))?"
# (Explicit classes, not \S: Python and JSON Schema (ECMA) regexes disagree on what is whitespace.)
_HOST_PORT_REST = r"[A-Za-z0-9.-]+" + _PORT + r"([/?#][^\u0000-\u0020\u007f]*)?$"
HTTPS_URL = r"^https://" + _HOST_PORT_REST
HTTP_URL = r"^https?://" + _HOST_PORT_REST
ONE_LINE = r"^[^\r\n]*$"


class FullMatch(validate.Regexp):
    """`validate.Regexp` over the whole text: re.match with `$` would accept a final "\\n" ("work\\n")."""

    def __call__(self, value):
        if self.regex.fullmatch(value) is None:
            raise ValidationError(self._format_error(value))
        return value


class LenientSchema(ma.Schema):
    """Unknown fields are ignored, as the contract promises; NUL characters are refused; documented patterns hold."""

    class Meta:
        unknown = EXCLUDE

    @pre_load
    def _no_nul_characters(self, data, **_):
        """Postgres text cannot hold U+0000: refuse it here (400) rather than fail at the insert.
        Only the schema's own fields: unknown ones are ignored, whatever they hold."""
        if isinstance(data, dict):
            known = {field.data_key or name for name, field in self.load_fields.items()}
            for name, value in data.items():
                if name in known and _has_nul(value):
                    if name == "callbackHeaders" and isinstance(value, dict) and not _has_nul(list(value)):
                        # a header value: a 400 naming the header, like its other unsendable values
                        name += "." + next(k for k, v in value.items() if _has_nul(v))
                    raise ValidationError("must not contain NUL characters (\\u0000).", name)
        return data

    @validates_schema
    def _documented_patterns(self, data, **_):
        """A field's documented `pattern` is matched in full (re.fullmatch: `$` alone accepts a final "\\n"), so
        the document and validation agree; a field's own validator, where it has one, has said why first."""
        errors = {}
        for name, field in self.load_fields.items():
            pattern, value = field.metadata.get("pattern"), data.get(name)
            if isinstance(pattern, str) and isinstance(value, str) and re.fullmatch(pattern, value) is None:
                errors[field.data_key or name] = ["does not have the documented form (the pattern " + pattern + ")."]
        if errors:
            raise ValidationError(errors)


def _has_nul(value):
    if isinstance(value, str):
        return "\x00" in value
    if isinstance(value, dict):
        return any(_has_nul(k) or _has_nul(v) for k, v in value.items())
    if isinstance(value, list):
        return any(_has_nul(v) for v in value)
    return False


class StrictBoolean(fields.Boolean):
    """JSON true or false only (marshmallow would also take "yes", 1, "on", ...), as documented."""

    truthy = {True}
    falsy = {False}

    def _deserialize(self, value, attr, data, **kwargs):
        if not isinstance(value, bool):  # 0 and 1 are in {False} and {True}: equal and of the same hash
            raise self.make_error("invalid")
        return value


_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_MICROSECOND = timedelta(microseconds=1)
CURSOR_PATTERN = r"^([0-9]{1,16}\.[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})?$"


class Cursor(fields.Field):
    """`<createdAt in microseconds since 1970>.<requestId>` of the last task of the previous page.

    Every string of this form is a position in the list (the tasks created before it), so the
    document's pattern says exactly which cursors are accepted; "" is the first page.
    """

    def _serialize(self, value, attr, obj, **kwargs):
        if value is None:
            return None
        created_at, task_id = value
        if created_at.tzinfo is None:  # SQLite (embedded) gives naive UTC
            created_at = created_at.replace(tzinfo=timezone.utc)
        return f"{(created_at - _EPOCH) // _MICROSECOND}.{task_id}"

    pattern = CURSOR_PATTERN  # a list of other rows (GET /files) names its own ids

    def _deserialize(self, value, attr, data, **kwargs):
        if not isinstance(value, str) or not re.fullmatch(self.pattern, value):
            raise ValidationError("not a cursor returned by this API (use nextCursor).")
        if value == "":
            return None  # the first page, as with no cursor at all
        micros, row_id = value.split(".", 1)
        return _EPOCH + int(micros) * _MICROSECOND, row_id


def check_outbound(url, schemes, pattern, what):
    """The documented `pattern`, then app.egress's checks at submit time: forms parsers disagree on
    always; the addresses unless private URLs are allowed (then names need not resolve yet)."""
    if not re.fullmatch(pattern, url):
        if url.lower().startswith(tuple(f"{scheme}://" for scheme in schemes)):
            try:
                normalise(url, schemes)
            except UnsafeUrl as exc:  # a URL of the right scheme: say why, when the egress parser knows
                raise ValidationError(f"{what} ({exc}).") from None
        raise ValidationError(f"{what}.")
    try:
        if current_app.config["ALLOW_PRIVATE_URLS"]:
            normalise(url, schemes)
        else:
            Policy.from_config(current_app.config).check_url(url, schemes)
    except UnsafeUrl as exc:
        raise ValidationError(f"{exc}.") from None
