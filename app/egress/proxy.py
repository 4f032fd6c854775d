"""The browser's egress proxy (one per browser session) and the Chromium flags that force every request through it."""
import json
import logging
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from ..sandbox.box import SETPRIV
from . import upstream
from .policy import Policy
from ..sandbox.processes import alive, processes

log = logging.getLogger(__name__)

ROOT = Path(__file__).resolve().parent.parent
PLUGIN = "app.egress.plugin.EgressPlugin"
POLICY_SETTINGS = ("ALLOW_PRIVATE_URLS", "EGRESS_ALLOW_HOSTS", "EGRESS_TREAT_AS_PUBLIC", "EGRESS_ONLY_HOSTS")
# Beside the proxy flags: what would go around an HTTP proxy, off.
HARDENING_ARGUMENTS = [
    # WebRTC's UDP (STUN/TURN, peer connections) cannot be proxied: only proxied connections for it.
    "--force-webrtc-ip-handling-policy=disable_non_proxied_udp",
    "--webrtc-ip-handling-policy=disable_non_proxied_udp",
    "--disable-quic",
    # Fewer of Chromium's own background requests (updates, sign-in, start page) in the task's refusals.
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--no-default-browser-check",
]


class ProxyFailed(Exception):
    """The egress proxy did not start (the message says why)."""


def _egress_root(config):
    return Path(config.get("VAR_DIR") or ROOT / "var") / "browser-egress"


class EgressProxy:
    """A proxy.py process that connects only to addresses app.egress checked, for one browser session.

    One per session (not per worker): its refusal log then belongs to one task, and it ends with the session.
    It runs in its own process group under a directory `<VAR_DIR>/browser-egress/<worker pid>-<token>/`, which is
    how `reap_orphans` recognises the proxies a killed worker left behind. A kept cloud session's proxy lives
    under the session's own `directory` instead: it outlives the web process that started it and ends with the
    session (app/sessions/browsers.py), so `reap_orphans` never takes it for a dead worker's.
    """

    def __init__(self, config, label="", directory=None):
        self.label = label
        # Where the proxy listens and where Chromium is told it is: loopback when the browser runs on this
        # machine; with a Selenium Grid on other machines, an address of this worker that the nodes reach.
        self.host = config.get("BROWSER_PROXY_HOST") or "127.0.0.1"
        self.settings = {name: config.get(name) for name in POLICY_SETTINGS if config.get(name) is not None}
        # The dependencies' host and port only: the proxy's environment never holds their credentials.
        self.settings["SERVICE_ENDPOINTS"] = Policy.from_config(config).service
        self.of_worker = not directory  # a task's: it must not outlive the worker process
        self.directory = (Path(directory) if directory
                          else _egress_root(config) / f"{os.getpid()}-{secrets.token_hex(6)}")
        self.port_file = self.directory / "port"
        self.refusal_log = self.directory / "refusals.jsonl"
        self.fence_file = self.directory / "fence.json"  # the running task's allowedDomains (see fence)
        self.upstream_file = self.directory / "upstream"  # the caller's proxy, encrypted (see chain)
        self.key = upstream.key_for(config, self.directory)
        self.proc = None
        self.port = None
        self._seen = 0

    def start(self):
        """Start the proxy and return at once: its port is known now, so Chromium can start beside it
        (`chromium_arguments`); `wait_ready` before the browser's first navigation."""
        self.directory.mkdir(parents=True, exist_ok=True)
        with socket.socket() as probe:  # a free port now; wait_ready fails if someone takes it before the proxy
            probe.bind((self.host, 0))
            self.port = probe.getsockname()[1]
        env = {**os.environ, "RD_EGRESS_POLICY": json.dumps(self.settings, default=str),
               "RD_EGRESS_LOG": str(self.refusal_log), "RD_EGRESS_FENCE": str(self.fence_file),
               "RD_EGRESS_UPSTREAM": str(self.upstream_file), "RD_EGRESS_KEY": self.key or "",
               "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
        argv = [sys.executable, "-m", "proxy", "--hostname", self.host, "--port", str(self.port),
                "--port-file", str(self.port_file), "--num-acceptors", "1", "--plugins", PLUGIN,
                "--log-level", "WARNING", "--log-file", str(self.directory / "proxy.log"), "--timeout", "30",
                # proxy.py names itself to every site in a Via header (`1.1 proxy.py v2.4`): a browser of a
                # person's has no proxy of ours to announce (docs/browser-identity.md).
                "--disable-headers", "Via"]
        if self.of_worker and os.access(SETPRIV, os.X_OK):  # killed with the worker; its acceptor by the reaper
            argv = [SETPRIV, "--pdeathsig", "KILL", "--"] + argv
        with open(self.directory / "stdout.log", "ab") as out:
            self.proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=out,
                                         stderr=subprocess.STDOUT, start_new_session=True)
        return self

    def wait_ready(self, timeout=20):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.port_file.exists() and self.port_file.read_text().strip() == str(self.port):
                return self
            if self.proc.poll() is not None:
                break
            time.sleep(0.02)
        output = (self.directory / "stdout.log").read_text(errors="replace")[-1000:]
        self.stop()
        raise ProxyFailed(f"the browser's egress proxy did not start: {output.strip() or 'no output'}")

    @property
    def address(self):
        return f"{self.host}:{self.port}"

    def chromium_arguments(self):
        """Flags that send every connection of the browser through this proxy."""
        return [f"--proxy-server=http://{self.address}",
                # Chromium never proxies loopback unless told; `<-loopback>` removes that implicit bypass.
                "--proxy-bypass-list=<-loopback>"] + HARDENING_ARGUMENTS

    def refusals(self):
        """Every refusal so far: [{"method", "host", "port", "reason", "kind", "time"}], kind "policy", "unresolved"
        (a name that does not resolve) or "upstream" (the caller's proxy failed: the reason says how)."""
        try:
            lines = self.refusal_log.read_text().splitlines()
        except FileNotFoundError:
            return []
        return [json.loads(line) for line in lines if line.strip()]

    def new_refusals(self):
        """The policy refusals and the caller's proxy's failures since the last call (for the trace entry of the
        action that caused them); names that did not resolve are left out (see app/egress/plugin._unresolvable)."""
        found = self.refusals()
        fresh, self._seen = found[self._seen:], len(found)
        return [r for r in fresh if r.get("kind", "policy") in ("policy", "upstream")]

    def fence(self, patterns):
        """Narrow the proxy to a task's allowedDomains (host patterns) from its next connection on; None or []
        lifts the fence. A kept session's proxy serves one task after another: each task sets its own."""
        if not patterns:
            self.fence_file.unlink(missing_ok=True)
            return
        self.directory.mkdir(parents=True, exist_ok=True)
        part = self.directory / f"fence.{secrets.token_hex(4)}.part"
        part.write_text(json.dumps(list(patterns)))
        part.replace(self.fence_file)  # the proxy never reads half a file

    def chain(self, proxy):
        """Send every connection, after its checks, through the caller's proxy ({"server", "username",
        "password"}, app/egress/upstream.py) from the next one on; None: directly again. The settings are written
        encrypted with this proxy's own key (upstream.key_for): nothing of the credentials is on disk in plain text."""
        if not proxy:
            self.upstream_file.unlink(missing_ok=True)
            return
        if not self.key:
            raise ProxyFailed("a caller's proxy needs ENCRYPTION_KEY (its credentials are kept encrypted)")
        self.directory.mkdir(parents=True, exist_ok=True)
        part = self.directory / f"upstream.{secrets.token_hex(4)}.part"
        part.write_bytes(upstream.seal_file(self.key, proxy))
        part.replace(self.upstream_file)  # the proxy never reads half a file

    def stop(self):
        """End the proxy's process group (main process and its acceptor) and remove its directory. Idempotent."""
        proc, self.proc = self.proc, None
        if proc is not None:
            _end_group(proc.pid, lambda: proc.poll() is not None, proc.wait)
        for name in ("port", "proxy.log", "stdout.log", "refusals.jsonl", "fence.json", "upstream"):
            (self.directory / name).unlink(missing_ok=True)
        try:
            self.directory.rmdir()
        except OSError:
            pass

    def __enter__(self):
        return self.start().wait_ready()

    def __exit__(self, *exc):
        self.stop()


def _end_group(pgid, ended, wait):
    for sig, grace in ((signal.SIGTERM, 5), (signal.SIGKILL, 5)):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            break
        try:
            wait(grace)
        except subprocess.TimeoutExpired:
            continue
        if ended():
            break
    # The acceptor (not our child) may outlive the main process by a moment: end it and see it gone.
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, signal.SIGKILL)
        except ProcessLookupError:
            return
        time.sleep(0.02)
    log.warning("browser egress proxy group %s still has processes after SIGKILL", pgid)


def our_proxies(config):
    """{pid: worker pid} of every egress proxy process (main and acceptor) started under this VAR_DIR: their
    command line runs our plugin with a port file under `<VAR_DIR>/browser-egress/<worker pid>-<token>/`."""
    root = str(_egress_root(config)) + os.sep
    found = {}
    for pid, port_file in _plugin_processes():
        owner = port_file[len(root):].split(os.sep)[0].split("-")[0] if port_file.startswith(root) else ""
        if owner.isdigit():
            found[pid] = int(owner)
    return found


def stop_proxies_under(directory):
    """End every egress proxy whose port file is in `directory` (a kept session's, started by another process
    maybe) and remove the directory. Idempotent; only processes running our plugin there are touched."""
    for pid in proxies_under(directory):
        try:
            pgid = os.getpgid(pid)
        except ProcessLookupError:
            continue
        if pgid > 1 and pgid != os.getpgrp():
            _end_group(pgid, lambda: True, lambda grace: None)
    shutil.rmtree(directory, ignore_errors=True)


def proxies_under(directory):
    """PIDs of the egress proxy processes (main and acceptor) whose port file is in `directory`."""
    prefix = str(directory) + os.sep
    return [pid for pid, port_file in _plugin_processes() if port_file.startswith(prefix)]


def _plugin_processes():
    """(pid, port file) of every process running our plugin."""
    for pid, argv in processes():
        if PLUGIN in argv and "--port-file" in argv[:-1]:
            yield pid, argv[argv.index("--port-file") + 1]


def reap_orphans(config):
    """Kill egress proxies whose worker process is gone (a SIGKILLed worker cannot stop them); remove their
    directories. Returns their pids. Only `our_proxies` are touched."""
    reaped = []
    for pid, owner in our_proxies(config).items():
        if alive(owner):
            continue
        try:
            pgid = os.getpgid(pid)
        except ProcessLookupError:
            continue
        if pgid <= 1 or pgid == os.getpgrp():
            continue
        _end_group(pgid, lambda: True, lambda grace: None)
        reaped.append(pid)
        log.warning("reaped orphaned browser egress proxy %s (worker %s is gone)", pid, owner)
    root = _egress_root(config)
    if root.is_dir():
        live_owners = set(our_proxies(config).values())
        for directory in root.iterdir():
            owner = directory.name.split("-")[0]
            if owner.isdigit() and int(owner) not in live_owners and not alive(int(owner)):
                shutil.rmtree(directory, ignore_errors=True)
    return reaped

