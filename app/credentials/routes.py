"""Routes of stored credentials (/fast/v2/credentials): create, list, show, rotate, delete; values never come out."""
from flask import g
from flask.views import MethodView

from ..api import RATE_LIMITED
from ..auth import require_api_key
from ..parsing import Blueprint
from ..ratelimits import requests_limit
from . import service
from .schemas import CredentialListSchema, CredentialSchema, CredentialValuesSchema, NewCredentialSchema

blp = Blueprint("credentials", __name__, url_prefix="/fast/v2",
                description="Stored credentials: sign-ins a task types by name (`${cred:NAME.password}`), only "
                            "into pages on their sites; the model and every response see the name alone.")
blp.before_request(require_api_key)
NOT_FOUND = "No credential of that name for this key"


@blp.route("/credentials")
class Credentials(MethodView):
    @requests_limit
    @blp.arguments(NewCredentialSchema)
    @blp.response(201, CredentialSchema)
    @blp.alt_response(400, schema="Error", description="Invalid request (a site, the TOTP URI, the name)")
    @blp.alt_response(401, schema="Error", description="Invalid API key")
    @blp.alt_response(409, schema="Error", description="The key has a credential of that name")
    @blp.alt_response(429, schema="Error", description=RATE_LIMITED)
    def post(self, data):
        """Store a credential

        Its values are sealed with the service's encryption key and never returned: this response and every
        later one show its name, sites and which fields it has.
        """
        return service.create(g.api_key.id, data)

    @requests_limit
    @blp.response(200, CredentialListSchema)
    @blp.alt_response(401, schema="Error", description="Invalid API key")
    @blp.alt_response(429, schema="Error", description=RATE_LIMITED)
    def get(self):
        """List the key's credentials (names, sites and fields only)"""
        return service.listing(g.api_key.id)


@blp.route("/credentials/<string:name>")
class NamedCredential(MethodView):
    @requests_limit
    @blp.response(200, CredentialSchema)
    @blp.alt_response(401, schema="Error", description="Invalid API key")
    @blp.alt_response(404, schema="Error", description=NOT_FOUND)
    @blp.alt_response(429, schema="Error", description=RATE_LIMITED)
    def get(self, name):
        """Show a credential (name, sites and fields only)"""
        return service.one(g.api_key.id, name)

    @requests_limit
    @blp.arguments(CredentialValuesSchema)
    @blp.response(200, CredentialSchema)
    @blp.alt_response(400, schema="Error", description="Invalid request")
    @blp.alt_response(401, schema="Error", description="Invalid API key")
    @blp.alt_response(404, schema="Error", description=NOT_FOUND)
    @blp.alt_response(429, schema="Error", description=RATE_LIMITED)
    def put(self, data, name):
        """Rotate a credential

        The values and sites given replace all the stored ones; a task that starts after this types the new ones.
        """
        return service.rotate(g.api_key.id, name, data)

    @requests_limit
    @blp.response(204)
    @blp.alt_response(401, schema="Error", description="Invalid API key")
    @blp.alt_response(404, schema="Error", description=NOT_FOUND)
    @blp.alt_response(429, schema="Error", description=RATE_LIMITED)
    def delete(self, name):
        """Delete a credential"""
        service.remove(g.api_key.id, name)
