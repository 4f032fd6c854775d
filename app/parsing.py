"""Request parsing for every API route: JSON bodies are decoded strictly, and refused with a clear 4xx."""
import json
import math

import flask_smorest
from webargs import core
from webargs.flaskparser import FlaskParser, is_json_request
from werkzeug.exceptions import RequestEntityTooLarge

from .errors import ApiError

# Deeper bodies are refused before any code walks them recursively (the decoder, the NUL check,
# marshmallow, the JSON column): no legitimate request nests anywhere near this.
MAX_JSON_DEPTH = 64


def invalid_body(message):
    return ApiError(400, "Invalid Request", message)


def _refuse_constant(name):
    raise ValueError(f"{name} is not a JSON number")


def _finite_float(text):
    value = float(text)
    if math.isinf(value):
        raise ValueError(f"the number {text[:40]} is out of range")
    return value


def strict_json(raw):
    """Decode a JSON body that Postgres, marshmallow and our own code can all take; ApiError if not.

    Refused: invalid UTF-8 or JSON, NaN/Infinity and out-of-range numbers (JSON has neither, and
    Postgres refuses them), lone surrogates such as "\\ud800" (not encodable as UTF-8), nesting
    deeper than MAX_JSON_DEPTH, and anything but an object at the top.
    """
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise invalid_body("body: not UTF-8 text; send JSON encoded as UTF-8.") from None
    try:
        value = json.loads(text, parse_constant=_refuse_constant, parse_float=_finite_float)
    except RecursionError:
        raise _too_deep() from None
    except ValueError as exc:  # JSONDecodeError, NaN/Infinity, 1e999, over-long integers
        raise invalid_body(_invalid_json_message(exc)) from None
    _check_values(value)
    if not isinstance(value, dict):
        kind = "an array" if isinstance(value, list) else "a single value"
        raise invalid_body(f"body: must be a JSON object ({{\"name\": value, ...}}), not {kind}.")
    return value


def _invalid_json_message(exc):
    if isinstance(exc, json.JSONDecodeError):
        return "body: Invalid JSON body."
    return f"body: Invalid JSON body: {str(exc)[:200]}."


def _too_deep():
    return invalid_body(f"body: JSON nested deeper than {MAX_JSON_DEPTH} levels.")


def _check_values(value):
    """Depth and text of every value, walked with a stack (recursion is what deep bodies break)."""
    stack = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, str):
            _check_text(item)
        elif isinstance(item, (dict, list)):
            if depth >= MAX_JSON_DEPTH:
                raise _too_deep()
            if isinstance(item, dict):
                for key, member in item.items():
                    _check_text(key)
                    stack.append((member, depth + 1))
            else:
                stack.extend((member, depth + 1) for member in item)


def _check_text(text):
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise invalid_body("body: contains a lone UTF-16 surrogate (such as \\ud800), "
                           "which is not text; send valid Unicode.") from None


class StrictParser(FlaskParser):
    """webargs' Flask parser with `strict_json` bodies and an explicit Content-Type requirement."""

    def load_json(self, req, schema):
        if not req.content_length and "chunked" not in req.headers.get("Transfer-Encoding", "").lower():
            return core.missing  # no body at all (optional bodies; required fields say what is missing)
        if not is_json_request(req):
            raise ApiError(415, "Unsupported Media Type",
                           "Send the body as JSON with the header Content-Type: application/json.")
        raw = req.get_data(cache=True)  # over MAX_CONTENT_LENGTH by Content-Length: 413 here
        limit = req.max_content_length
        if limit is not None and len(raw) >= limit:
            # A chunked body declares no length: Werkzeug stops reading at the limit and returns
            # what it read, which would then fail as truncated JSON.
            raise RequestEntityTooLarge()
        return strict_json(raw) if raw else core.missing


class Blueprint(flask_smorest.Blueprint):
    """The API's blueprints: their arguments are read by `StrictParser`."""

    ARGUMENTS_PARSER = StrictParser()


def refuse_nul_characters():
    """`before_request` hook: a NUL (U+0000) in the path, the query string or a urlencoded form is 400 on every route.

    Postgres text cannot hold NUL, so an id, a name or a token carrying one would otherwise reach a query
    and fail there; no route has a use for one. JSON bodies are checked by their schemas (LenientSchema).
    """
    from flask import request

    if "\x00" in request.path:
        raise _nul_in("path")
    for name, value in request.args.items(multi=True):
        if "\x00" in name or "\x00" in value:
            raise _nul_in("query: " + name.replace("\x00", "\\u0000"))
    # (A multipart body is an upload: its route reads it, within the upload's limits.)
    if request.mimetype == "application/x-www-form-urlencoded":
        for name, value in request.form.items(multi=True):
            if "\x00" in name or "\x00" in value:
                raise _nul_in(name.replace("\x00", "\\u0000"))


def _nul_in(where):
    return invalid_body(f"{where}: must not contain NUL characters (\\u0000).")
