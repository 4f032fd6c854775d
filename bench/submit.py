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

    bases, floors, loads = [], [], []
    for _ in range(ROUNDS):
        bases.append(common.wrk(trivial_url, SECONDS, CONNECTIONS, cpu_of=web.children(), **trivial))
        floors.append(common.wrk(floor_url, SECONDS, CONNECTIONS, cpu_of=web.children(), **submit))
        loads.append(common.wrk(submit_url, SECONDS, CONNECTIONS, cpu_of=web.children(), **submit))
    memory = web_memory(stack, submit, trivial)
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
    return rows + memory


def web_memory(stack, submit, trivial):
    """RSS of a web worker of the product alone (`app:create_app()`, as the Procfile serves it: not the bench
    server, whose floor keeps a broker connection per thread) after submits, vs. a worker of the bare trivial
    app; each in a gunicorn of its own with the same config, loaded the same way."""
    rest, peak, loads = {}, {}, []
    for name, target, path, options in (("product", "app:create_app()", "/fast/v2/remote-dispatch", submit),
                                        ("bare", "bench.trivial:app", "/bench/trivial", trivial)):
        server = common.start_gunicorn(f"web-{name}", target)
        try:
            loads.append(common.wrk(server.url + path, WARMUP, CONNECTIONS, **options))
            rest[name] = common.max_rss(server.children())
            with common.RssPeak(server.children) as sampled:
                loads.append(common.wrk(server.url + path, WARMUP * 2, CONNECTIONS, **options))
            peak[name] = sampled.peak
        finally:
            server.stop()
    baseline = "bare Flask app, same gunicorn config"
    return common.checked([
        Row("5 memory", "web worker RSS at rest (MiB)", rest["product"], baseline, rest["bare"]),
        Row("5 memory", "web worker RSS under submit load (MiB, peak)", peak["product"], baseline, peak["bare"]),
    ], *((load, 202) for load in loads))


if __name__ == "__main__":
    common.main(measure)
