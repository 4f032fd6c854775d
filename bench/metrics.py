"""Metrics on ÷ off: submit throughput and p50 on two gunicorns of the product, one with METRICS_TOKEN (multiprocess
counters, scraped every SCRAPE_SECONDS as a Prometheus would) and one without, in alternating rounds; and web RSS at rest."""
import threading

from bench import common
from bench.common import Row

SECONDS = common.scaled(8, 4)
ROUNDS = common.scaled(3, 1)
WARMUP = common.scaled(2, 1)
CONNECTIONS = 16
TOKEN = "bench-metrics-token"
SCRAPE_SECONDS = 5.0  # more often than Prometheus's usual 15-60 s; a scrape's own CPU is measured apart
OFF = "metrics off (no METRICS_TOKEN), same config"


class Scraper:
    """GET /metrics every SCRAPE_SECONDS while a round runs (and once at its start), as a Prometheus would."""

    def __init__(self, url):
        self.url, self.stopping, self.scrapes, self.failures = url + "/metrics", threading.Event(), 0, 0
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        session = common.http()
        while True:
            ok = session.get(self.url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=10).status_code == 200
            self.scrapes, self.failures = self.scrapes + 1, self.failures + (not ok)
            if self.stopping.wait(SCRAPE_SECONDS):
                return

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stopping.set()
        self.thread.join(15)


def measure(stack):
    submit = dict(method="POST", body=common.SUBMIT_BODY, api_key=stack.api_key)
    servers = {"on": common.start_gunicorn("web-metrics-on", "app:create_app()", env={"METRICS_TOKEN": TOKEN}),
               "off": common.start_gunicorn("web-metrics-off", "app:create_app()", env={"METRICS_TOKEN": ""})}
    try:
        rest = {name: common.max_rss(server.children()) for name, server in servers.items()}
        for server in servers.values():
            common.wrk(server.url + "/fast/v2/remote-dispatch", WARMUP, CONNECTIONS, **submit)
        loads = {"on": [], "off": []}
        scrapes = failures = 0
        for turn in range(ROUNDS):
            for name in (("off", "on") if turn % 2 == 0 else ("on", "off")):  # neither always runs first
                url = servers[name].url
                if name == "on":
                    with Scraper(url) as scraper:
                        loads[name].append(common.wrk(url + "/fast/v2/remote-dispatch", SECONDS, CONNECTIONS,
                                                              cpu_of=servers[name].children(), **submit))
                    scrapes, failures = scrapes + scraper.scrapes, failures + scraper.failures
                else:
                    loads[name].append(common.wrk(url + "/fast/v2/remote-dispatch", SECONDS, CONNECTIONS,
                                                              cpu_of=servers[name].children(), **submit))
        after = {name: common.max_rss(server.children()) for name, server in servers.items()}
        scrape_ms = scrape_cpu_ms(servers["on"])
    finally:
        for server in servers.values():
            server.stop()
    stack.purge("tasks")
    stack.sql("DELETE FROM tasks")
    on, off = common.median_load(loads["on"]), common.median_load(loads["off"])
    # A shared machine's load drifts between rounds: each round's on ÷ off (they ran back to back) says more.
    paired = sorted(a.rps / b.rps for a, b in zip(loads["on"], loads["off"]) if b.rps)
    common.say(f"metrics: throughput on ÷ off per round: {', '.join(f'{r:.2f}' for r in paired)}")
    section = "m metrics"
    return common.checked([
        Row(section, f"submit throughput, metrics on (req/s, {CONNECTIONS} connections)", on.rps, OFF, off.rps,
            note=f"median of the rounds' on ÷ off {paired[len(paired) // 2]:.2f}; {scrapes} scrapes during the load, "
                 f"{failures} failed"),
        Row(section, "submit latency p50, metrics on (ms)", on.p50_ms, OFF, off.p50_ms),
        Row(section, "submit latency p99, metrics on (ms)", on.p99_ms, OFF, off.p99_ms),
        Row(section, "web worker CPU per submit, metrics on (ms)", on.cpu_ms, OFF, off.cpu_ms),
        Row(section, "web CPU per scrape of /metrics (ms)", scrape_ms, "one submit's web CPU (ms), metrics off",
            off.cpu_ms),
        Row(section, "one event counted, multiprocess mode (µs, in-process)", counting_us(), "one submit's web CPU "
            "(µs), metrics off", off.cpu_ms * 1000 if off.cpu_ms else None),
        Row(section, "web worker RSS at rest, metrics on (MiB)", rest["on"], OFF, rest["off"]),
        Row(section, "web worker RSS after the load, metrics on (MiB)", after["on"], OFF, after["off"]),
    ], (on, 202), (off, 202))


def scrape_cpu_ms(server, scrapes=20):
    """The web workers' CPU per GET /metrics (the event files summed, the database's and the broker's state read)."""
    session, headers = common.http(), {"Authorization": f"Bearer {TOKEN}"}
    before = common.cpu_seconds(server.children())
    for _ in range(scrapes):
        assert session.get(server.url + "/metrics", headers=headers, timeout=10).status_code == 200
    return (common.cpu_seconds(server.children()) - before) * 1000 / scrapes


def counting_us(calls=20000):
    """What the submit path adds per task with metrics on: one labelled counter increment into the multiprocess
    files, timed in a process of its own (the folder set before prometheus_client is imported, as gunicorn does)."""
    import subprocess
    import sys
    import tempfile

    script = ("import os, sys, time; from app.metrics.processes import prepare; prepare(sys.argv[1], 'bench'); "
              "from app.metrics import events; n = int(sys.argv[2]); start = time.perf_counter()\n"
              "for _ in range(n): events.task_submitted('cloud', 'general')\n"
              "print((time.perf_counter() - start) / n * 1e6)")
    with tempfile.TemporaryDirectory() as folder:
        out = subprocess.run([sys.executable, "-c", script, folder, str(calls)], cwd=common.ROOT, check=True,
                             capture_output=True, text=True).stdout
    return float(out.strip().splitlines()[-1])


if __name__ == "__main__":
    common.main(measure)
