"""Routes of /fast/v2/codes: a caller's SMS or email hook pushes a message; addresses are claimed for mail."""
from flask import g
from flask.views import MethodView

from ..api import RATE_LIMITED
from ..auth import require_api_key
from ..parsing import Blueprint
from ..ratelimits import requests_limit
from . import service
from .schemas import AddressListSchema, AddressSchema, ClaimedAddressSchema, IncomingSchema, ReceivedSchema

blp = Blueprint("codes", __name__, url_prefix="/fast/v2",
                description="One-time codes and sign-in links that arrive by email or SMS, for the tasks waiting "
                            "for them (`${code:ADDRESS}`, `go to ${link:ADDRESS}`).")
blp.before_request(require_api_key)


@blp.route("/codes")
class Codes(MethodView):
    @requests_limit
    @blp.arguments(IncomingSchema)
    @blp.response(202, ReceivedSchema)
    @blp.alt_response(400, schema="Error", description="Invalid request, or no code or link in the text")
    @blp.alt_response(401, schema="Error", description="Invalid API key")
    @blp.alt_response(429, schema="Error", description=RATE_LIMITED)
    def post(self, data):
        """Push a message with a code or a link

        Kept sealed for this API key alone: this key's tasks waiting on `to` take the newest one. The response
        says whether a code and a link were found, never what they are.
        """
        return service.receive(g.api_key.id, data["to"], data.get("text"), data.get("code"), data.get("link"))


@blp.route("/codes/addresses")
class Addresses(MethodView):
    @requests_limit
    @blp.arguments(AddressSchema)
    @blp.response(201, ClaimedAddressSchema)
    @blp.alt_response(200, schema=ClaimedAddressSchema, description="Already claimed by this key")
    @blp.alt_response(400, schema="Error", description="Invalid request")
    @blp.alt_response(401, schema="Error", description="Invalid API key")
    @blp.alt_response(409, schema="Error", description="Claimed by another key")
    @blp.alt_response(429, schema="Error", description=RATE_LIMITED)
    def post(self, data):
        """Claim an address for mail

        The SMTP receiver keeps mail to a claimed address for the key that claimed it, and refuses mail to an
        address no key claimed. One key per address: the first claim wins (a task naming an unclaimed address in
        `${code:...}` or `${link:...}` claims it too).
        """
        address, created = service.claim(g.api_key.id, data["address"])
        return address, 201 if created else 200

    @requests_limit
    @blp.response(200, AddressListSchema)
    @blp.alt_response(401, schema="Error", description="Invalid API key")
    @blp.alt_response(429, schema="Error", description=RATE_LIMITED)
    def get(self):
        """List the key's claimed addresses"""
        return service.addresses(g.api_key.id)


@blp.route("/codes/addresses/<string:address>")
class Address(MethodView):
    @requests_limit
    @blp.response(204)
    @blp.alt_response(401, schema="Error", description="Invalid API key")
    @blp.alt_response(404, schema="Error", description="Not claimed by this key")
    @blp.alt_response(429, schema="Error", description=RATE_LIMITED)
    def delete(self, address):
        """Release a claimed address"""
        service.release(g.api_key.id, address)
