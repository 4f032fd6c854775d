"""Helpers of the agent tests: run a cloud task to a status, read its row afresh."""
from app.extensions import db
from app.models import Task
from tests.conftest import submit, wait_for_status

CLOUD = {"executionMode": "cloud"}


def stored_task(task_id):
    """The task's row as committed now (the worker writes it from another process)."""
    db.session.rollback()
    db.session.expire_all()
    return db.session.get(Task, task_id)


def run(client, api_key, body, statuses=("success", "error")):
    """Submit in cloud mode and poll until one of `statuses`; returns (requestId, poll body)."""
    request_id = submit(client, api_key, {**CLOUD, **body}).get_json()["requestId"]
    return request_id, wait_for_status(client, api_key, request_id, statuses)
