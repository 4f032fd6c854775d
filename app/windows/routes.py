"""Routes of /fast/v2/browser-windows (the extension's channel) and /fast/v2/extension-actions (the SDK's)."""
from flask import g, request
from flask.views import MethodView

from ..auth import require_api_key
from ..parsing import Blueprint
from ..ratelimits import polls_limit, requests_limit
from . import fallback, service
from .schemas import (
    AcceptedResultSchema, CommandResultSchema, ExtensionActionResultSchema, ExtensionActionSchema,
    PollResultSchema, PollSchema, RegisterSchema, WindowListQuerySchema, WindowListSchema, WindowSchema, WindowTaskListSchema,
)

blp = Blueprint("browser-windows", __name__, url_prefix="/fast/v2",
                description="Browser windows with the extension (client mode) and direct actions in them.")
blp.before_request(require_api_key)


@blp.route("/browser-windows")
class Windows(MethodView):
    @requests_limit
    @blp.arguments(WindowListQuerySchema, location="query", error_status_code=400)
    @blp.response(200, WindowListSchema)
    @blp.alt_response(401, schema="Error", description="Invalid API key")
    def get(self, query):
        """List the key's browser windows

        With their state: online (the extension polled within WINDOW_OFFLINE_SECONDS), offline, closed.
        """
        return service.list_windows(g.api_key.id, query["includeClosed"])

    @requests_limit
    @blp.arguments(RegisterSchema, required=False)
    @blp.response(201, WindowSchema)
    @blp.alt_response(401, schema="Error", description="Invalid API key")
    def post(self, data):
        """Register a browser window

        The extension calls this for each window; the window's browserWindowId belongs to the key.
        """
        return service.register(g.api_key.id, data.get("label"), request.headers.get("User-Agent"))


# <uuid:…>: "/browser-windows/poll" must not also name a window (OPTIONS would list DELETE there).
@blp.route("/browser-windows/<uuid:window_id>")
class Window(MethodView):
    @requests_limit
    @blp.response(204)
    @blp.alt_response(401, schema="Error", description="Invalid API key")
    @blp.alt_response(404, schema="Error", description="Unknown window, or another key's")
    def delete(self, window_id):
        """Close a browser window

        It takes no more tasks; commands waiting for it fail at once.
        """
        service.close(g.api_key.id, str(window_id))


@blp.route("/browser-windows/<uuid:window_id>/tasks")
class WindowTasks(MethodView):
    @polls_limit
    @blp.response(200, WindowTaskListSchema)
    @blp.alt_response(401, schema="Error", description="Invalid API key")
    @blp.alt_response(404, schema="Error", description="Unknown window, or another key's")
    def get(self, window_id):
        """The window's recent tasks

        Newest first, with the running task's trace so far (the side panel).
        """
        return service.window_tasks(g.api_key.id, str(window_id))


@blp.route("/browser-windows/poll")
class Poll(MethodView):
    @polls_limit
    @blp.arguments(PollSchema)
    @blp.response(200, PollResultSchema)
    @blp.alt_response(401, schema="Error", description="Invalid API key")
    @blp.alt_response(503, schema="Error", description="This server holds as many waiting requests as it may")
    def post(self, data):
        """Wait for commands (the extension's heartbeat)

        Marks the windows seen and returns their pending commands, holding the request up to `wait` seconds
        until one arrives.
        """
        return service.poll(g.api_key.id, data["browserWindowIds"], data["wait"], data["running"])


@blp.route("/browser-windows/commands/<uuid:command_id>/result")
class CommandResult(MethodView):
    @polls_limit
    @blp.arguments(CommandResultSchema)
    @blp.response(200, AcceptedResultSchema)
    @blp.alt_response(400, schema="Error", description="The result's data is not what the command returns")
    @blp.alt_response(401, schema="Error", description="Invalid API key")
    @blp.alt_response(404, schema="Error", description="Unknown command, or another key's")
    def post(self, data, command_id):
        """Post a command's result

        A result whose `data` does not have the command's shape is refused (400): the command keeps
        waiting for a good one.
        """
        return service.post_result(g.api_key.id, str(command_id), data)


@blp.route("/extension-actions")
class ExtensionAction(MethodView):
    @requests_limit
    @blp.arguments(ExtensionActionSchema)
    @blp.response(200, ExtensionActionResultSchema)
    @blp.alt_response(400, schema="Error", description="Invalid request")
    @blp.alt_response(401, schema="Error", description="Invalid API key")
    @blp.alt_response(404, schema="Error",
                      description="Browser window not found (unknown, offline, another key's)")
    @blp.alt_response(504, schema="Error", description="The window did not answer in time")
    def post(self, data):
        """Run an action in a browser window

        The SDK's direct actions (go_to_url, get_screenshot, agentic_selector, save_pdf_file, ...), run by the
        extension, or by a worker in a kept cloud session's browser. When an agentic action's selectors match
        nothing and a model is configured (LLM_BASE_URL), the step runs as a task for the model in the same
        window. The Excel actions work on the key's uploads. See docs/sdk.md.
        """
        return fallback.run_extension_action(g.api_key.id, data)
