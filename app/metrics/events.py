"""Prometheus metrics of events (counters, histograms), counted in the process where each event happens.

Each process writes its values to files under PROMETHEUS_MULTIPROC_DIR (prometheus_client's multiprocess mode, set
up by app.metrics.processes before this module is imported), and the process serving a scrape adds up its machine's
files: the gunicorn workers' on a web machine, the pool processes' on a worker machine. State (queue depth, tasks
waiting, kept sessions, the webhook outbox) is read where it lives at scrape time instead (app.metrics.state,
workers/metrics_server.py). docs/monitoring.md lists every name and label and says why.
"""
from prometheus_client import Counter, Histogram

TASK_SECONDS = (0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 900, 1800, 3600)
WAIT_SECONDS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900)
MODEL_SECONDS = (0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 20, 30, 60, 120)
WEBHOOK_SECONDS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 15, 30)

tasks_submitted = Counter("remote_dispatch_tasks_submitted", "Tasks accepted (202) by submit.",
                          ["mode", "agent"])
tasks_finished = Counter("remote_dispatch_tasks_finished", "Tasks that reached a terminal status, by the process "
                         "that ended them (a worker, a sweep, a cancel).", ["status", "mode", "agent"])
task_duration = Histogram("remote_dispatch_task_duration_seconds", "From a task's first claim by a worker to its "
                          "end (pauses for a person included).", ["status", "mode", "agent"], buckets=TASK_SECONDS)
task_queue_wait = Histogram("remote_dispatch_task_queue_wait_seconds", "From submit to the first claim by a worker.",
                            ["mode", "agent"], buckets=WAIT_SECONDS)
webhook_deliveries = Counter("remote_dispatch_webhook_deliveries", "Webhook delivery attempts by outcome: delivered, "
                             "retry (failed, another attempt is scheduled), failed (failed, no more attempts).",
                             ["outcome"])
webhook_attempt_duration = Histogram("remote_dispatch_webhook_attempt_duration_seconds",
                                     "One webhook delivery attempt, request to response.", buckets=WEBHOOK_SECONDS)
rate_limit_refusals = Counter("remote_dispatch_rate_limit_refusals", "Requests refused with 429 by a plan's limit.",
                              ["plan", "bucket"])
model_calls = Counter("remote_dispatch_model_calls", "Chat-completion requests to the language model (with their "
                      "retries), by outcome: ok, error, timeout, stopped (cancel), out_of_time (task budget).",
                      ["model", "outcome"])
model_call_duration = Histogram("remote_dispatch_model_call_duration_seconds", "One model call, retries included.",
                                ["model"], buckets=MODEL_SECONDS)
model_tokens = Counter("remote_dispatch_model_tokens", "Tokens the model reported, by kind: prompt, completion.",
                       ["model", "kind"])


def task_submitted(mode, agent):
    tasks_submitted.labels(mode, agent).inc()


def task_claimed(task):
    """The claim's row: its first claim is the end of its wait in the queue."""
    if task.attempt == 1 and task.started_at is not None and task.created_at is not None:
        task_queue_wait.labels(task.execution_mode, task.agent).observe(
            max(0.0, (task.started_at - task.created_at).total_seconds()))


def task_finished(status, row):
    """A finish that won (`row`: its RETURNING, with execution_mode, agent, started_at, completed_at)."""
    tasks_finished.labels(status, row.execution_mode, row.agent).inc()
    if row.started_at is not None and row.completed_at is not None:
        task_duration.labels(status, row.execution_mode, row.agent).observe(
            max(0.0, (row.completed_at - row.started_at).total_seconds()))


def webhook_attempt(outcome, final, duration_ms):
    webhook_deliveries.labels("delivered" if outcome.delivered else "failed" if final else "retry").inc()
    if duration_ms is not None:
        webhook_attempt_duration.observe(duration_ms / 1000)


def model_call(model, outcome, seconds, usage=None):
    model = model or "unknown"
    model_calls.labels(model, outcome).inc()
    model_call_duration.labels(model).observe(seconds)
    for kind in ("prompt", "completion"):
        tokens = getattr(usage, f"{kind}_tokens", None) if usage is not None else None
        if tokens:
            model_tokens.labels(model, kind).inc(tokens)
