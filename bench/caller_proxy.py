"""Benchmark: a caller's own proxy (`proxy`, app/egress/upstream.py): bench/browser.py's 10 actions, each with the
page view the agent reads, in the worker's own Selenium driver behind its egress proxy chained through a loopback
proxy that checks Basic credentials (HTTP) or a username and password (SOCKS5), ÷ the same egress proxy connecting
directly; and one request on a new connection (absolute-form GET, and GET in a CONNECT tunnel), the same way.
The proxies are the tests' (tests/upstream_proxies.py): a thread per connection, as a small proxy is."""
import os
import time

from bench import common
from bench.browser import PageServer, median
from bench.common import Row
from bench.recording import run
from tests.upstream_proxies import BasicAuthProxy, Socks5Proxy, fetch_through

SECTION = "6 caller's proxy"
RUNS = common.scaled(5, 2)  # interleaved runs, direct and through each proxy (medians)
REQUESTS = common.scaled(20, 5)  # requests on new connections per run and way, for the per-request figure


def measure(stack):
    from app.egress.proxy import EgressProxy

    config = stack.flask_app.config
    if not os.access(config["CHROMIUM_PATH"], os.X_OK):
        return [common.not_present(SECTION, "10 actions through a caller's proxy", "no Chromium (make browser)")]
    pages = PageServer()
    callers = {"HTTP": BasicAuthProxy("bench", "pw"), "SOCKS5": Socks5Proxy("bench", "pw")}
    proxy = EgressProxy(config, "bench-caller-proxy").start()
    times = {"direct": [], **{name: [] for name in callers}}
    requests = {(name, tunnel): [] for name in times for tunnel in (False, True)}
    try:
        proxy.wait_ready()
        run(config, proxy, pages.base, False)  # warm-up (disk cache, fonts)
        for _ in range(RUNS):  # interleaved, so each sees the same machine load
            for name, caller in [("direct", None), *callers.items()]:
                proxy.chain(caller and {"server": caller.server, "username": "bench", "password": "pw"})
                times[name].append(run(config, proxy, pages.base, False)[0])
                for tunnel in (False, True):
                    requests[name, tunnel].append(one_request(proxy, pages.base, tunnel))
        forwarded = {name: len(caller.forwarded()) for name, caller in callers.items()}
    finally:
        proxy.stop()
        pages.close()
        for caller in callers.values():
            caller.close()
    rows = [Row(SECTION, f"10 actions + page views through a loopback {name} proxy (s)", median(times[name]),
                "the same, no caller's proxy", median(times["direct"]),
                f"{forwarded[name]} connections forwarded by it in {RUNS} runs") for name in callers]
    return rows + [Row(SECTION, f"a request on a new connection, {way}, through the {name} proxy (ms)",
                       median(requests[name, tunnel]), "the same, no caller's proxy",
                       median(requests["direct", tunnel]))
                   for name in callers for tunnel, way in ((False, "absolute-form GET"), (True, "CONNECT + GET"))]


def one_request(proxy, base, tunnel):
    """Milliseconds per request of REQUESTS, each on a new connection to the egress proxy."""
    started = time.monotonic()
    for _ in range(REQUESTS):
        if "<h1>" not in fetch_through(proxy.port, f"{base}/start", tunnel):
            raise RuntimeError("the page did not come through the proxy")
    return (time.monotonic() - started) / REQUESTS * 1000


if __name__ == "__main__":
    common.main(measure)
