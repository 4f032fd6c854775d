"""The flask-smorest `Api`, with the API-key security scheme and our error body documented."""
import marshmallow as ma
from flask_smorest import Api as _Api


class ErrorSchema(ma.Schema):
    error = ma.fields.String(required=True, metadata={"description": "Short name of the error"})
    message = ma.fields.String(required=True, metadata={"description": "What went wrong, for a person"})


class Api(_Api):
    ERROR_SCHEMA = ErrorSchema

    def _register_error_handlers(self):
        """Error handlers live in `app.errors`; they answer `{error, message}`."""

    def init_app(self, app, *, spec_kwargs=None):
        super().init_app(app, spec_kwargs=spec_kwargs)
        self.spec.components.security_scheme(
            "ApiKey", {"type": "apiKey", "in": "header", "name": "x-api-key"})


api = Api()
