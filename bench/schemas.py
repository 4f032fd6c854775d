"""Benchmark: the issue's costly response schemas from submit to their end, and the console page of a task with
one, each against the same with a plain schema in the same run (the built-in planner answers: no model)."""
import json
import re
import statistics
import time

from bench import common
from bench.common import Row

SECTION = "9 schemas"
VIEWS = common.scaled(9, 3)
PLAIN_RUNS = common.scaled(3, 1)
PLAIN = {"type": "object"}
OBJECTS = [{"id": i} for i in range(3000)]  # a prompt of 42 KB (MAX_PROMPT_CHARS: 100,000)


def allof_chain(levels):
    """Each level's allOf names the next twice: 2^levels subschemas when expanded, a few KB written."""
    defs = {f"a{i}": {"allOf": [{"$ref": f"#/$defs/a{i + 1}"}, {"$ref": f"#/$defs/a{i + 1}"}]} for i in range(levels)}
    defs[f"a{levels}"] = {"type": "object"}
    return {"$defs": defs, "$ref": "#/$defs/a0"}


def body(schema, answer="{}"):
    return json.dumps({"prompt": f"answer {answer}", "executionMode": "cloud",
                       "responseFormat": {"type": "jsonSchema", "jsonSchema": schema}})


def submit_to_end(stack, text, timeout=120):
    """(seconds from submit to the task's end, or to the 400 that refused it; status; why it ended; its id)."""
    started = time.perf_counter()
    response = stack.submit(text)
    if response.status_code == 400:
        return time.perf_counter() - started, "400", response.json()["message"], None
    request_id = response.json()["requestId"]
    stack.wait_finished([request_id], timeout)
    ended = time.perf_counter() - started
    status, error = stack.sql("SELECT status, coalesce(error, '') FROM tasks WHERE id = :id", id=request_id)[0]
    return ended, status, error, request_id


def console(stack):
    """A signed-in console session of the bench key (requests, with its cookie)."""
    session = common.http()
    page = session.get(f"{stack.web.url}/console/signin", timeout=30).text
    token = re.search(r'name="csrf_token" value="([^"]+)"', page)[1]
    session.post(f"{stack.web.url}/console/signin", data={"api_key": stack.api_key, "csrf_token": token},
                 timeout=30).raise_for_status()
    return session


def page_seconds(session, stack, task_ids):
    """The median time of each task's page, viewed in turns (so both see the same machine load)."""
    times = {task_id: [] for task_id in task_ids}
    for _ in range(VIEWS):
        for task_id in task_ids:
            started = time.perf_counter()
            session.get(f"{stack.web.url}/console/tasks/{task_id}", timeout=120).raise_for_status()
            times[task_id].append(time.perf_counter() - started)
    return [statistics.median(times[task_id]) for task_id in task_ids]


def measure(stack):
    stack.tasks_worker  # noqa: B018 (started here, so its start is not in the first figure)
    heavy = submit_to_end(stack, body(PLAIN))[3]  # warm-up: the worker's first task loads what others reuse
    plain_runs = [submit_to_end(stack, body(PLAIN)) for _ in range(PLAIN_RUNS)]
    plain, plain_id = statistics.median(run[0] for run in plain_runs), plain_runs[0][3]
    rows = []
    for figure, text in [("allOf chain 2^18", body(allof_chain(18))), ('{"$ref": "#"}', body({"$ref": "#"})),
                         ("uniqueItems over 3,000 objects", body({"type": "array", "uniqueItems": True},
                                                                json.dumps(OBJECTS)))]:
        seconds, status, why, _ = submit_to_end(stack, text)
        rows.append(Row(SECTION, f"{figure}: submit → end (s)", seconds, "plain schema", plain,
                        f"{status}: {why[:90]}"))
    # The console page of a task holding the 2^18 chain (as one accepted before the bound would), vs a plain one.
    stack.sql("UPDATE tasks SET options = CAST(:options AS json) WHERE id = :id", id=heavy, options=json.dumps(
        {"responseFormat": {"type": "jsonSchema", "jsonSchema": allof_chain(18)}}))
    session = console(stack)
    heavy_s, plain_s = page_seconds(session, stack, [heavy, plain_id])
    rows.append(Row(SECTION, "console page of a task with the 2^18 chain (s)", heavy_s,
                    "the page of a task with a plain schema", plain_s))
    return rows


if __name__ == "__main__":
    common.main(measure)
