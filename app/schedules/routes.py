"""Routes of /fast/v2/schedules."""
from flask import g
from flask.views import MethodView

from ..auth import require_api_key
from ..parsing import Blueprint
from ..ratelimits import plan_value, requests_limit
from . import service
from .schemas import ListQuerySchema, ScheduleCreateSchema, ScheduleListSchema, SchedulePatchSchema, ScheduleSchema

blp = Blueprint("schedules", __name__, url_prefix="/fast/v2",
                description="Run a task on a cron schedule, in a time zone.")
blp.before_request(require_api_key)

NOT_FOUND = "Unknown schedule, or another key's"


def answers_with_the_schedule(view):
    """A route on one schedule that answers with it (get, pause, resume)."""
    for decorate in (blp.alt_response(404, schema="Error", description=NOT_FOUND),
                     blp.alt_response(401, schema="Error", description="Invalid API key"),
                     blp.response(200, ScheduleSchema), requests_limit):
        view = decorate(view)
    return view


@blp.route("/schedules")
class Schedules(MethodView):
    @requests_limit
    @blp.arguments(ScheduleCreateSchema)
    @blp.response(201, ScheduleSchema)
    @blp.alt_response(400, schema="Error", description="Invalid cron, timeZone or task (the task as a submit)")
    @blp.alt_response(401, schema="Error", description="Invalid API key")
    @blp.alt_response(403, schema="Error", description="The plan's number of schedules reached")
    @blp.alt_response(429, schema="Error", description="Rate limit of the key's plan exceeded")
    def post(self, data):
        """Create a schedule

        Beat submits `task` at each time `cron` names in `timeZone`; each run is an ordinary task with
        `trigger: "schedule"` and its `scheduleId`.
        """
        return service.create(g.api_key.id, data, plan_value("schedules", 0))

    @requests_limit
    @blp.arguments(ListQuerySchema, location="query", error_status_code=400)
    @blp.response(200, ScheduleListSchema)
    @blp.alt_response(400, schema="Error", description="Invalid limit or cursor")
    @blp.alt_response(401, schema="Error", description="Invalid API key")
    def get(self, query):
        """List the key's schedules

        Newest first; follow `nextCursor` for older ones.
        """
        return service.list_schedules(g.api_key.id, **query)


@blp.route("/schedules/<string:schedule_id>")
class OneSchedule(MethodView):
    @answers_with_the_schedule
    def get(self, schedule_id):
        """Get a schedule, its next runs and its last run"""
        return service.view(service.get_schedule(g.api_key.id, schedule_id))

    @requests_limit
    @blp.arguments(SchedulePatchSchema)
    @blp.response(200, ScheduleSchema)
    @blp.alt_response(400, schema="Error", description="Invalid cron, timeZone or task")
    @blp.alt_response(401, schema="Error", description="Invalid API key")
    @blp.alt_response(404, schema="Error", description=NOT_FOUND)
    def patch(self, data, schedule_id):
        """Change a schedule

        Only the fields given change; a new cron or timeZone counts from now.
        """
        return service.update_schedule(g.api_key.id, schedule_id, data)

    @requests_limit
    @blp.response(204)
    @blp.alt_response(401, schema="Error", description="Invalid API key")
    @blp.alt_response(404, schema="Error", description=NOT_FOUND)
    def delete(self, schedule_id):
        """Delete a schedule (its runs stay)"""
        service.delete_schedule(g.api_key.id, schedule_id)


@blp.route("/schedules/<string:schedule_id>/pause")
class Pause(MethodView):
    @answers_with_the_schedule
    def post(self, schedule_id):
        """Pause a schedule (no runs until resumed)"""
        return service.pause(g.api_key.id, schedule_id)


@blp.route("/schedules/<string:schedule_id>/resume")
class Resume(MethodView):
    @answers_with_the_schedule
    def post(self, schedule_id):
        """Resume a schedule

        It fires from the next time its cron names; the fires while paused are not made up, and its failure count
        starts again at 0.
        """
        return service.resume(g.api_key.id, schedule_id)
