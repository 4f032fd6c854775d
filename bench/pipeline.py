"""Benchmark 2 (+ tasks-worker memory): a burst of trivial tasks to `success` vs. bare Celery no-op tasks."""
import time

from bench import common
from bench.common import Row

N = common.scaled(1000, 100)
TIMEOUT = 300
NOOP = "bare Celery no-op tasks, same RabbitMQ"
FLOOR = "pipeline floor: floor submits + bare Celery claim/finish, same RabbitMQ"


def measure(stack):
    worker = stack.tasks_worker
    pool = lambda: worker.children()  # noqa: E731  (the prefork processes that run the tasks)
    run_product(stack, 4)  # warm-up: connections, imports
    at_rest = common.max_rss(pool())
    everything = lambda: [worker.pid] + pool()  # noqa: E731
    cpu = common.cpu_seconds(everything())
    with common.RssPeak(pool) as peak:
        rate, note = run_product(stack, N)
    cpu = common.cpu_seconds(everything()) - cpu

    noop = stack.noop_worker
    run_noop(stack, 4)
    noop_rest = common.max_rss(noop.children())
    noop_all = [noop.pid] + noop.children()
    noop_cpu = common.cpu_seconds(noop_all)
    with common.RssPeak(noop.children) as noop_peak:
        noop_rate = run_noop(stack, N)
    noop_cpu = common.cpu_seconds(noop_all) - noop_cpu

    run_floor(stack, 4)
    floor_cpu = common.cpu_seconds(noop_all)
    floor_rate, floor_note = run_floor(stack, N)
    floor_cpu = common.cpu_seconds(noop_all) - floor_cpu
    return [
        Row("2 pipeline", f"{N} trivial tasks submitted in a burst → all success (tasks/s)", rate, FLOOR,
            floor_rate, note=note or floor_note, failed=bool(note or floor_note)),
        Row("2 pipeline", "tasks worker CPU per task (ms, main + pool processes)", cpu * 1000 / N,
            "floor worker (claim + finish only)", floor_cpu * 1000 / N),
        Row("2 pipeline", f"{N} trivial tasks submitted in a burst → all success (tasks/s)", rate, NOOP,
            noop_rate, note=note, failed=bool(note)),
        Row("2 pipeline", "tasks worker CPU per task (ms, main + pool processes)", cpu * 1000 / N,
            "bare Celery no-op worker", noop_cpu * 1000 / N),
        Row("5 memory", "tasks worker pool process RSS at rest (MiB)", at_rest, "no-op Celery pool process",
            noop_rest),
        Row("5 memory", "tasks worker pool process RSS under load (MiB, peak)", peak.peak,
            "no-op Celery pool process", noop_peak.peak),
    ]


def run_product(stack, count):
    """Submit `count` tasks over HTTP from 8 threads; tasks/s from the first submit to the last completion."""
    started = time.time()
    ids = common.burst(lambda _: stack.submit().json()["requestId"], range(count))
    done = stack.wait_finished(ids, TIMEOUT)
    [(last, failed)] = stack.sql(
        "SELECT extract(epoch FROM max(completed_at)), count(*) FILTER (WHERE status <> 'success') "
        "FROM tasks WHERE id = ANY(:ids)", ids=ids)
    note = "" if done == count and not failed else f"{done}/{count} finished, {failed} not success"
    return count / (float(last) - started), note


def run_floor(stack, count):
    """As run_product, through the floors: /bench/floor submits, the bare claim/finish task."""
    url = f"{stack.web.url}/bench/floor?queue=bench_floor"
    headers = {"x-api-key": stack.api_key, "Content-Type": "application/json"}
    stack.noop_worker  # consumes bench_floor too
    started = time.time()
    ids = common.burst(lambda _: common.http().post(url, data=common.SUBMIT_BODY, headers=headers, timeout=30)
                       .json()["requestId"], range(count))
    done = stack.wait_finished(ids, TIMEOUT)
    [(last,)] = stack.sql("SELECT extract(epoch FROM max(completed_at)) FROM tasks WHERE id = ANY(:ids)", ids=ids)
    note = "" if done == count else f"{done}/{count} finished"
    return count / (float(last) - started), note


def run_noop(stack, count):
    """Publish `count` no-op tasks from 8 threads; tasks/s from the first publish to the last one run."""
    from bench.noop_celery import noop

    listener = stack.done_listener
    listener.clear()
    started = time.time()
    common.burst(lambda _: noop.delay(time.time(), listener.port), range(count))
    received = listener.wait_for(count, TIMEOUT)
    if len(received) < count:
        raise RuntimeError(f"only {len(received)}/{count} no-op tasks ran")
    return count / (max(ran for _, ran, _ in received) - started)


if __name__ == "__main__":
    common.main(measure)
