"""Routes of /fast/v2/remote-dispatch."""
from flask import Response, g, jsonify
from flask.views import MethodView

from ..api import NOT_JSON, RATE_LIMITED, TOO_LARGE
from ..auth import require_api_key
from ..errors import ApiError
from ..parsing import Blueprint
from ..ratelimits import polls_limit, requests_limit
from .. import task_queries
from . import recording_store, service
from ..task_results import RecordingSchema, TaskResultSchema
from .schemas import (
    AcceptedSchema, InputAnswerSchema, ListQuerySchema, SubmitHeadersSchema, SubmitSchema, TaskListSchema,
    WaitTimeoutSchema,
)

blp = Blueprint("remote-dispatch", __name__, url_prefix="/fast/v2",
                description="Submit automation tasks and read their results.")
blp.before_request(require_api_key)


def _task_link(path, method, description):
    return {"operationRef": "#/paths/" + path.replace("/", "~1") + "/" + method,
            "parameters": {"request_id": "$response.body#/requestId"}, "description": description}


# What a submit's requestId is for (OpenAPI links: clients and schemathesis' stateful tests follow them).
_TASK = "/fast/v2/remote-dispatch/responses/{request_id}"
TASK_LINKS = {
    "GetTask": _task_link(_TASK, "get", "Poll the task"),
    "CancelTask": _task_link(_TASK + "/cancel", "post", "Cancel the task"),
    "AnswerTask": _task_link(_TASK + "/input", "post", "Answer the task's question"),
    "TaskWebhooks": _task_link(_TASK + "/webhooks", "get", "The task's webhook deliveries"),
}


@blp.route("/remote-dispatch")
class Submit(MethodView):
    @requests_limit
    @blp.arguments(SubmitSchema)
    @blp.arguments(SubmitHeadersSchema, location="headers", error_status_code=400)
    @blp.response(202, AcceptedSchema)
    @blp.alt_response(200, schema=TaskResultSchema, description="With wait: the finished task")
    @blp.alt_response(400, schema="Error", description="Invalid request")
    @blp.alt_response(401, schema="Error", description="Invalid API key")
    @blp.alt_response(404, schema="Error", description="Browser window not found")
    @blp.alt_response(408, schema=WaitTimeoutSchema, description="With wait: the task did not finish in time")
    @blp.alt_response(409, schema="Error", description="The profile is being written (persist) by another task or session")
    @blp.alt_response(413, schema="Error", description=TOO_LARGE)
    @blp.alt_response(415, schema="Error", description=NOT_JSON)
    @blp.alt_response(422, schema="Error",
                      description="Disallowed callbackHeaders, or Idempotency-Key reused with another body")
    @blp.alt_response(429, schema="Error", description=RATE_LIMITED)
    # flask-smorest has no links argument, and a documented response replaces its generated one whole.
    @blp.doc(responses={"202": {"description": "Accepted", "links": TASK_LINKS, "content": {
        "application/json": {"schema": {"$ref": "#/components/schemas/Accepted"}}}}})
    def post(self, data, headers):
        """Submit a task

        Accepts the task at once and returns its requestId; the task runs in the background.
        With `wait: true` the call blocks until the task is over and returns it like a poll.
        """
        key = headers.get("idempotencyKey")
        if data["wait"]:
            return jsonify(service.submit_and_wait(g.api_key.id, data, key))
        request_id, replayed = service.submit(g.api_key.id, data, key)
        return {"requestId": request_id}, 202, {"Idempotent-Replayed": "true"} if replayed else {}


@blp.route("/remote-dispatch/responses")
class TaskList(MethodView):
    @requests_limit
    @blp.arguments(ListQuerySchema, location="query", error_status_code=400)
    @blp.response(200, TaskListSchema)
    @blp.alt_response(400, schema="Error", description="Invalid status, limit or cursor")
    @blp.alt_response(401, schema="Error", description="Invalid API key")
    @blp.alt_response(429, schema="Error", description=RATE_LIMITED)
    def get(self, query):
        """List the key's tasks

        Newest first; follow `nextCursor` for older ones.
        """
        return task_queries.list_tasks(g.api_key.id, **query)


@blp.route("/remote-dispatch/responses/<string:request_id>")
class Result(MethodView):
    @polls_limit
    @blp.response(200, TaskResultSchema)
    @blp.alt_response(401, schema="Error", description="Invalid API key")
    @blp.alt_response(404, schema="Error", description="Unknown request, or another key's")
    @blp.alt_response(429, schema="Error", description=RATE_LIMITED)
    def get(self, request_id):
        """Get a task's status and result"""
        return task_queries.result(task_queries.get_task(g.api_key.id, request_id))


@blp.route("/remote-dispatch/responses/<string:request_id>/gif")
class Gif(MethodView):
    @polls_limit
    @blp.response(200, {"type": "string", "format": "binary"}, content_type="image/gif",
                  description="The animated GIF: one frame per browser action")
    @blp.alt_response(401, schema="Error", description="Invalid API key")
    @blp.alt_response(404, schema="Error", description="Unknown request, another key's, or no GIF recorded")
    @blp.alt_response(429, schema="Error", description=RATE_LIMITED)
    def get(self, request_id):
        """Get the GIF recording of a task (generateGif)"""
        data = task_queries.task_gif(g.api_key.id, request_id)
        if data is None:
            raise ApiError(404, "GIF Not Found", f"The request '{request_id}' has no GIF recording "
                           "(submit with generateGif: true in a browser mode; it is stored when the task ends).")
        return Response(data, mimetype="image/gif", headers={"Cache-Control": "private, max-age=300"})


@blp.route("/remote-dispatch/responses/<string:request_id>/recording")
class Recording(MethodView):
    @polls_limit
    @blp.response(200, RecordingSchema, description="The run's rrweb events (gzip Content-Encoding when accepted), "
                  "with a marker per actionTrace step")
    @blp.alt_response(401, schema="Error", description="Invalid API key")
    @blp.alt_response(404, schema="Error", description="Unknown request, another key's, or no recording")
    @blp.alt_response(429, schema="Error", description=RATE_LIMITED)
    def get(self, request_id):
        """Get the recording of a task's browser run"""
        data = recording_store.compressed(g.api_key.id, request_id)
        if data is None:
            raise ApiError(404, "Recording Not Found", f"The request '{request_id}' has no recording (browser runs "
                           "in cloud_browser mode or a kept session are recorded, and the recording is stored when "
                           "the run ends or pauses; client mode is not recorded; recordings are deleted after "
                           "RECORDING_TTL_SECONDS).")
        return recording_store.response(data)


@blp.route("/remote-dispatch/responses/<string:request_id>/input")
class Input(MethodView):
    @requests_limit
    @blp.arguments(InputAnswerSchema)
    @blp.response(202, AcceptedSchema)
    @blp.alt_response(400, schema="Error", description="Invalid request")
    @blp.alt_response(401, schema="Error", description="Invalid API key")
    @blp.alt_response(404, schema="Error", description="Unknown request, or another key's")
    @blp.alt_response(409, schema="Error", description="The request is not waiting for input")
    @blp.alt_response(413, schema="Error", description=TOO_LARGE)
    @blp.alt_response(415, schema="Error", description=NOT_JSON)
    @blp.alt_response(429, schema="Error", description=RATE_LIMITED)
    def post(self, data, request_id):
        """Answer a task's question

        Resumes a task in `input-required` with the user's answer; it runs on as `pending`.
        """
        return {"requestId": service.answer_input(g.api_key.id, request_id, data)}


@blp.route("/remote-dispatch/responses/<string:request_id>/cancel")
class Cancel(MethodView):
    @requests_limit
    @blp.response(200, TaskResultSchema, description="Cancelled: the task ended as error 'cancelled'")
    @blp.alt_response(202, schema=TaskResultSchema,
                      description="Cancel requested: the running task ends before its next action")
    @blp.alt_response(401, schema="Error", description="Invalid API key")
    @blp.alt_response(404, schema="Error", description="Unknown request, or another key's")
    @blp.alt_response(409, schema="Error", description="The task already finished")
    @blp.alt_response(429, schema="Error", description=RATE_LIMITED)
    def post(self, request_id):
        """Cancel a task"""
        body, ended = service.cancel(g.api_key.id, request_id)
        return body, 200 if ended else 202
