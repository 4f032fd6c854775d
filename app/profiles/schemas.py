"""Response schemas of /fast/v2/profiles."""
import marshmallow as ma
from marshmallow import fields


class ProfileSchema(ma.Schema):
    name = fields.String(required=True)
    size = fields.Integer(required=True, metadata={"description": "Bytes of the saved state (before encryption)"})
    createdAt = fields.DateTime(required=True)
    updatedAt = fields.DateTime(required=True, metadata={"description": "When a persist use last saved it"})
    lastUsedAt = fields.DateTime(required=True, metadata={
        "description": "When a task or session last used it; PROFILE_IDLE_DAYS after this it is deleted"})


class ProfileListSchema(ma.Schema):
    profiles = fields.List(fields.Nested(ProfileSchema), required=True)
