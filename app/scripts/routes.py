"""Routes of replay scripts: a task's script and saved scripts (/fast/v2/scripts)."""
from flask import g
from flask.views import MethodView

from ..api import RATE_LIMITED
from ..auth import require_api_key
from ..parsing import Blueprint
from ..ratelimits import polls_limit, requests_limit
from . import service
from .schemas import SavedScriptSchema, SaveScriptSchema, ScriptListSchema, TaskScriptSchema

blp = Blueprint("scripts", __name__, url_prefix="/fast/v2",
                description="Replay scripts: run a successful task again without the model.")
blp.before_request(require_api_key)


@blp.route("/remote-dispatch/responses/<string:request_id>/script")
class TaskScript(MethodView):
    @polls_limit
    @blp.response(200, TaskScriptSchema)
    @blp.alt_response(401, schema="Error", description="Invalid API key")
    @blp.alt_response(404, schema="Error", description="Unknown request, another key's, or no script")
    @blp.alt_response(429, schema="Error", description=RATE_LIMITED)
    def get(self, request_id):
        """Get a task's replay script

        The browser steps of a successful web run, as JSON (submit it as `script`, or the task as `replayOf`)
        and as built-in planner text.
        """
        return service.task_script(g.api_key.id, request_id)


@blp.route("/scripts")
class Scripts(MethodView):
    @requests_limit
    @blp.arguments(SaveScriptSchema)
    @blp.response(201, SavedScriptSchema)
    @blp.alt_response(400, schema="Error", description="Invalid request")
    @blp.alt_response(401, schema="Error", description="Invalid API key")
    @blp.alt_response(404, schema="Error", description="Unknown request, another key's, or no script")
    @blp.alt_response(429, schema="Error", description=RATE_LIMITED)
    def post(self, data):
        """Save a task's script

        Version 1 is the task's script; each healed replay (submitted with `scriptId`) adds the next version.
        """
        return service.save(g.api_key.id, data)

    @requests_limit
    @blp.response(200, ScriptListSchema)
    @blp.alt_response(401, schema="Error", description="Invalid API key")
    @blp.alt_response(429, schema="Error", description=RATE_LIMITED)
    def get(self):
        """List the key's saved scripts"""
        return service.list_scripts(g.api_key.id)


@blp.route("/scripts/<string:script_id>")
class SavedScript(MethodView):
    @requests_limit
    @blp.response(200, SavedScriptSchema)
    @blp.alt_response(401, schema="Error", description="Invalid API key")
    @blp.alt_response(404, schema="Error", description="Unknown script, or another key's")
    @blp.alt_response(429, schema="Error", description=RATE_LIMITED)
    def get(self, script_id):
        """Get a saved script with its versions"""
        return service.get(g.api_key.id, script_id)

    @requests_limit
    @blp.response(204)
    @blp.alt_response(401, schema="Error", description="Invalid API key")
    @blp.alt_response(404, schema="Error", description="Unknown script, or another key's")
    @blp.alt_response(429, schema="Error", description=RATE_LIMITED)
    def delete(self, script_id):
        """Delete a saved script"""
        service.remove(g.api_key.id, script_id)
