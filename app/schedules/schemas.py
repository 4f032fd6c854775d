"""Request and response bodies of /fast/v2/schedules."""
import marshmallow as ma
from marshmallow import ValidationError, fields, validate

from ..dispatch.schemas import SubmitSchema
from ..schema_base import Cursor, LenientSchema

OVERLAPS = ("skip", "queue", "allow")
CATCH_UPS = ("none", "once")
SCHEDULE_CURSOR = r"^$|^[0-9]{1,16}\.[A-Za-z0-9-]{1,36}$"


class TaskBody(fields.Dict):
    """A submit body, checked by the submit schema itself (a body a submit refuses is refused here with the same
    problem, under `task`); kept as given, and loaded again at each fire."""

    def _deserialize(self, value, attr, data, **kwargs):
        value = super()._deserialize(value, attr, data, **kwargs)
        errors = SubmitSchema().validate(value)
        if errors:
            raise ValidationError(errors)
        if not value.get("prompt") and not any(value.get(k) for k in ("replayOf", "script", "scriptId")):
            raise ValidationError({"prompt": ["a task needs a prompt (or replayOf, script or scriptId)."]})
        return {name: item for name, item in value.items() if name != "wait"}


_NAME = validate.Length(min=1, max=200, error="a name has 1 to 200 characters.")
_CRON = validate.Length(min=1, max=200, error="cron: five fields, e.g. '0 7 * * 1-5'.")


class ScheduleCreateSchema(LenientSchema):
    name = fields.String(required=True, validate=_NAME)
    cron = fields.String(required=True, validate=_CRON, metadata={
        "description": "Five fields (minute hour day-of-month month day-of-week), e.g. `0 7 * * 1-5`; read in "
                       "timeZone. Fires at most every SCHEDULE_MIN_INTERVAL_SECONDS."})
    timeZone = fields.String(load_default="UTC", metadata={"description": "IANA zone name, e.g. Europe/Oslo"})
    task = TaskBody(required=True, metadata={
        "description": "The body of POST /fast/v2/remote-dispatch each run submits (validated as a submit is)"})
    overlap = fields.String(load_default="skip", validate=validate.OneOf(OVERLAPS), metadata={
        "description": "A fire while the previous run still goes: skip it, queue it (runs once that run ends), "
                       "or allow a second run"})
    catchUp = fields.String(load_default="once", validate=validate.OneOf(CATCH_UPS), metadata={
        "description": "Fires missed (beat was down): none = skip them, once = one run for all of them"})


class SchedulePatchSchema(LenientSchema):
    name = fields.String(validate=_NAME)
    cron = fields.String(validate=_CRON)
    timeZone = fields.String()
    task = TaskBody()
    overlap = fields.String(validate=validate.OneOf(OVERLAPS))
    catchUp = fields.String(validate=validate.OneOf(CATCH_UPS))


class ScheduleCursor(Cursor):
    pattern = SCHEDULE_CURSOR


class ListQuerySchema(LenientSchema):
    limit = fields.Integer(load_default=20, validate=validate.Range(min=1, max=100))
    cursor = ScheduleCursor(metadata={"type": "string", "pattern": SCHEDULE_CURSOR,
                              "description": "nextCursor of the previous page (empty: the first page)"})


class LastRunSchema(ma.Schema):
    requestId = fields.String(required=True)
    fireTime = fields.String(allow_none=True)
    status = fields.String(required=True)
    completedAt = fields.String(allow_none=True)
    text = fields.String(allow_none=True, metadata={"description": "The run's response.text once it ended"})


class ScheduleSchema(ma.Schema):
    scheduleId = fields.String(required=True)
    name = fields.String(required=True)
    cron = fields.String(required=True)
    timeZone = fields.String(required=True)
    task = fields.Dict(required=True, metadata={
        "description": "The submit body; the values of secretVariables and callbackHeaders, callbackSecret, proxy "
                       "and mcpServers' credentials are not shown"})
    overlap = fields.String(required=True, metadata={"enum": list(OVERLAPS)})
    catchUp = fields.String(required=True, metadata={"enum": list(CATCH_UPS)})
    status = fields.String(required=True, metadata={"enum": ["active", "paused"]})
    pausedReason = fields.String(allow_none=True)
    failuresInRow = fields.Integer(required=True)
    nextRuns = fields.List(fields.String(), required=True, metadata={
        "description": "The next fire times (ISO 8601, UTC); empty while paused"})
    lastRun = fields.Nested(LastRunSchema, allow_none=True)
    lastSkipped = fields.String(allow_none=True, metadata={"description": "Why the last fire made no run, if so"})
    createdAt = fields.String(required=True)


class ScheduleListSchema(ma.Schema):
    schedules = fields.List(fields.Nested(ScheduleSchema), required=True)
    nextCursor = ScheduleCursor(allow_none=True, metadata={"type": "string", "pattern": SCHEDULE_CURSOR})
