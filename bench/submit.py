"""Benchmark 1 (+ web memory): submit vs. a trivial JSON endpoint on the same gunicorn, under wrk load."""
from bench import common
from bench.common import Row

SECONDS = common.scaled(8, 4)
ROUNDS = common.scaled(3, 1)  # trivial and submit alternate; medians of the rounds are reported
WARMUP = common.scaled(2, 1)
CONNECTIONS = 16
TRIVIAL = "trivial JSON endpoint, same server"
FLOOR = "submit floor: key lookup + INSERT/COMMIT + confirmed publish, bare WSGI, same server"


def measure(stack):
    """No tasks worker consumes during this run, so the web tier has the CPUs; the queue is purged after."""
    web = stack.web
    submit_url, trivial_url = f"{web.url}/fast/v2/remote-dispatch", f"{web.url}/bench/trivial"
    floor_url = f"{web.url}/bench/floor"
    submit = dict(method="POST", body=common.SUBMIT_BODY, api_key=stack.api_key)
    trivial = dict(method="POST", body=common.SUBMIT_BODY)
    for url, options in ((trivial_url, trivial), (floor_url, submit), (submit_url, submit)):  # warm up
        common.wrk(url, WARMUP, CONNECTIONS, **options)
    at_rest = common.max_rss(web.children())

    bases, floors, loads = [], [], []
    with common.RssPeak(web.children) as peak:
        for _ in range(ROUNDS):
            bases.append(common.wrk(trivial_url, SECONDS, CONNECTIONS, cpu_of=web.children(), **trivial))
            floors.append(common.wrk(floor_url, SECONDS, CONNECTIONS, cpu_of=web.children(), **submit))
            loads.append(common.wrk(submit_url, SECONDS, CONNECTIONS, cpu_of=web.children(), **submit))
    stack.purge("tasks", "bench_floor_submit")
    stack.sql("DELETE FROM tasks")
    base, floor, load = common.median_load(bases), common.median_load(floors), common.median_load(loads)
    section = "1 submit"
    rows = common.checked([
        Row(section, f"submit throughput (req/s, {CONNECTIONS} connections)", load.rps, TRIVIAL, base.rps),
        Row(section, "submit latency p50 (ms)", load.p50_ms, TRIVIAL, base.p50_ms),
        Row(section, "submit latency p99 (ms)", load.p99_ms, TRIVIAL, base.p99_ms),
        Row(section, "web worker CPU per submit (ms)", load.cpu_ms, TRIVIAL, base.cpu_ms),
        Row(section, f"submit throughput (req/s, {CONNECTIONS} connections)", load.rps, FLOOR, floor.rps),
        Row(section, "submit latency p50 (ms)", load.p50_ms, FLOOR, floor.p50_ms),
        Row(section, "web worker CPU per submit (ms)", load.cpu_ms, FLOOR, floor.cpu_ms),
    ], (load, 202), (floor, 202), (base, 202))
    return rows + web_memory(at_rest, peak.peak, trivial)


def web_memory(at_rest, under_load, trivial):
    """RSS of a product web worker vs. a worker of the bare trivial app in the same gunicorn config."""
    bare = common.start_gunicorn("web-bare", "bench.trivial:app")
    try:
        url = f"{bare.url}/bench/trivial"
        common.wrk(url, WARMUP, CONNECTIONS, **trivial)
        bare_rest = common.max_rss(bare.children())
        with common.RssPeak(bare.children) as bare_peak:
            common.wrk(url, WARMUP * 2, CONNECTIONS, **trivial)
    finally:
        bare.stop()
    baseline = "bare Flask app, same gunicorn config"
    return [
        Row("5 memory", "web worker RSS at rest (MiB)", at_rest, baseline, bare_rest),
        Row("5 memory", "web worker RSS under submit load (MiB, peak)", under_load, baseline, bare_peak.peak),
    ]


if __name__ == "__main__":
    common.main(measure)
