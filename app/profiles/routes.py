"""Routes of named browser profiles (/fast/v2/profiles): list and delete the key's profiles."""
from flask import g
from flask.views import MethodView

from ..api import RATE_LIMITED
from ..auth import require_api_key
from ..parsing import Blueprint
from ..ratelimits import requests_limit
from . import service
from .schemas import ProfileListSchema

blp = Blueprint("profiles", __name__, url_prefix="/fast/v2",
                description="Named browser profiles: a sign-in kept between tasks and sessions.")
blp.before_request(require_api_key)


@blp.route("/profiles")
class Profiles(MethodView):
    @requests_limit
    @blp.response(200, ProfileListSchema)
    @blp.alt_response(401, schema="Error", description="Invalid API key")
    @blp.alt_response(429, schema="Error", description=RATE_LIMITED)
    def get(self):
        """List the key's profiles

        Each with the size of its saved state and when it was created, last saved and last used. Their contents
        (cookies, localStorage, IndexedDB) are stored encrypted and never returned.
        """
        return service.listing(g.api_key.id)


@blp.route("/profiles/<string:name>")
class NamedProfile(MethodView):
    @requests_limit
    @blp.response(204)
    @blp.alt_response(401, schema="Error", description="Invalid API key")
    @blp.alt_response(404, schema="Error", description="No profile of that name for this key")
    @blp.alt_response(429, schema="Error", description=RATE_LIMITED)
    def delete(self, name):
        """Delete a profile

        A task or session writing it now saves nothing at its end (its trace says so).
        """
        service.remove(g.api_key.id, name)
