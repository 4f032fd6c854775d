"""Metrics on ÷ off: submit throughput and p50 on two gunicorns of the product, one with METRICS_TOKEN (multiprocess
counters, scraped once a second as a Prometheus would) and one without, in alternating rounds; and web RSS at rest."""
import threading

from bench import common
from bench.common import Row

SECONDS = common.scaled(8, 4)
ROUNDS = common.scaled(3, 1)
WARMUP = common.scaled(2, 1)
CONNECTIONS = 16
TOKEN = "bench-metrics-token"
OFF = "metrics off (no METRICS_TOKEN), same config"


class Scraper:
    """GET /metrics once a second while a round runs, as a Prometheus scrape_interval of 1 s would."""

    def __init__(self, url):
        self.url, self.stopping, self.scrapes, self.failures = url + "/metrics", threading.Event(), 0, 0
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        session = common.http()
        while not self.stopping.wait(1.0):
            ok = session.get(self.url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=10).status_code == 200
            self.scrapes, self.failures = self.scrapes + 1, self.failures + (not ok)

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
        for _ in range(ROUNDS):
            for name in ("off", "on"):
                url = servers[name].url
                if name == "on":
                    with Scraper(url) as scraper:
                        loads[name].append(common.wrk(url + "/fast/v2/remote-dispatch", SECONDS, CONNECTIONS, **submit))
                    scrapes, failures = scrapes + scraper.scrapes, failures + scraper.failures
                else:
                    loads[name].append(common.wrk(url + "/fast/v2/remote-dispatch", SECONDS, CONNECTIONS, **submit))
        after = {name: common.max_rss(server.children()) for name, server in servers.items()}
    finally:
        for server in servers.values():
            server.stop()
    stack.purge("tasks")
    stack.sql("DELETE FROM tasks")
    on, off = common.median_load(loads["on"]), common.median_load(loads["off"])
    section = "m metrics"
    return common.checked([
        Row(section, f"submit throughput, metrics on (req/s, {CONNECTIONS} connections)", on.rps, OFF, off.rps,
            note=f"{scrapes} scrapes during the load, {failures} failed"),
        Row(section, "submit latency p50, metrics on (ms)", on.p50_ms, OFF, off.p50_ms),
        Row(section, "submit latency p99, metrics on (ms)", on.p99_ms, OFF, off.p99_ms),
        Row(section, "web worker RSS at rest, metrics on (MiB)", rest["on"], OFF, rest["off"]),
        Row(section, "web worker RSS after the load, metrics on (MiB)", after["on"], OFF, after["off"]),
    ], (on, 202), (off, 202))


if __name__ == "__main__":
    common.main(measure)
