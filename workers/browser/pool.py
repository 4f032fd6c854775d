"""The warm pool: sandboxed browsers started ahead of need by the worker's main process, each handed out once."""
import json
import logging
import os
import secrets
import shutil
import signal
import subprocess
from dataclasses import asdict, dataclass
from pathlib import Path

from selenium import webdriver
from selenium.common.exceptions import WebDriverException

from app.background import Background
from app.egress.proxy import EgressProxy, proxies_under
from app.live import state as live_state
from app.sandbox import box as sandbox, processes as sandbox_processes, settings as browser_settings
from app.sandbox.box import BrowserBox, HostUnavailable

from . import rrweb
from .base import BrowserUnavailable
from .egress import HARDENING_ARGUMENTS
from .kept_session import attach
from .page_script import PageScript
from .unix_connection import remote_connection
from .launch import browsers_dir, chrome_options, missing_browser, quiet_runtime, reason_of
from .selenium_driver import SeleniumBrowser
from .world import World

log = logging.getLogger(__name__)

READY, CLAIMED = "ready.json", "claimed.json"  # a box's state: the child that renames READY away owns it
DEFAULT_ZONE = "America/Los_Angeles"  # a task's time zone when it names none (workers/agent/browser_modes.py)
CHECK_SECONDS = 0.5  # how often the manager looks at its boxes when the pool is full


def pool_root(var_dir):
    """Where pooled browsers live: under browsers/ (so the reaper's rules cover them), in a folder of their own."""
    return Path(browsers_dir(var_dir)) / "pool"


def window_size(config):
    width, _, height = str(config["BROWSER_WINDOW_SIZE"]).partition("x")
    return int(width), int(height or 900)


def ready_boxes(var_dir):
    """{folder name: PooledBox} of the ready (idle, never used) pooled browsers of this VAR_DIR, read from disk."""
    root = pool_root(var_dir)
    found = {}
    for name in os.listdir(root) if root.is_dir() else ():
        try:
            found[name] = PooledBox(**json.loads((root / name / READY).read_text()))
        except (OSError, ValueError, TypeError):
            continue
    return found


def cold_reason(config):
    """Why this deployment's browsers start cold (None: they can come from the pool)."""
    if int(config.get("BROWSER_POOL_SIZE") or 0) <= 0:
        return "BROWSER_POOL_SIZE is 0"
    if config.get("SELENIUM_REMOTE_URL"):
        return "a Selenium Grid starts its own browsers"
    return missing_browser(config["CHROMIUM_PATH"], config["CHROMEDRIVER_PATH"])


@dataclass
class PooledBox:
    """What a worker's child needs to take over a ready box (the content of its READY file)."""
    directory: str
    driver_url: str
    session_id: str
    group: int
    chromium_pid: int
    egress_dir: str
    egress_address: str
    time_zone: str
    window_handle: str = ""  # its one tab's: the takeover needs no WebDriver call to learn it
    recorder: dict = None  # {name, token, identifier} of the recorder its tab's documents get (None: not recorded)
    handles: list = None  # a browser kept at a pause (workers/browser/parking.py): its tabs, in the order they opened

    @property
    def downloads(self):
        return str(Path(self.directory) / "downloads")

    @property
    def uploads(self):
        return str(Path(self.directory) / "uploads")

    def alive(self):
        """Its sandbox (which ends when its chromedriver does) and its Chromium still run: two signals 0, and the
        takeover's only check (it makes no WebDriver call: its tab's handle was read by the pool)."""
        return sandbox_processes.alive(self.group) and sandbox_processes.alive(self.chromium_pid)


def pss_mib(pooled):
    """Memory of one pooled box: the PSS (shared pages split between their sharers) of its sandbox's processes
    (forwarders, chromedriver, Chromium) and of its egress proxy."""
    root = str(Path(pooled.directory).parent)
    pids = [pid for pid, folder in sandbox_processes.processes_under(root).items() if folder == pooled.directory]
    return sandbox_processes.pss_mib(pids + proxies_under(pooled.egress_dir))


def destroy(pooled):
    """End a pooled box whatever its state: its sandbox's group, its egress proxy, its folder. Their processes are
    the pool's children: it reaps them (a wait here would wait for zombies of another process)."""
    sandbox_processes.kill_group(pooled.group, grace=1)
    for pid in proxies_under(pooled.egress_dir):
        try:
            os.killpg(os.getpgid(pid), signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    shutil.rmtree(pooled.directory, ignore_errors=True)


def claim(config):
    """A ready, never used, live box of this host's pool, now owned by this process; None when there is none
    (the caller starts a browser cold). A dead box found here is destroyed, never handed out."""
    root = pool_root(config["VAR_DIR"])
    try:
        names = sorted(os.listdir(root))
    except OSError:
        return None
    for name in names:
        directory = root / name
        try:
            os.rename(directory / READY, directory / CLAIMED)  # atomic: one claimer wins
        except OSError:
            continue
        try:
            pooled = PooledBox(**json.loads((directory / CLAIMED).read_text()))
        except (OSError, ValueError, TypeError):
            shutil.rmtree(directory, ignore_errors=True)
            continue
        # The reaper's rule follows the box: it dies with this process from now on, not with the pool's.
        sandbox.write_marker(directory, os.getpid())
        if pooled.alive():
            return pooled
        log.warning("pooled browser %s was dead at its claim: destroyed, not handed out", name)
        destroy(pooled)
    return None


class BrowserPool(Background):
    """Keeps `size` ready boxes in `pool_root`, one started at a time, from one thread of the worker's main
    process. That thread must outlive its boxes: bubblewrap's --die-with-parent and the egress proxy's
    pdeathsig end them with it, so a SIGKILLed worker leaves none running."""

    name = "browser-pool"
    join_seconds = 60

    def __init__(self, config, size):
        super().__init__()
        self.config, self.size = config, size
        self.root = pool_root(config["VAR_DIR"])
        self.boxes = {}  # directory -> (PooledBox, Popen of its sandbox, its EgressProxy)
        self._lock_file = None

    def start(self):
        os.register_at_fork(after_in_child=self._forget_in_child)
        return super().start()

    def _forget_in_child(self):
        """A pool process forked later (a replaced one) shares no part of the host lock: an orphan would hold it."""
        if self._lock_file is not None:
            self._lock_file.close()
            self._lock_file = None
        self.boxes = {}

    def ready(self):
        return [pooled for pooled, _, _ in self.boxes.values() if (Path(pooled.directory) / READY).exists()]

    def _run(self):
        self.root.mkdir(parents=True, exist_ok=True)
        try:
            while not self.stopping.is_set():
                if not self._host_lock():  # another worker on this host keeps the pool; take over if it goes
                    self.stopping.wait(5)
                    continue
                self._tidy()
                if len(self.ready()) < self.size:
                    self._start_one()
                else:
                    self.stopping.wait(CHECK_SECONDS)
        except HostUnavailable as exc:
            log.warning("the browser pool cannot start browsers here (%s): they start cold", exc)
        except Exception:
            log.exception("the browser pool stopped: browsers start cold from now on")
        for directory in list(self.boxes):
            self._drop(directory, unclaimed_only=True)
        # The boxes handed out end with this thread (their parent-death signal): it lasts until the worker stops.
        while self.boxes and not self.stopping.wait(CHECK_SECONDS):
            self._tidy()

    def _host_lock(self):
        """One pool per host (per VAR_DIR), whatever the number of workers on it: an flock its owner holds."""
        if self._lock_file is None:
            self._lock_file = sandbox_processes.host_lock(self.root / "manager.lock")
        return self._lock_file is not None

    def _tidy(self):
        """Forget boxes that ended; destroy ready ones that died and claimed ones whose claimer died."""
        for directory, (pooled, proc, _) in list(self.boxes.items()):
            path = Path(directory)
            if (path / READY).exists():
                if proc.poll() is not None or not sandbox_processes.alive(pooled.chromium_pid):
                    log.warning("pooled browser %s died while ready: replaced", path.name)
                    self._drop(directory)
                continue
            owner = sandbox_processes.owner_of(directory)
            if proc.poll() is not None or not path.exists() or not owner or not sandbox_processes.alive(owner):
                self._drop(directory)  # closed by its task, or its task's process died without closing it

    def _drop(self, directory, unclaimed_only=False):
        pooled, proc, egress = self.boxes[directory]
        if unclaimed_only and not (Path(directory) / READY).exists():
            return
        if proc.poll() is None and unclaimed_only:
            try:
                os.rename(Path(directory) / READY, Path(directory) / CLAIMED)  # no child takes it while it ends
            except OSError:
                return
        destroy(pooled)
        egress.stop()  # ours to reap, as is the sandbox: no zombie
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            pass
        del self.boxes[directory]

    def _start_one(self):
        config = self.config
        directory = self.root / secrets.token_hex(6)
        egress = EgressProxy(config, "pool").start()
        proc = None
        try:
            box = BrowserBox(directory, owner_pid=os.getpid(), proxy=egress.address, time_zone=DEFAULT_ZONE,
                             devtools=True, binaries=(config["CHROMIUM_PATH"], config["CHROMEDRIVER_PATH"]),
                             drivers_dir=self.root.parent).prepare()  # the pool's folder holds its boxes only
            proc = subprocess.Popen(box.command([config["CHROMEDRIVER_PATH"], f"--port={sandbox.INNER_DRIVER_PORT}",
                                                 f"--log-path={box.run / 'chromedriver.log'}", "--log-level=OFF"]),
                                    stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                    start_new_session=True)
            problem = sandbox.wait_for_driver(box.driver_url, proc)
            if problem:
                raise RuntimeError(problem)
            session_id, handle, recorder = _new_session(config, box, egress.address)
            egress.wait_ready()
            pooled = PooledBox(directory=str(directory), driver_url=box.driver_url, session_id=session_id,
                               group=proc.pid, chromium_pid=_chromium_pid(box.profile), egress_dir=str(egress.directory),
                               egress_address=egress.address, time_zone=DEFAULT_ZONE, window_handle=handle,
                               recorder=recorder)
        except Exception as exc:
            if proc is not None:
                sandbox_processes.kill_group(proc.pid, grace=1)
                proc.wait(5)
            egress.stop()
            shutil.rmtree(directory, ignore_errors=True)
            if isinstance(exc, HostUnavailable):
                raise  # no box can start here: the pool ends (_run says so)
            log.warning("the browser pool could not start a browser (%s); retrying", exc)
            self.stopping.wait(5)
            return
        self.boxes[str(directory)] = (pooled, proc, egress)
        part = directory / f"{READY}.part"
        part.write_text(json.dumps(asdict(pooled)))
        part.replace(directory / READY)  # from here on a child may claim it
        ready = self.ready()
        if len(ready) == self.size:  # what the idle pool costs, each time it is full again
            log.info("browser pool full: %d ready, %.0f MiB PSS", len(ready), sum(pss_mib(box) for box in ready))


def _new_session(config, box, proxy):
    """The WebDriver session a task will drive: Chromium started on chromedriver's blank page, no page loaded, page.js
    and its tab's recorder added for its documents: (session id, window handle, recorder). Downloads go to the box's own folder (its policy says
    so too); a task's files are moved out at its end."""
    options = chrome_options(window_size(config), config["BROWSER_LOCALE"], proxy,
                             str(box.downloads), HARDENING_ARGUMENTS, config["CHROMIUM_PATH"])
    options.binary_location = config["CHROMIUM_PATH"]
    options.add_argument(f"--user-data-dir={box.profile}")
    options.add_argument(f"--remote-debugging-port={sandbox.INNER_DEVTOOLS_PORT}")  # its socket: the live view's way in
    # A task's, set now: the takeover then costs one WebDriver call (SeleniumBrowser sets the same two).
    options.timeouts = {"pageLoad": int(config["BROWSER_PAGE_LOAD_TIMEOUT_SECONDS"] * 1000), "script": 30000}
    driver = webdriver.Remote(command_executor=remote_connection(box.driver_url), options=options)
    try:
        PageScript(driver).install()  # the task's first page has page.js from its start
        # What a task's driver does in each tab it meets (SeleniumBrowser._emulate), done now, off the claim's path.
        quiet_runtime(driver)
        identity = sandbox.identity_override(config["CHROMIUM_PATH"])
        if identity:
            driver.execute("executeCdpCommand", {"cmd": "Emulation.setUserAgentOverride", "params": identity})
        return driver.session_id, driver.current_window_handle, _add_recorder(config, driver)
    finally:
        driver.command_executor.close()


def _add_recorder(config, driver):
    """The task's recorder (workers/browser/rrweb.py), added to the tab's next documents (in the isolated world of
    workers/browser/world.py) now rather than at the task's first action: a CDP call carrying rrweb's 77 KB source,
    off the task's path. Its name and token are drawn here and never reach a page. No deadline: the browser ends with
    its one task. None when recordings are off here: no recorder in its pages, as in a cold browser's."""
    if rrweb.available(config):
        return None
    name, token = rrweb.new_names()
    source = rrweb.recorder_source(config["RRWEB_DIR"], name, token, until=0, budget=rrweb.max_bytes(config))
    return {"name": name, "token": token, "identifier": World(driver).add(source)}


def _chromium_pid(profile):
    pid = sandbox_processes.browser_pid(profile)
    if pid is None:
        raise RuntimeError("Chromium did not start")
    return pid


class PooledBrowser(SeleniumBrowser):
    """SeleniumBrowser over a claimed pooled box: the task's time zone per tab when it is not the pool's, and the
    browserSettings CDP sets per tab; its tab's
    recorder, added by the pool, for the task's Recording to adopt (`ready_recorder`); at close the browser, its
    sandbox, its egress proxy and its folder end, and its downloads move to `download_dir`."""

    def __init__(self, pooled, *, label="", time_zone=None, download_dir=None, should_stop=lambda: False,
                 chromium_path=SeleniumBrowser.chromium_path, page_load_timeout=30.0, settings=None):
        self.pooled, self.label, self.remote_url = pooled, label, None
        self.page_load_timeout = page_load_timeout
        self.chromium_path = chromium_path
        # The caller's browserSettings: here only those set per tab (settings.needs_fresh_browser), on a browser
        # started with the default identity's flags; a parked browser's were its start's.
        self.chosen = browser_settings.identity(settings, sandbox.chromium_version(chromium_path),
                                                time_zone=time_zone) if settings else None
        self.time_zone, self.should_stop, self.download_dir = time_zone, should_stop, download_dir
        self.profile = self.box = self.service = None  # its folder is removed in close, after its downloads moved
        self.uploads = pooled.uploads
        self.group = pooled.group
        self.devtools, self.live_endpoint = True, live_state.box_endpoint(pooled.directory)
        self.zone_per_tab = bool(time_zone) and time_zone != pooled.time_zone
        self._closed = False
        self._history_tabs = {}
        self._frames = {}  # element number -> the frames of another origin it is in (SeleniumBrowser.read)
        self.ready_recorder = dict(pooled.recorder, handle=pooled.window_handle) if pooled.recorder else None
        self.driver = None
        try:
            self.driver = attach(pooled.driver_url, pooled.session_id)  # its timeouts were set at its start
            # The pool read the tab's handle (a ready.json of an older pool has none: asked here, as before).
            self._known_handles = (list(pooled.handles) if pooled.handles else [pooled.window_handle]
                                   if pooled.window_handle else list(self.driver.window_handles))
            self.driver.quiet = True  # its pool turned chromedriver's Runtime off in this tab (_new_session)
            self._emulate(pooled.window_handle or self._known_handles[-1], prepared=True)
        except (WebDriverException, OSError) as exc:
            log.warning("pooled browser %s did not answer at its takeover: destroyed, not used",
                        os.path.basename(pooled.directory))
            self.close()
            raise BrowserUnavailable(f"The pooled browser could not be taken over: {reason_of(exc)}") from None
        except BaseException:
            self.close()
            raise
        log.info("browser session %s taken from the pool (%s)", label, os.path.basename(pooled.directory))

    def close(self):
        if self._closed:
            return
        super().close()
        if self.download_dir and any(not name.startswith(".") for name in _listdir(self.pooled.downloads)):
            sandbox.collect_downloads(self.pooled.downloads, self.download_dir)
        destroy(self.pooled)


def _listdir(path):
    try:
        return os.listdir(path)
    except OSError:
        return []
