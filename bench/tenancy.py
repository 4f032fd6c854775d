"""Benchmark 7: the tenancy attacker of issue 31 (`python -m bench.tenancy`): from key B's kept browser over CDP, with
private addresses allowed, every listening port of the host is tried (`Network.loadNetworkResource`, as the attacker
did); counted: key A's browser endpoints read, the service's own endpoints reached, WebUI and tracing leaks."""
import json
import os
import time

from app.egress import endpoints
from app.egress.proxy import proxies_under
from app.sandbox import processes as sandbox_processes
from app.sandbox.processes import command_line
from bench import common
from bench.common import Row
from bench.sessions import stack_post

SECTION = "7 tenancy"
LEAK_COMMANDS = [("Tracing.start", {"transferMode": "ReturnAsStream"}), ("Tracing.getCategories", {}),
                 ("Browser.getBrowserCommandLine", {}), ("SystemInfo.getInfo", {}), ("SystemInfo.getProcessInfo", {})]


class Cdp:
    """A caller of the relay, as the attacker's script was."""

    def __init__(self, session):
        import websocket

        headers = [f"{name}: {value}" for name, value in session["cdp_auth_headers"].items()]
        self.ws = websocket.create_connection(session["cdp_websocket_url"], header=headers, timeout=60,
                                              suppress_origin=True)
        self.next_id, self.events = 0, []

    def __call__(self, method, params=None, session=None):
        self.next_id += 1
        self.ws.send(json.dumps({"id": self.next_id, "method": method, "params": params or {},
                                 **({"sessionId": session} if session else {})}))
        while True:
            message = json.loads(self.ws.recv())
            if message.get("id") == self.next_id:
                return message
            self.events.append(message)

    def close(self):
        self.ws.close()


def host_listening_ports():
    """{port: owner pid} of every TCP port listening on this host (this network namespace)."""
    listeners = endpoints._listeners()
    owners = endpoints._owners({inode for inodes in listeners.values() for inode in inodes})
    return {port: owners.get(next(iter(inodes))) for port, inodes in listeners.items()}


def service_ports(stack, config, listening):
    """The service's own ports, as this benchmark knows them (not as the egress check finds them): those of the
    processes the stack started and their children, of every CDP relay and egress proxy, and the dependencies.
    The web port is left out: it is the public API, and serves the login page kept browsers open."""
    procs = [proc for proc in stack.procs if proc is not stack.__dict__.get("web")]
    ours = {proc.pid for proc in procs} | {child for proc in procs for child in proc.children()}
    dependencies = {port for _host, port, _whole in endpoints.dependencies(config)}
    return {port for port, pid in listening.items() if pid in ours or port in dependencies
            or endpoints.service_command(command_line(pid) or []) in ("CDP relay", "browser egress proxy")}


def box_ports(config, session_id):
    """The host ports key A's browser box (chromedriver, DevTools, their forwarders) listens on."""
    from app.sessions import browsers

    root = browsers.session_dir(config, session_id)
    proxy = set(proxies_under(browsers.egress_dir(config, session_id)))
    box = {pid for pid, directory in sandbox_processes.processes_under(root.parent).items()
           if directory == str(root) and pid not in proxy}
    inodes = endpoints._listeners()
    owners = endpoints._owners({inode for found in inodes.values() for inode in found})
    return {port for port, found in inodes.items() if any(owners.get(inode) in box for inode in found)}


def _read(cdp, page, frame, url):
    """True if B's page got a 200 from `url` (the attacker's Network.loadNetworkResource)."""
    reply = cdp("Network.loadNetworkResource", {"frameId": frame, "url": url,
                                                 "options": {"disableCache": True, "includeCredentials": False}},
                session=page)
    resource = (reply.get("result") or {}).get("resource") or {}
    return bool(resource.get("success")) and resource.get("httpStatusCode") == 200


def measure(stack):
    config = {name: os.environ.get(name) for name in ("VAR_DIR", "DATABASE_URL", "CELERY_BROKER_URL",
                                                       "RATELIMIT_STORAGE_URI")}
    stack.tasks_worker  # noqa: B018  (starts the sessions' browsers)
    a = stack_post(stack, "/cloud-browser/create-cloud-browser-session", {})
    b = stack_post(stack, "/cloud-browser/create-cloud-browser-session", {})
    cdp = Cdp(b)
    try:
        listening = host_listening_ports()
        a_ports = box_ports(config, a["session_id"])
        service = service_ports(stack, config, listening)
        target = cdp("Target.createTarget", {"url": "about:blank"})["result"]["targetId"]
        page = cdp("Target.attachToTarget", {"targetId": target, "flatten": True})["result"]["sessionId"]
        frame = cdp("Page.getFrameTree", session=page)["result"]["frameTree"]["frame"]["id"]
        cdp("Network.enable", session=page)
        started = time.perf_counter()
        cross_tenant = sum(_read(cdp, page, frame, f"http://127.0.0.1:{port}{path}")
                           for port in a_ports for path in ("/sessions", "/json/version"))
        for port in service | a_ports:  # whatever answers (HTTP or not), the proxy's refusal log says if it went
            _read(cdp, page, frame, f"http://127.0.0.1:{port}/")
        refused = {r["port"] for r in _refusals(config, b["session_id"]) if r["host"] == "127.0.0.1"}
        reached = (service | a_ports) - refused
        probe_s = time.perf_counter() - started
        leaks = _leaks(cdp)
    finally:
        cdp.close()
        for session in (a, b):
            stack_post(stack, "/cloud-browser/stop-cloud-browser-session", {"session_id": session["session_id"]})
    common.say(f"tenancy: {len(a_ports)} host ports of A's browser, {cross_tenant} read from B; {len(reached)} of "
               f"{len(service | a_ports)} service ports reached; {leaks} WebUI/tracing leaks ({probe_s:.1f} s)")
    return [Row(SECTION, "A's browser endpoints read from B's browser (count)", cross_tenant,
                "A's browser ports listening on the host", len(a_ports) or None, note="goal 0"),
            Row(SECTION, "service endpoints reached from B's browser (count)", len(reached),
                "service ports listening on the host", len(service | a_ports) or None,
                note=f"goal 0; reached: {sorted(reached)}" if reached else "goal 0"),
            Row(SECTION, "WebUI / tracing / host-facts leaks through the relay (count)", leaks,
                "attempts", len(LEAK_COMMANDS) + 3, note="goal 0")]


def _refusals(config, session_id):
    from app.sessions import browsers

    path = browsers.egress_dir(config, session_id) / "refusals.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


def _leaks(cdp):
    """What the relay let through of Chromium's insides: internal targets listed or attachable, trace, host facts."""
    leaks = sum("error" not in cdp(method, params) for method, params in LEAK_COMMANDS)
    shown = cdp("Target.getTargets", {"filter": [{}]}).get("result", {}).get("targetInfos", [])
    internal = [t for t in shown if t["type"] not in ("page", "tab", "iframe", "worker", "service_worker",
                                                      "shared_worker") or t["url"].startswith(("chrome", "devtools"))]
    leaks += bool(internal)
    opened = cdp("Target.createTarget", {"url": "chrome://omnibox-popup.top-chrome/"})
    leaks += "error" not in opened
    attached = [cdp("Target.attachToTarget", {"targetId": t["targetId"], "flatten": True}) for t in internal]
    leaks += any("error" not in reply for reply in attached)
    return leaks


if __name__ == "__main__":
    os.environ.setdefault("BENCH_QUICK", "1")
    common.main(measure)
