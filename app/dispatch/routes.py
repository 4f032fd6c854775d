"""Routes of /fast/v2/remote-dispatch."""
from flask import g
from flask.views import MethodView
from flask_smorest import Blueprint

from ..auth import require_api_key
from . import service
from .schemas import AcceptedSchema, InputAnswerSchema, SubmitSchema, TaskResultSchema

blp = Blueprint("remote-dispatch", __name__, url_prefix="/fast/v2",
                description="Submit automation tasks and read their results.")
blp.before_request(require_api_key)

ERRORS = {"400": "Invalid Request", "401": "Unauthorized"}


@blp.route("/remote-dispatch")
class Submit(MethodView):
    @blp.arguments(SubmitSchema)
    @blp.response(202, AcceptedSchema)
    @blp.alt_response(400, schema="Error", description="Invalid request")
    @blp.alt_response(401, schema="Error", description="Invalid API key")
    @blp.alt_response(404, schema="Error", description="Browser window not found")
    @blp.alt_response(422, schema="Error", description="Disallowed callbackHeaders")
    def post(self, data):
        """Submit a task

        Accepts the task at once and returns its requestId; the task runs in the background.
        """
        return {"requestId": service.submit(g.api_key.id, data)}


@blp.route("/remote-dispatch/responses/<string:request_id>")
class Result(MethodView):
    @blp.response(200, TaskResultSchema)
    @blp.alt_response(401, schema="Error", description="Invalid API key")
    @blp.alt_response(404, schema="Error", description="Unknown request, or another key's")
    def get(self, request_id):
        """Get a task's status and result"""
        return service.result(service.get_task(g.api_key.id, request_id))


@blp.route("/remote-dispatch/responses/<string:request_id>/input")
class Input(MethodView):
    @blp.arguments(InputAnswerSchema)
    @blp.response(202, AcceptedSchema)
    @blp.alt_response(400, schema="Error", description="Invalid request")
    @blp.alt_response(401, schema="Error", description="Invalid API key")
    @blp.alt_response(404, schema="Error", description="Unknown request, or another key's")
    @blp.alt_response(409, schema="Error", description="The request is not waiting for input")
    def post(self, data, request_id):
        """Answer a task's question

        Resumes a task in `input-required` with the user's answer; it runs on as `pending`.
        """
        return {"requestId": service.answer_input(g.api_key.id, request_id, data)}
