"""Request and response schemas of the browser-window channel and the extension actions."""
import marshmallow as ma
from marshmallow import ValidationError, fields, validate, validates_schema

from ..schema_base import LenientSchema
from ..task_results import TaskResultSchema
from .service import MAX_POLL_SECONDS, SDK_ACTIONS

STATES = ("online", "offline", "closed")


class RegisterSchema(LenientSchema):
    label = fields.String(allow_none=True, validate=validate.Length(max=200),
                          metadata={"description": "A name for the window, shown in lists"})


class WindowSchema(ma.Schema):
    browserWindowId = fields.String(required=True)
    label = fields.String(allow_none=True)
    state = fields.String(required=True, metadata={
        "enum": list(STATES), "description": "online: its extension polled within WINDOW_OFFLINE_SECONDS"})
    createdAt = fields.DateTime(required=True)
    lastSeenAt = fields.DateTime(allow_none=True)
    closedAt = fields.DateTime(allow_none=True)


class WindowListSchema(ma.Schema):
    windows = fields.List(fields.Nested(WindowSchema), required=True)


class WindowListQuerySchema(LenientSchema):
    includeClosed = fields.Boolean(load_default=False)


class PollSchema(LenientSchema):
    browserWindowIds = fields.List(fields.String(validate=validate.Length(min=1, max=64)), required=True,
                                   validate=validate.Length(min=1, max=50))
    running = fields.List(fields.String(validate=validate.Length(max=36)), load_default=list,
                          validate=validate.Length(max=200), metadata={
                              "description": "Commands the extension runs now (not handed out again)"})
    wait = fields.Float(load_default=20, validate=validate.Range(min=0, max=MAX_POLL_SECONDS), metadata={
        "description": f"Seconds to hold the request open for a command (at most {MAX_POLL_SECONDS})"})


class CommandSchema(ma.Schema):
    commandId = fields.String(required=True)
    browserWindowId = fields.String(required=True)
    requestId = fields.String(allow_none=True, metadata={"description": "The task it is for, if any"})
    name = fields.String(required=True)
    args = fields.Dict(required=True)
    expiresAt = fields.String(required=True)


class PollResultSchema(ma.Schema):
    commands = fields.List(fields.Nested(CommandSchema), required=True)
    unknown = fields.List(fields.String(), required=True, metadata={
        "description": "Window ids this key does not own (or closed): register the window again"})


ACTION_STATUSES = ("success", "error", "aborted")


class CommandResultSchema(LenientSchema):
    status = fields.String(required=True, validate=validate.OneOf(ACTION_STATUSES))
    data = fields.Raw(allow_none=True, load_default=None)
    error = fields.String(allow_none=True, load_default=None, validate=validate.Length(max=20000))


class AcceptedResultSchema(ma.Schema):
    accepted = fields.Boolean(required=True, metadata={
        "description": "false when the command already had a result or had been withdrawn"})


class ActionSchema(LenientSchema):
    name = fields.String(required=True, validate=validate.OneOf(
        SDK_ACTIONS, error="action.name must be one of: " + ", ".join(SDK_ACTIONS) + "."))


class ExtensionActionSchema(LenientSchema):
    action = fields.Dict(required=True, metadata={"description": "{name, ...}: the SDK's action request"})
    actionExecutionId = fields.String(required=True, validate=validate.Length(min=1, max=200))
    browserWindowId = fields.String(required=True, validate=validate.Length(min=1, max=64))
    timeout = fields.Float(allow_none=True, validate=validate.Range(min=1), metadata={
        "description": "Seconds to wait for the window (capped below the SDK's 300 s)"})

    @validates_schema
    def _known_action(self, data, **_):
        try:
            ActionSchema().load({"name": data.get("action", {}).get("name")})
        except ValidationError as exc:
            raise ValidationError(exc.messages["name"], "action") from None


class ExtensionActionResultSchema(ma.Schema):
    status = fields.String(required=True, metadata={"enum": list(ACTION_STATUSES)})
    data = fields.String(allow_none=True, metadata={"description": "The action's result, JSON-encoded"})
    error = fields.String(allow_none=True)


class WindowTaskSchema(TaskResultSchema):
    prompt = fields.String()


class WindowTaskListSchema(ma.Schema):
    tasks = fields.List(fields.Nested(WindowTaskSchema), required=True)
