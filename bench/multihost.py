"""Benchmark: many machines (`python -m bench.multihost`, as root). The deployment of tests/test_multihost.py (web1,
web2, worker1, ops: namespace machines on a private bridge running the Procfile), a kept session created through
web1, and through each web machine: a CDP command's round trip (p50), a kept-session task's submit → first action
seen by its caller, and a live viewer's click → the next frame (p50). Then, through web2: a stop → the old CDP
credential refused, and → the last process of that browser gone (on whichever machine holds it).
A figure that cannot be taken (the path does not work yet) is reported as what failed."""
import json
import statistics
import time

from tests.conftest import wait_until
from tests.multihost import Deployment, cmdline
from tests.test_live import BUTTON, FIELD, Viewer
from tests.test_multihost import (LAYOUT, SETTINGS, Site, api, cdp_command, cdp_connect, cdp_headers,
                                  create_session, refused, stop_session, submit, through)

ROUNDS = 20


def p50_ms(samples):
    return f"{statistics.median(samples) * 1000:.1f} ms (n={len(samples)})"


def cdp_rtt(deployment, key, url, machine):
    ws = cdp_connect(through(url, deployment, machine), cdp_headers(deployment, key, url, machine))
    try:
        samples = []
        for i in range(ROUNDS):
            started = time.perf_counter()
            cdp_command(ws, "Browser.getVersion", i + 1)
            samples.append(time.perf_counter() - started)
        return p50_ms(samples)
    finally:
        ws.close()


def first_action(deployment, key, session_id, site, machine):
    """Submit → the first entry of its trace, as the caller polling `machine` sees it."""
    started = time.perf_counter()
    request_id = submit(deployment, key, {"prompt": f"/Operator\ngo to {site.url('/form')}\nwait 1",
                                          "cloudBrowserSessionId": session_id}, machine)
    wait_until(lambda: api(deployment, machine, key, "GET", f"/remote-dispatch/responses/{request_id}").json()
               .get("progress", {}).get("actionTrace"), "the first action", timeout=60)
    seen = time.perf_counter() - started
    wait_until(lambda: api(deployment, machine, key, "GET", f"/remote-dispatch/responses/{request_id}").json()
               .get("completedAt"), "the task", timeout=60)
    return f"{seen * 1000:.0f} ms"


def input_latency(deployment, key, session_id, machine):
    """A viewer's click → the next frame it receives (the page changes on each click: the form's button)."""
    reply = api(deployment, machine, key, "GET", f"/cloud-browser/sessions/{session_id}/live",
                params={"mode": "control"})
    reply.raise_for_status()
    viewer = Viewer(reply.json()["liveUrl"])
    try:
        wait_until(lambda: viewer.of("frame"), "a first frame", timeout=20)
        viewer.click(FIELD)
        samples = []
        for _ in range(ROUNDS // 2):
            frames = len(viewer.of("frame"))
            started = time.perf_counter()
            viewer.send({"type": "text", "text": "x"})
            viewer.click(BUTTON)
            wait_until(lambda: len(viewer.of("frame")) > frames, "a frame after the click", timeout=10)
            samples.append(time.perf_counter() - started)
            time.sleep(0.2)
        return p50_ms(samples)
    finally:
        viewer.close()


def attempt(measure):
    try:
        return measure()
    except Exception as exc:  # a path that does not work yet: say how it failed, and go on
        return f"failed: {type(exc).__name__}: {str(exc)[:160]}"


def main():
    results = {}
    with Deployment(LAYOUT, env=SETTINGS) as deployment:
        site = Site(deployment.gateway)
        key = deployment.create_key("bench", "pro")
        created = create_session(deployment, key, machine="web1", cdp=True)
        session_id, url = created["session_id"], created["cdp_websocket_url"]
        try:
            for machine in ("web1", "web2"):
                results[f"CDP round trip p50 through {machine}"] = attempt(
                    lambda: cdp_rtt(deployment, key, url, machine))
                results[f"kept-session task submit -> first action through {machine}"] = attempt(
                    lambda: first_action(deployment, key, session_id, site, machine))
                results[f"live view click -> next frame p50 through {machine}"] = attempt(
                    lambda: input_latency(deployment, key, session_id, machine))
            holders = [m for m in deployment.machines.values()
                       if any(session_id in cmdline(pid) for pid in m.processes())]
            stopped_at = time.perf_counter()
            assert stop_session(deployment, key, session_id).status_code == 200
            results["stop through web2 -> old CDP credential refused"] = attempt(lambda: (
                wait_until(lambda: refused(url, created["cdp_auth_headers"]), "refused", timeout=30),
                f"{(time.perf_counter() - stopped_at) * 1000:.0f} ms")[1])
            results["stop through web2 -> last browser process gone"] = attempt(lambda: (
                wait_until(lambda: not any(session_id in cmdline(pid) for m in holders for pid in m.processes()),
                           "gone", timeout=60),
                f"{(time.perf_counter() - stopped_at) * 1000:.0f} ms on {[m.name for m in holders]}")[1])
        finally:
            stop_session(deployment, key, session_id)
            site.close()
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
