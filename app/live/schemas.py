"""Schemas of the live view: the `/live` query and answer, and the messages a viewer may send (nothing else)."""
import marshmallow as ma
from marshmallow import RAISE, fields, validate

from ..schema_base import LenientSchema

BUTTONS = ("left", "middle", "right", "none")
COORDINATE = validate.Range(min=0, max=100000)
DELTA = validate.Range(min=-10000, max=10000)
MODIFIERS = validate.Range(min=0, max=15)  # Alt 1, Ctrl 2, Meta 4, Shift 8 (CDP's bit field)


class LiveQuerySchema(LenientSchema):
    mode = fields.String(load_default="view", validate=validate.OneOf(("view", "control")), metadata={
        "description": "`view` (the default): frames only. `control`: the viewer can also take control, click, "
                       "type and scroll."})


class LiveUrlSchema(ma.Schema):
    liveUrl = fields.String(required=True, metadata={
        "description": "A page of ours showing the browser live; its signed token is the whole permission."})
    mode = fields.String(required=True, metadata={"description": "view or control"})
    expiresAt = fields.String(required=True, metadata={"description": "When the URL stops working"})


class _Message(ma.Schema):
    class Meta:
        unknown = RAISE  # a field we do not know is refused, never passed on


class MouseMessage(_Message):
    type = fields.String(required=True, validate=validate.OneOf(("mouse",)))
    event = fields.String(required=True, validate=validate.OneOf(("down", "up", "move")))
    x = fields.Float(required=True, validate=COORDINATE)
    y = fields.Float(required=True, validate=COORDINATE)
    button = fields.String(load_default="left", validate=validate.OneOf(BUTTONS))
    clickCount = fields.Integer(strict=True, load_default=1, validate=validate.Range(min=0, max=3))
    modifiers = fields.Integer(strict=True, load_default=0, validate=MODIFIERS)


class WheelMessage(_Message):
    type = fields.String(required=True, validate=validate.OneOf(("wheel",)))
    x = fields.Float(required=True, validate=COORDINATE)
    y = fields.Float(required=True, validate=COORDINATE)
    deltaX = fields.Float(load_default=0, validate=DELTA)
    deltaY = fields.Float(required=True, validate=DELTA)


class KeyMessage(_Message):
    type = fields.String(required=True, validate=validate.OneOf(("key",)))
    event = fields.String(required=True, validate=validate.OneOf(("down", "up")))
    key = fields.String(required=True, validate=validate.Length(min=1, max=32))
    code = fields.String(load_default="", validate=validate.Length(max=32))
    keyCode = fields.Integer(strict=True, load_default=0, validate=validate.Range(min=0, max=255))
    modifiers = fields.Integer(strict=True, load_default=0, validate=MODIFIERS)


class TextMessage(_Message):
    type = fields.String(required=True, validate=validate.OneOf(("text",)))
    text = fields.String(required=True, validate=validate.Length(min=1, max=1000))


class ControlMessage(_Message):
    type = fields.String(required=True, validate=validate.OneOf(("take", "handback")))


VIEWER_MESSAGES = {"mouse": MouseMessage(), "wheel": WheelMessage(), "key": KeyMessage(), "text": TextMessage(),
                   "take": ControlMessage(), "handback": ControlMessage()}
