"""The kept sessions' warm pool: sandboxed browsers a tasks worker starts ahead on its machine, each adopted once by a
new session that a worker of the same machine starts (app/sessions/service.start_here)."""
import json
import logging
import os
import secrets
import shutil
import threading
from dataclasses import asdict, dataclass

from ..background import Background
from ..egress.proxy import proxies_under
from ..sandbox import box as sandbox, processes as sandbox_processes
from . import browsers

log = logging.getLogger(__name__)

CHECK_SECONDS = 0.5  # how often the filler looks at its browsers when the pool is full
REAP_SECONDS = 10  # how often it reaps the browsers of a pool process that died (a SIGKILLed web worker)


def pool_root(config):
    """The pool's index: one JSON file per ready browser, named by the session id it is waiting for."""
    return browsers.sessions_root(config) / "pool"


def cold_reason(config):
    """Why this deployment's sessions start cold (None: they can come from the pool)."""
    if int(config.get("SESSION_POOL_SIZE") or 0) <= 0:
        return "SESSION_POOL_SIZE is 0"
    if config.get("SELENIUM_REMOTE_URL"):
        return "a Selenium Grid starts its own browsers"
    for path in (config["CHROMIUM_PATH"], config["CHROMEDRIVER_PATH"]):
        if not os.access(path, os.X_OK):
            return f"{path} is not installed"
    return sandbox.missing_tools()


@dataclass
class Pooled:
    """A ready browser: already laid out as the session `session_id`'s (its folder, egress proxy, DevTools
    socket), so the session that adopts it takes that id and everything else works as for a cold one."""
    session_id: str
    launched: dict  # browsers.Launched's fields
    chromium_pid: int

    @property
    def launch(self):
        return browsers.Launched(**self.launched)

    def alive(self):
        """Its sandbox's process group and its Chromium still run."""
        return all(sandbox_processes.alive(pid) for pid in (self.launched["pid"], self.chromium_pid))


def ready(config):
    """{session id: Pooled} of the ready browsers of this VAR_DIR, read from disk."""
    root = pool_root(config)
    found = {}
    for name in os.listdir(root) if root.is_dir() else ():
        if name.endswith(".json"):
            try:
                found[name[:-5]] = Pooled(**json.loads((root / name).read_text()))
            except (OSError, ValueError, TypeError):
                continue
    return found


def claim(config):
    """A ready, never used, live browser of this host's pool, now owned by this process (it dies with it until
    `adopted`); None when there is none (the caller starts one cold). A dead one found here is destroyed."""
    if cold_reason(config):
        return None
    root = pool_root(config)
    try:
        names = sorted(name for name in os.listdir(root) if name.endswith(".json"))
    except OSError:
        return None
    for name in names:
        claimed = root / (name[:-5] + ".claimed")
        try:
            os.rename(root / name, claimed)  # atomic: one claimer wins, whichever web process it is
        except OSError:
            continue
        try:
            pooled = Pooled(**json.loads(claimed.read_text()))
        except (OSError, ValueError, TypeError):
            claimed.unlink(missing_ok=True)
            continue
        directory = browsers.session_dir(config, pooled.session_id)
        if directory.is_dir():
            sandbox.write_marker(directory, os.getpid())  # the reaper's rule follows it: this process's now
        if pooled.alive():
            return pooled
        log.warning("pooled session browser %s was dead at its claim: destroyed, not handed out", pooled.session_id)
        # Not in the request's time: ending its processes may wait for them.
        threading.Thread(target=destroy, args=(config, pooled), name="destroy-pooled-session", daemon=True).start()
    return None


def pss_mib(config, pooled):
    """Memory of one pooled browser: its sandbox's processes (forwarders, chromedriver, Chromium), its egress
    proxy."""
    directory = str(browsers.session_dir(config, pooled.session_id))
    pids = {pid for pid, found in sandbox_processes.processes_under(str(browsers.sessions_root(config))).items()
            if found == directory}  # the egress proxy's command line names the folder too: counted once
    pids |= set(proxies_under(browsers.egress_dir(config, pooled.session_id)))
    return sandbox_processes.pss_mib(pids)


def adopted(config, pooled):
    """Its session's row is active: the browser is the session's (it ends with it, as a cold one), no process's."""
    sandbox.write_marker(browsers.session_dir(config, pooled.session_id), None)
    (pool_root(config) / f"{pooled.session_id}.claimed").unlink(missing_ok=True)


def destroy(config, pooled):
    """End a pooled browser whatever its state: its processes, its egress proxy, its folder, its index file."""
    launched = pooled.launch
    browsers.terminate(None, None, launched.host, launched.pid, launched.profile_dir,
                       egress=browsers.egress_dir(config, pooled.session_id))
    shutil.rmtree(browsers.session_dir(config, pooled.session_id), ignore_errors=True)
    for suffix in (".json", ".claimed"):
        (pool_root(config) / f"{pooled.session_id}{suffix}").unlink(missing_ok=True)


class SessionPool(Background):
    """Keeps `size` ready browsers, one started at a time, from a thread of a tasks worker's main process. Every
    such worker runs one; the one holding the host's flock fills, the others wait to take over if it goes. Its
    browsers do not die with the thread (a session must outlive the process that started it): they carry its pid
    in their marker instead, and are reaped once it is dead (by the next filler, or the workers' sweep)."""

    name = "session-pool"
    join_seconds = 60

    def __init__(self, config, size):
        super().__init__()
        self.config, self.size = config, size
        self.root = pool_root(config)
        self.mine = {}  # session id -> Pooled, started by this process and not yet adopted
        self._lock_file = None

    def _ready(self):
        return [pooled for sid, pooled in self.mine.items() if (self.root / f"{sid}.json").exists()]

    def _run(self):
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            reaped_at = None
            while not self.stopping.is_set():
                if self._lock_file is None:
                    if not self._host_lock():
                        self.stopping.wait(5)
                        continue
                    self._destroy_orphans()
                if reaped_at is None or self._clock() - reaped_at > REAP_SECONDS:
                    sandbox_processes.reap(str(browsers.sessions_root(self.config)))  # dead fillers' browsers
                    self._forget_gone()
                    reaped_at = self._clock()
                self._tidy()
                if len(self._ready()) < self.size:
                    self._start_one()
                else:
                    self.stopping.wait(CHECK_SECONDS)
        except Exception:
            log.exception("the session pool stopped: sessions start cold from now on")
        for sid in list(self.mine):
            self._drop_unclaimed(sid)

    def _destroy_orphans(self):
        """The ready browsers of the previous filler (dead: the lock was its): never handed out, destroyed."""
        for sid, pooled in ready(self.config).items():
            if sid in self.mine:
                continue
            try:
                os.rename(self.root / f"{sid}.json", self.root / f"{sid}.claimed")
            except OSError:
                continue  # a session took it first: its claim checks that it lives
            log.warning("pooled session browser %s of a stopped worker: destroyed", sid)
            destroy(self.config, pooled)

    def _forget_gone(self):
        """Index files whose browser is gone (reaped, or its claimer died before its session started)."""
        for name in os.listdir(self.root):
            sid, dot, _ = name.partition(".")
            if dot and sid.startswith("cbs_") and not browsers.session_dir(self.config, sid).is_dir():
                (self.root / name).unlink(missing_ok=True)

    @staticmethod
    def _clock():
        return os.times().elapsed

    def _host_lock(self):
        """One filler per host (per VAR_DIR), whatever the number of workers: an flock its owner holds."""
        if self._lock_file is None:
            self._lock_file = sandbox_processes.host_lock(self.root / "manager.lock")
        return self._lock_file is not None

    def _tidy(self):
        """Forget browsers claimed by a session; destroy ready ones that died (replaced on the next turn)."""
        for sid, pooled in list(self.mine.items()):
            if not (self.root / f"{sid}.json").exists():
                del self.mine[sid]  # claimed: its claimer ends it if its session does not start
            elif not pooled.alive():
                log.warning("pooled session browser %s died while ready: replaced", sid)
                self._drop_unclaimed(sid)

    def _drop_unclaimed(self, sid):
        pooled = self.mine.pop(sid)
        try:
            os.rename(self.root / f"{sid}.json", self.root / f"{sid}.claimed")  # no session takes it while it ends
        except OSError:
            return  # a session claimed it meanwhile: it is that session's
        destroy(self.config, pooled)

    def _start_one(self):
        session_id = "cbs_" + secrets.token_hex(12)
        config = self.config
        try:
            launched = browsers.launch(config, session_id, owner_pid=os.getpid())
        except Exception as exc:
            shutil.rmtree(browsers.session_dir(config, session_id), ignore_errors=True)
            log.warning("the session pool could not start a browser (%s); retrying", exc)
            self.stopping.wait(5)
            return
        pooled = Pooled(session_id=session_id, launched=asdict(launched),
                        chromium_pid=sandbox_processes.browser_pid(launched.profile_dir) or 0)
        if not pooled.alive():
            destroy(config, pooled)
            self.stopping.wait(1)
            return
        self.mine[session_id] = pooled
        part = self.root / f"{session_id}.part"
        part.write_text(json.dumps(asdict(pooled)))
        part.replace(self.root / f"{session_id}.json")  # from here on a session may claim it
        ready_now = self._ready()
        if len(ready_now) == self.size:  # what the idle pool costs, each time it is full again
            log.info("session pool full: %d ready, %.0f MiB PSS", self.size,
                     sum(pss_mib(self.config, pooled) for pooled in ready_now))


_running = None


def start(config):
    """Run this process's pool thread (a tasks worker's, once it is ready), unless sessions start cold here."""
    global _running
    reason = cold_reason(config)
    if reason:
        log.info("kept sessions start cold: %s", reason)
        return None
    _running = SessionPool(config, int(config["SESSION_POOL_SIZE"])).start()
    return _running


def stop():
    """End this process's unclaimed pooled browsers (the worker's shutdown)."""
    if _running is not None:
        _running.stop()
