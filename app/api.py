"""The flask-smorest `Api`, with the API-key security scheme and our error body documented."""
import marshmallow as ma
from apispec import BasePlugin
from apispec.ext.marshmallow.common import resolve_schema_cls
from flask_smorest import Api as _Api


class ErrorSchema(ma.Schema):
    error = ma.fields.String(required=True, metadata={"description": "Short name of the error"})
    message = ma.fields.String(required=True, metadata={"description": "What went wrong, for a person"})


# The descriptions of the error responses every blueprint documents alike.
RATE_LIMITED = "Rate limit of the key's plan exceeded (see Retry-After)"
TOO_LARGE = "Request body larger than MAX_BODY_BYTES"
NOT_JSON = "A body without Content-Type: application/json"


class SchemaExtras(BasePlugin):
    """Adds a marshmallow schema's `OPENAPI_EXTRAS` (object-level JSON Schema such as `anyOf`, which
    field metadata cannot express) to its component, so the document says what validation does."""

    def schema_helper(self, name, definition, schema=None, **kwargs):
        # apispec writes a nullable nested schema (OpenAPI 3.0) as anyOf [{type: object, nullable},
        # {$ref}], whose first branch admits any object: it stands for null only.
        for prop in (definition.get("properties") or {}).values():
            for branch in prop.get("anyOf", ()):
                if branch == {"type": "object", "nullable": True}:
                    branch["enum"] = [None]
        return getattr(resolve_schema_cls(schema), "OPENAPI_EXTRAS", None) if schema is not None else None


class Api(_Api):
    ERROR_SCHEMA = ErrorSchema

    def _register_error_handlers(self):
        """Error handlers live in `app.errors`; they answer `{error, message}`."""

    def init_app(self, app, *, spec_kwargs=None):
        super().init_app(app, spec_kwargs={"extra_plugins": [SchemaExtras()], **(spec_kwargs or {})})
        self.spec.components.security_scheme(
            "ApiKey", {"type": "apiKey", "in": "header", "name": "x-api-key"})


api = Api()


def swagger_ui_assets():
    """Swagger UI's files (pinned by requirements.txt: flask-swagger-ui ships swagger-ui-dist), served
    by the service itself at /docs/assets/ so /docs works with no internet and no CDN."""
    import os

    import flask_swagger_ui
    from flask import Blueprint

    folder = os.path.join(os.path.dirname(flask_swagger_ui.__file__), "dist")
    return Blueprint("swagger_ui_assets", __name__, static_folder=folder, static_url_path=SWAGGER_UI_ASSETS)


SWAGGER_UI_ASSETS = "/docs/assets"
