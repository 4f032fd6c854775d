"""Request and response bodies of replay scripts."""
import marshmallow as ma
from marshmallow import fields, validate

from ..schema_base import LenientSchema

class TaskScriptSchema(ma.Schema):
    requestId = fields.String(required=True)
    version = fields.Integer(required=True)
    parameters = fields.List(fields.String(), metadata={"description": "{{name}}s: inputVariables of a replay"})
    secrets = fields.List(fields.String(), metadata={"description": "${name}s: secretVariables of a replay"})
    healed = fields.List(fields.Integer(), metadata={
        "description": "Steps (numbered from 1) the model planned in this run; the others were replayed"})
    script = fields.Dict(required=True, metadata={"description": "The script (submit it as `script`)"})
    text = fields.String(required=True, metadata={
        "description": "The same steps as a built-in planner prompt (docs/agent.md, Built-in planner)"})


class SaveScriptSchema(LenientSchema):
    requestId = fields.String(required=True, metadata={"description": "A successful web task of this key"})
    name = fields.String(required=True, validate=validate.Length(min=1, max=200))
    parameters = fields.Dict(keys=fields.String(), allow_none=True, metadata={
        "description": "Default inputVariables of its replays"})


class VersionSchema(ma.Schema):
    version = fields.Integer()
    requestId = fields.String(allow_none=True, metadata={"description": "The run it was recorded from"})
    healed = fields.List(fields.Integer())
    createdAt = fields.String()


class SavedScriptSchema(ma.Schema):
    scriptId = fields.String(required=True)
    name = fields.String()
    parameters = fields.Dict()
    createdAt = fields.String()
    version = fields.Integer(metadata={"description": "The latest version, which a replay runs"})
    versions = fields.List(fields.Nested(VersionSchema))
    script = fields.Dict()
    text = fields.String()


class ScriptListSchema(ma.Schema):
    scripts = fields.List(fields.Nested(SavedScriptSchema))
