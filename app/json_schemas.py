"""Callers' JSON Schemas: checked at submit, then validated offline with linear-time regular expressions."""
import json
import time
from contextvars import ContextVar
from fractions import Fraction
from functools import lru_cache
from itertools import islice

import jsonschema
import re2
from jsonschema.exceptions import ValidationError
from jsonschema_specifications import REGISTRY as SPECIFICATIONS
from referencing import Registry
from referencing.exceptions import NoSuchResource, Unresolvable

from . import schema_cost

REFERENCES = ("$ref", "$dynamicRef", "$recursiveRef")
# Keywords whose values are data, not subschemas: nothing in them is a reference or a pattern.
DATA_KEYWORDS = ("enum", "const", "default", "examples")
NAMED_SUBSCHEMAS = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas",
                    "dependencies")
# The budget of one check of a value (docs/response-schemas.md): submit bounds the schema, these bound the
# value's share (its size and depth), whatever the schema's form.
CHECK_SECONDS = 2.0
CHECK_STEPS = 100_000  # keywords evaluated: a second or two of jsonschema at most


class UnsafeSchema(ValueError):
    """A schema that would reach outside its document, or use a pattern RE2 cannot run."""


class CheckTooCostly(Exception):
    """Checking one value against a schema went over its budget (CHECK_SECONDS, CHECK_STEPS) or its stack."""


def _never_retrieve(uri):
    # A caller's schema is resolved inside itself (and the published metaschemas), never over
    # the network or from the filesystem: a remote `$ref` would make the service fetch for the caller.
    raise NoSuchResource(ref=uri)


REGISTRY = Registry(retrieve=_never_retrieve).combine(SPECIFICATIONS)


def _options():
    options = re2.Options()
    options.log_errors = False  # a refused pattern is the caller's 400, not a line in our logs
    return options


OPTIONS = _options()


@lru_cache(maxsize=512)
def _regex(pattern):
    """RE2 (linear time, no backtracking): a caller's pattern cannot hold a worker for minutes."""
    return re2.compile(pattern, OPTIONS)


def _reason(exc):
    reason = exc.args[0] if exc.args else ""
    return reason.decode(errors="replace") if isinstance(reason, bytes) else str(reason)


def _search(pattern, text):
    return _regex(pattern).search(text) is not None


def _pattern(validator, pattern, instance, schema):
    if validator.is_type(instance, "string") and not _search(pattern, instance):
        yield ValidationError(f"{instance!r} does not match {pattern!r}")


def _pattern_properties(validator, patterns, instance, schema):
    if not validator.is_type(instance, "object"):
        return
    for pattern, subschema in patterns.items():
        for key, value in instance.items():
            _on_the_clock()
            if _search(pattern, key):
                yield from validator.descend(value, subschema, path=key, schema_path=pattern)


def _additional_properties(validator, additional, instance, schema):
    """jsonschema's own keyword, with the property names matched against patternProperties by RE2."""
    if not validator.is_type(instance, "object"):
        return
    properties, patterns = schema.get("properties", {}), schema.get("patternProperties", {})
    extras = sorted((key for key in instance if key not in properties
                     and not any(_on_the_clock() or _search(p, key) for p in patterns)), key=str)
    if validator.is_type(additional, "object"):
        for extra in extras:
            yield from validator.descend(instance[extra], additional, path=extra)
    elif not additional and extras:
        named = ", ".join(repr(e) for e in extras)
        if patterns:
            verb = "does" if len(extras) == 1 else "do"
            regexes = ", ".join(repr(p) for p in sorted(patterns))
            yield ValidationError(f"{named} {verb} not match any of the regexes: {regexes}")
        else:
            verb = "was" if len(extras) == 1 else "were"
            yield ValidationError(f"Additional properties are not allowed ({named} {verb} unexpected)")


def _unique_items(validator, unique, instance, schema):
    """jsonschema's keyword in linear time: its fallback for objects and arrays compares every pair."""
    if not unique or not validator.is_type(instance, "array"):
        return
    seen = {}
    for index, item in enumerate(instance):
        _on_the_clock()
        first = seen.setdefault(_comparable(item), index)
        if first != index:
            yield ValidationError(f"the array has non-unique elements (items {first} and {index} are equal)")
            return


def _multiple_of(keyword):
    """jsonschema's keyword, exact where its float division overflows (a 401-digit integer against 0.5); a value
    that is no finite number is no multiple."""
    def run(validator, divisor, instance, schema):
        try:
            yield from list(keyword(validator, divisor, instance, schema))
        except (OverflowError, ValueError):
            try:
                multiple = (Fraction(instance) / Fraction(divisor)).denominator == 1
            except (OverflowError, ValueError, TypeError, ZeroDivisionError):  # inf, nan
                multiple = False
            if not multiple:
                yield ValidationError(f"{_short(instance)} is not a multiple of {_short(divisor)}")
    return run


def _short(number):
    text = repr(number)
    return text if len(text) <= 40 else f"{text[:18]}…{text[-18:]} ({len(text)} digits)"


def _comparable(value):
    """A hashable form under JSON Schema's equality: 1 == 1.0, true != 1, objects whatever their key order."""
    if isinstance(value, bool) or value is None:
        return ("literal", value)
    if isinstance(value, (int, float)):
        return ("number", value)
    if isinstance(value, list):
        return ("array", tuple(_comparable(v) for v in value))
    if isinstance(value, dict):
        return ("object", frozenset((k, _comparable(v)) for k, v in value.items()))
    return ("string", value)


def _format_checker():
    checker = jsonschema.FormatChecker()
    checker.checks("regex", raises=re2.error)(lambda value: not isinstance(value, str) or bool(_regex(value)))
    return checker


FORMAT_CHECKER = _format_checker()


def _subschemas(schema, path=(), named=False):
    """(path, dict) for every object of the schema that can be a (sub)schema; `named`: a map of names to
    subschemas (a property called "enum" is a schema, not data)."""
    if isinstance(schema, dict):
        if not named:
            yield path, schema
        for key, value in schema.items():
            if named or key not in DATA_KEYWORDS:
                yield from _subschemas(value, path + (str(key),), named=not named and key in NAMED_SUBSCHEMAS)
    elif isinstance(schema, list):
        for index, value in enumerate(schema):
            yield from _subschemas(value, path + (str(index),))


def _where(path):
    return "#/" + "/".join(path) if path else "#"


def problems(schema):
    """What makes a caller's schema unsafe to run here (empty when nothing does)."""
    found = []
    for path, node in _subschemas(schema):
        for keyword in REFERENCES:
            ref = node.get(keyword)
            if isinstance(ref, str) and not _local(ref):
                found.append(f"{keyword} {ref!r} at {_where(path)} points outside the schema: only "
                             "references inside it (such as '#/$defs/x') are resolved; nothing is fetched.")
        patterns = [node["pattern"]] if isinstance(node.get("pattern"), str) else []
        if isinstance(node.get("patternProperties"), dict):
            patterns += list(node["patternProperties"])
        for pattern in patterns:
            try:
                _regex(pattern)
            except re2.error as exc:
                found.append(f"the pattern {json.dumps(pattern)} at {_where(path)} is not supported: "
                             f"patterns run on RE2 (no backreferences or lookaround): {_reason(exc)}.")
        if "unevaluatedProperties" in node and _has_pattern_properties(schema):
            found.append(f"unevaluatedProperties at {_where(path)} cannot be combined with "
                         "patternProperties here.")
    return found


def _local(ref):
    """A reference into the document itself, or to a published metaschema (bundled, never fetched)."""
    if ref.startswith("#"):
        return True
    try:
        SPECIFICATIONS.get_or_retrieve(ref.split("#", 1)[0])
    except (NoSuchResource, Unresolvable):
        return False
    return True


def _has_pattern_properties(schema):
    return any("patternProperties" in node for _, node in _subschemas(schema))


def written_size_problem(schema):
    """The bound on the subschemas a schema document holds, counted up to the bound (milliseconds, whatever the
    document's size): None when within it."""
    bound = schema_cost.MAX_WRITTEN_SUBSCHEMAS
    if sum(1 for _ in islice(_subschemas(schema), bound + 1)) > bound:
        return (f"it holds over {bound:,} subschemas (objects outside enum, const, default and examples), the "
                "bound on a response schema's written size.")
    return None


def check(schema):
    """Raise SchemaError for an invalid schema, UnsafeSchema for one this service will not run."""
    found = written_size_problem(schema)  # before every walk of the whole document
    if found:
        raise UnsafeSchema(found)
    found = problems(schema)  # first: they say more than the metaschema's "is not a 'regex'"
    if found:
        raise UnsafeSchema(" ".join(found))
    jsonschema.validators.validator_for(schema).check_schema(schema, format_checker=FORMAT_CHECKER)
    found = schema_cost.problems(schema)  # last: it reads the keywords the metaschema has just checked
    if found:
        raise UnsafeSchema(" ".join(found))


def validator(schema):
    """A validator for a caller's schema: references resolve inside it only, patterns run on RE2, and every
    keyword it evaluates counts against the budget of the check under way (first_error's).

    A reference it cannot resolve raises referencing.exceptions.Unresolvable while validating."""
    base = jsonschema.validators.validator_for(schema)
    # jsonschema matches these with Python's backtracking `re`; submit refuses the combination.
    refuse_unevaluated = _has_pattern_properties(schema) and "unevaluatedProperties" in base.VALIDATORS
    return _safe_class(base, refuse_unevaluated)(schema, registry=REGISTRY)


@lru_cache(maxsize=32)
def _safe_class(base, refuse_unevaluated):
    """One class per draft (building one costs milliseconds: never per check)."""
    keywords = {**base.VALIDATORS, "pattern": _pattern, "patternProperties": _pattern_properties,
                "additionalProperties": _additional_properties, "uniqueItems": _unique_items}
    if "multipleOf" in keywords:
        keywords["multipleOf"] = _multiple_of(keywords["multipleOf"])
    if refuse_unevaluated:
        keywords["unevaluatedProperties"] = _refuse_unevaluated
    return jsonschema.validators.extend(base, {name: _metered(keyword) for name, keyword in keywords.items()})


class _Meter:
    """A cooperative budget: jsonschema has no timeout, and a subprocess per answer would cost more than most
    checks; every keyword, and every turn of a keyword's loop over patterns, keys or items, is a point where the
    check can stop."""

    def __init__(self, seconds, steps):
        self.seconds, self.steps = seconds, steps
        self.deadline, self.left = time.monotonic() + seconds, steps

    def tick(self, steps=1):
        self.left -= steps
        if self.left < 0 or time.monotonic() > self.deadline:
            raise CheckTooCostly(f"checking the answer against the schema went over its budget "
                                 f"({self.seconds:g} s, {self.steps:,} keyword evaluations).")


_METER = ContextVar("json_schemas_meter", default=None)  # the budget of the check under way in this thread


def _on_the_clock():
    """Inside a keyword's own loop (a pattern against a key, an item): the budget's clock, no keyword counted,
    so one keyword over 5,000 patterns and 5,000 keys stops at the budget too. Returns None."""
    meter = _METER.get()
    if meter is not None:
        meter.tick(steps=0)


def _metered(keyword):
    def run(validator, value, instance, schema):
        meter = _METER.get()
        if meter is not None:
            meter.tick()
        return keyword(validator, value, instance, schema)
    return run


def _refuse_unevaluated(validator, value, instance, schema):
    yield ValidationError("unevaluatedProperties with patternProperties is not supported.")


def first_error(schema, instance, seconds=CHECK_SECONDS, steps=CHECK_STEPS):
    """The most relevant ValidationError of `instance` against a caller's schema, or None.

    Raises UnsafeSchema for a reference the schema cannot resolve inside itself (nothing is fetched)
    or a pattern RE2 cannot run (both refused at submit; a schema from elsewhere, e.g. an MCP server's), and
    CheckTooCostly when the check goes over its budget."""
    token = _METER.set(_Meter(seconds, steps))
    try:
        return jsonschema.exceptions.best_match(validator(schema).iter_errors(instance))
    except RecursionError:
        raise CheckTooCostly("the check recursed too deeply (the schema's references or the answer nest too "
                             "deeply).") from None
    except Unresolvable as exc:
        raise UnsafeSchema(f"the schema's reference {getattr(exc, 'ref', '')!r} cannot be resolved inside "
                           "it (remote references are not fetched).") from None
    except re2.error as exc:
        raise UnsafeSchema(f"the schema has a pattern RE2 cannot run ({_reason(exc)}).") from None
    finally:
        _METER.reset(token)
