"""Schemas of the delivery log and redelivery endpoints."""
import marshmallow as ma
from marshmallow import fields

from ..schema_base import LenientSchema


class AttemptSchema(ma.Schema):
    attemptedAt = fields.String(required=True)
    statusCode = fields.Integer(allow_none=True, metadata={"description": "null when no response came"})
    error = fields.String(allow_none=True, metadata={"description": "why the attempt failed; null on 2xx"})
    durationMs = fields.Integer(allow_none=True)
    nextAttemptAt = fields.String(allow_none=True, metadata={"description": "when the retry it scheduled is due"})


class DeliverySchema(ma.Schema):
    webhookId = fields.String(required=True, metadata={"description": "the webhook-id header, stable across attempts"})
    status = fields.String(required=True, metadata={
        "description": "the task status the webhook reports", "enum": ["success", "error", "input-required"]})
    url = fields.String(required=True)
    state = fields.String(required=True, metadata={"enum": ["pending", "delivered", "failed"]})
    createdAt = fields.String(required=True)
    deliveredAt = fields.String(allow_none=True)
    nextAttemptAt = fields.String(allow_none=True)
    attempts = fields.List(fields.Nested(AttemptSchema), required=True)


class DeliveryLogSchema(ma.Schema):
    requestId = fields.String(required=True)
    deliveries = fields.List(fields.Nested(DeliverySchema), required=True)


class RedeliverSchema(LenientSchema):
    webhookId = fields.String(load_default=None, allow_none=True, metadata={
        "description": "which delivery to send again; default the task's latest"})
