"""Prometheus metrics: a real Prometheus (Debian's) scrapes a gunicorn at 2 workers and a Celery worker at concurrency 2,
and its own query API finds the counters moved by exactly the tasks this test ran."""
import json
import re
import secrets
import shutil
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import requests

from tests.conftest import clean_state, make_key, wait_until
from tests.processes import ManagedProcess, WebProcess, WorkerProcess, free_port

TOKEN = secrets.token_hex(16)
AUTH = {"Authorization": f"Bearer {TOKEN}"}
PLANS = {"tiny": {"requests": "2/minute", "polls": "600/minute"}}


@pytest.fixture(scope="module")
def stack(app, webhook_ca):
    """A web machine and a worker machine (each its own VAR_DIR), both serving metrics, and a Prometheus scraping
    them every two seconds (a scrape may take a second on a loaded machine: it reads the database and
    the broker)."""
    clean_state(app)  # no task an earlier module left queued is claimed (and counted) by this worker
    folders = [tempfile.mkdtemp(prefix=f"rd-metrics-{name}-") for name in ("web", "worker", "prom")]
    started = []
    try:
        web = WebProcess(env={"VAR_DIR": folders[0], "METRICS_TOKEN": TOKEN, "WEB_CONCURRENCY": "2",
                              "WEB_THREADS": "16", "RATE_LIMIT_PLANS": json.dumps(PLANS)})
        started.append(web)
        worker_bind = f"127.0.0.1:{free_port()}"
        started.append(WorkerProcess(queues="tasks,webhooks,control", concurrency=2, name="metrics",
                                     env={"VAR_DIR": folders[1], "METRICS_TOKEN": TOKEN, "METRICS_BIND": worker_bind,
                                          "WEBHOOK_CA_BUNDLE": webhook_ca[1]}))
        config = Path(folders[2]) / "prometheus.yml"
        config.write_text(
            "global: {scrape_interval: 2s, scrape_timeout: 2s, evaluation_interval: 2s}\nscrape_configs:\n"
            + "".join(f"  - job_name: {job}\n    authorization: {{credentials: {TOKEN}}}\n"
                      f"    static_configs: [{{targets: ['{target}']}}]\n"
                      for job, target in (("web", web.base.removeprefix("http://")), ("worker", worker_bind))))
        port = free_port()
        prometheus = ManagedProcess([shutil.which("prometheus") or "/usr/bin/prometheus",
                                     f"--config.file={config}", f"--storage.tsdb.path={folders[2]}/data",
                                     f"--web.listen-address=127.0.0.1:{port}"], "prometheus")
        started.append(prometheus)
        prometheus.url = f"http://127.0.0.1:{port}"
        prometheus.wait_until(lambda: _ok(prometheus.url + "/-/ready"))
        yield web, f"http://{worker_bind}", prometheus, folders
    finally:
        for process in reversed(started):
            process.stop()
        for folder in folders:
            shutil.rmtree(folder, ignore_errors=True)


def _ok(url):
    try:
        return requests.get(url, timeout=1).ok
    except requests.RequestException:
        return False


def query(prometheus, promql):
    """The value of a PromQL expression that yields one number (None when it has no sample)."""
    body = requests.get(prometheus.url + "/api/v1/query", params={"query": promql}, timeout=5).json()
    assert body["status"] == "success", body
    result = body["data"]["result"]
    return float(result[0]["value"][1]) if result else None


def scraped(prometheus, job):
    return query(prometheus, f'up{{job="{job}"}}') == 1


def test_counters_count_each_task_once_across_processes(stack, receiver):
    web, _, prometheus, folders = stack
    key, tiny = make_key("metrics", plan="dev"), make_key("tiny", plan="tiny")
    wait_until(lambda: scraped(prometheus, "web") and scraped(prometheus, "worker"), "both targets scraped", 60)

    def post(prompt, caller=key, **fields):
        return requests.post(web.base + "/fast/v2/remote-dispatch", headers={"x-api-key": caller}, timeout=30,
                             json={"prompt": prompt, "executionMode": "cloud", **fields})

    def submit(prompt, caller=key, **fields):
        response = post(prompt, caller, **fields)
        assert response.status_code == 202, response.text
        return response.json()["requestId"]

    # The tiny plan takes two submits a minute: the third is refused, and counted as refused (not as submitted).
    ids = [submit("answer hi", tiny, callbackUrl=receiver.url), submit("answer hi", tiny)]
    assert post("answer hi", tiny).status_code == 429
    # Two tasks that overlap keep both pool processes busy at once; quick ones until both gunicorn workers answered.
    ids += [submit("wait 1\nanswer slow one"), submit("wait 1\nanswer slow two")]
    with ThreadPoolExecutor(8) as pool:
        while len(_answering_pids(web)) < 2 and len(ids) < 200:
            ids += pool.map(submit, ["answer hi"] * 8)
    assert len(_answering_pids(web)) == 2

    def finished():
        statuses = [requests.get(f"{web.base}/fast/v2/remote-dispatch/responses/{i}", headers={"x-api-key": caller},
                                 timeout=10).json()["status"] for i, caller in zip(ids, [tiny] * 2 + [key] * len(ids))]
        return all(status in ("success", "error") for status in statuses) and statuses

    assert set(wait_until(finished, "every task finished", 120)) == {"success"}
    n = len(ids)
    expected = {
        'sum(remote_dispatch_tasks_submitted_total{job="web", mode="cloud", agent="general"})': n,
        'sum(remote_dispatch_tasks_finished_total{job="worker", status="success", mode="cloud", agent="general"})': n,
        'sum(remote_dispatch_task_queue_wait_seconds_count{job="worker"})': n,
        'sum(remote_dispatch_task_duration_seconds_count{job="worker", status="success"})': n,
        # Nothing counted anywhere else (the web never finishes these, the worker never submits them).
        "sum(remote_dispatch_tasks_submitted_total)": n,
        "sum(remote_dispatch_tasks_finished_total)": n,
        'sum(remote_dispatch_rate_limit_refusals_total{plan="tiny", bucket="requests"})': 1,
        "sum(remote_dispatch_rate_limit_refusals_total)": 1,
        # The one task with a callback: its webhook delivered at the first attempt, the outbox empty again.
        'sum(remote_dispatch_webhook_deliveries_total{job="worker", outcome="delivered"})': 1,
        "sum(remote_dispatch_webhook_deliveries_total)": 1,
        'max(remote_dispatch_webhook_outbox{job="web"})': None,
    }
    seen = {}

    def counted():
        seen.update({promql: query(prometheus, promql) for promql in expected})
        return seen == expected

    try:
        wait_until(counted, "Prometheus to see every task counted once", 60)
    finally:
        wrong = {promql: (seen.get(promql), want) for promql, want in expected.items() if seen.get(promql) != want}
        scrapes = {f'{name}{{job="{job}"}}': query(prometheus, f'{name}{{job="{job}"}}')
                   for name in ("up", "scrape_duration_seconds") for job in ("web", "worker")}
        assert not wrong, f"(seen, expected): {wrong}; the last scrapes: {scrapes}"
    # The two slow tasks took at least their second of waiting.
    assert query(prometheus, 'sum(remote_dispatch_task_duration_seconds_bucket{job="worker", le="0.5"})') <= n - 2
    # Both pool processes counted runs in their own files, and the worker's endpoint summed them.
    assert len(_pids_counting(folders[1], "remote_dispatch_task_queue_wait_seconds")) == 2


def test_state_gauges_read_at_scrape_time(stack):
    web, _, prometheus, _ = stack
    wait_until(lambda: query(prometheus, 'remote_dispatch_worker_slots{job="worker"}') == 2, "worker slots", 30)
    assert query(prometheus, 'remote_dispatch_worker_slots_busy{job="worker"}') == 0
    assert query(prometheus, 'remote_dispatch_state_up{job="web", source="database"}') == 1
    assert query(prometheus, 'remote_dispatch_state_up{job="web", source="broker"}') == 1
    # The worker consumes the tasks queue: RabbitMQ says so through the web's scrape.
    wait_until(lambda: query(prometheus, 'remote_dispatch_queue_consumers{job="web", queue="tasks"}') == 1,
               "the tasks queue's consumer", 30)
    assert query(prometheus, 'remote_dispatch_queue_messages{job="web", queue="tasks"}') == 0
    assert query(prometheus, 'remote_dispatch_pool_browsers{job="worker", pool="tasks", state="ready"}') == 0


def test_metrics_refused_without_the_token(stack):
    web, worker_url, _, _ = stack
    for base in (web.base, worker_url):
        missing = requests.get(base + "/metrics", timeout=5)
        assert missing.status_code == 401 and set(missing.json()) == {"error", "message"}
        wrong = requests.get(base + "/metrics", headers={"Authorization": "Bearer " + TOKEN[::-1]}, timeout=5)
        assert wrong.status_code == 403 and wrong.json()["error"] == "Forbidden"
        good = requests.get(base + "/metrics", headers=AUTH, timeout=5)
        assert good.status_code == 200 and "remote_dispatch_" in good.text


def test_no_metrics_while_the_token_is_unset(client):
    response = client.get("/metrics", headers=AUTH)
    assert response.status_code == 404
    assert set(response.get_json()) == {"error", "message"}


def _answering_pids(web):
    """The gunicorn workers that answered a submit (the access log's lines lead with the worker's pid)."""
    return set(re.findall(r'^\[<(\d+)>\] \S+ .*"POST /fast/v2/remote-dispatch ', web.output(), re.MULTILINE))


def _pids_counting(var_dir, sample):
    """The processes whose multiprocess files hold a non-zero `sample` under the worker's metrics folder."""
    from prometheus_client.mmap_dict import MmapedDict

    pids = set()
    for path in Path(var_dir, "metrics").glob("worker-*/histogram_*.db"):
        for key, value, *_ in MmapedDict.read_all_values_from_file(str(path)):
            if f'"{sample}_bucket"' in key and value > 0:
                pids.add(path.stem.rpartition("_")[2])
    return pids


def test_the_dashboard_and_the_docs_name_the_metrics_the_service_serves(stack):
    """Every name the Grafana dashboard queries is documented, and every documented name is served (state) or
    defined (events, which appear once counted)."""
    from prometheus_client import REGISTRY

    from app.metrics import events  # noqa: F401  (its metrics register in the default registry)

    web, worker_url, _, _ = stack
    root = Path(__file__).resolve().parent.parent
    base = lambda name: re.sub(r"_(total|bucket|count|sum)$", "", name)  # noqa: E731
    dashboard = {base(n) for n in re.findall(r"remote_dispatch_\w+", (root / "docs/grafana-dashboard.json").read_text())}
    documented = {base(n) for n in re.findall(r"`(remote_dispatch_\w+)`", (root / "docs/monitoring.md").read_text())}
    served = {base(n) for url in (web.base, worker_url)
              for n in re.findall(r"^# TYPE (remote_dispatch_\w+)", requests.get(url + "/metrics", headers=AUTH,
                                                                                  timeout=10).text, re.MULTILINE)}
    defined = {metric.name for metric in REGISTRY.collect() if metric.name.startswith("remote_dispatch_")}
    assert dashboard <= documented
    assert documented == served | defined


def test_model_calls_are_counted_with_their_outcome_and_tokens():
    """A model call through model_call.complete (every planner's) counts its outcome, its time and the tokens the
    server reported; a failed one counts as an error (this process's own values: no multiprocess folder here)."""
    import time

    import openai
    from prometheus_client import REGISTRY

    from tests.llm_server import ScriptedModel, failure, text
    from workers.planners import model_call

    def value(name, **labels):
        return REGISTRY.get_sample_value(name, {"model": "metrics-model", **labels}) or 0

    model = ScriptedModel()
    try:
        http, transport = model_call.http_client()
        client = openai.OpenAI(base_url=model.base_url, api_key="k", http_client=http, max_retries=0)
        request = {"model": "metrics-model", "messages": [{"role": "user", "content": "hi"}]}
        before = {"ok": value("remote_dispatch_model_calls_total", outcome="ok"),
                  "error": value("remote_dispatch_model_calls_total", outcome="error"),
                  "prompt": value("remote_dispatch_model_tokens_total", kind="prompt"),
                  "completion": value("remote_dispatch_model_tokens_total", kind="completion"),
                  "timed": value("remote_dispatch_model_call_duration_seconds_count")}
        model.script(text("hello"), failure(400, "bad request"))
        call = dict(timeout=10, retries=0, deadline=time.monotonic() + 30, should_stop=lambda: False)
        model_call.complete(client, transport, request, **call)
        with pytest.raises(openai.BadRequestError):
            model_call.complete(client, transport, request, **call)
    finally:
        model.close()
    assert value("remote_dispatch_model_calls_total", outcome="ok") - before["ok"] == 1
    assert value("remote_dispatch_model_calls_total", outcome="error") - before["error"] == 1
    assert value("remote_dispatch_model_tokens_total", kind="prompt") - before["prompt"] == 900
    assert value("remote_dispatch_model_tokens_total", kind="completion") - before["completion"] == 100
    assert value("remote_dispatch_model_call_duration_seconds_count") - before["timed"] == 2
