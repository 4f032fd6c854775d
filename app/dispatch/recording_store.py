"""Recordings of browser runs: rrweb events stored per task as gzip-compressed JSON, served to the task's owner."""
import gzip
import json

from flask import Response, current_app, request
from sqlalchemy import delete, insert, select

from ..extensions import db
from ..models import TaskRecording, now_plus
from ..task_queries import get_task

FORMAT = "rrweb"
STEP_TAG = "step"  # the custom event the worker adds as each action starts (workers/browser/rrweb.py)
TRUNCATED_TAG = "truncated"  # the custom event the worker adds where the run's RECORDING_MAX_BYTES ran out


def document(task_id, events):
    """The stored body: the events in time order, a marker per action (its offset from the start), and whether the
    recording ends early (the run's RECORDING_MAX_BYTES ran out). Custom events are the worker's alone: it drops
    any a page sends."""
    events = sorted(events, key=lambda e: e["timestamp"])
    start = events[0]["timestamp"] if events else 0
    custom = [e for e in events if e.get("type") == 5]
    markers = [{**(e["data"].get("payload") or {}), "offsetMs": e["timestamp"] - start}
               for e in custom if e.get("data", {}).get("tag") == STEP_TAG]
    truncated = any(e.get("data", {}).get("tag") == TRUNCATED_TAG for e in custom)
    return {"requestId": task_id, "format": FORMAT, "startedAt": start,
            "durationMs": (events[-1]["timestamp"] - start) if events else 0, "truncated": truncated,
            "markers": markers, "events": events}


def store(task_id, events):
    """Keep a run's events; a run resumed after a question adds its events to the recording of the first part."""
    if not events:
        return None
    with db.engine.begin() as conn:  # its own transaction: a worker's session is not committed under it
        earlier = conn.execute(select(TaskRecording.data).where(TaskRecording.task_id == task_id)).scalar()
        if earlier is not None:
            events = json.loads(gzip.decompress(earlier))["events"] + list(events)
        body = document(task_id, events)
        data = gzip.compress(json.dumps(body, separators=(",", ":")).encode(), compresslevel=6)
        conn.execute(delete(TaskRecording).where(TaskRecording.task_id == task_id))
        conn.execute(insert(TaskRecording).values(task_id=task_id, data=data, events=len(body["events"]),
                                                  duration_ms=body["durationMs"]))
    return len(data)


def compressed(api_key_id, task_id):
    """The caller's task's recording (gzip-compressed JSON), or None when it has none; 404 for another key's task."""
    get_task(api_key_id, task_id)
    return db.session.execute(select(TaskRecording.data).where(TaskRecording.task_id == task_id)).scalar_one_or_none()


def exists(task_id):
    return db.session.execute(select(TaskRecording.task_id).where(TaskRecording.task_id == task_id)).first() is not None


def purge_expired():
    """Delete recordings stored more than RECORDING_TTL_SECONDS ago (with the task's other files); returns how many."""
    ttl = current_app.config["RECORDING_TTL_SECONDS"]
    purged = db.session.execute(delete(TaskRecording).where(TaskRecording.created_at < now_plus(-ttl))).rowcount
    db.session.commit()
    return purged


def response(data):
    """The recording as JSON: sent compressed to a client that accepts gzip (nearly all), else expanded."""
    headers = {"Cache-Control": "private, max-age=300", "Vary": "Accept-Encoding"}
    if request.accept_encodings["gzip"]:
        return Response(data, mimetype="application/json", headers={**headers, "Content-Encoding": "gzip"})
    return Response(gzip.decompress(data), mimetype="application/json", headers=headers)
