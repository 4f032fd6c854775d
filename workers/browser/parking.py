"""Browsers kept at an input-required pause: parked on their machine outside any task, taken back by the answer."""
import contextlib
import fcntl
import json
import logging
import os
import time
from dataclasses import asdict, replace
from pathlib import Path

from app.background import Background
from app.egress.proxy import proxies_under
from app.sandbox import box as sandbox, processes as sandbox_processes

from .pool import PooledBox, destroy

log = logging.getLogger(__name__)
RECORD, TAKEN = ".json", ".taken"  # a parked browser's record: the process that renames it away owns the browser
ENDED = ("success", "error")


def parked_root(var_dir):
    """Where this machine's parked browsers are recorded (VAR_DIR is private to its machine)."""
    return Path(var_dir) / "parked-browsers"


def record_of(browser, egress):
    """What another process of this machine needs to take the browser over (a PooledBox, as the warm pool hands out),
    or None: a Grid's browser, or one without its egress proxy, is not kept."""
    driver = getattr(browser, "driver", None)
    if driver is None or egress is None or getattr(browser, "remote_url", None):
        return None
    handles = [h for h in browser._known_handles if h in driver.window_handles]
    current = driver.current_window_handle
    pooled = getattr(browser, "pooled", None)
    if pooled is not None:  # from the warm pool, or kept at an earlier pause
        return replace(pooled, window_handle=current, handles=handles, recorder=None)
    if browser.box is None or browser.service is None or browser.service.process is None:
        return None
    chromium = sandbox_processes.browser_pid(str(browser.box.profile))
    if chromium is None:
        return None
    return PooledBox(directory=str(browser.box.directory), driver_url=browser.box.driver_url,
                     session_id=driver.session_id, group=browser.service.process.pid, chromium_pid=chromium,
                     egress_dir=str(egress.directory), egress_address=egress.address,
                     time_zone=browser.time_zone or "", window_handle=current, handles=handles)


@contextlib.contextmanager
def admission(config, api_key_id):
    """While held, no other process of this machine parks a browser. Yields None when the key and the machine have
    room for one more parked browser, else why not (PARKED_BROWSERS_PER_KEY, PARKED_BROWSERS_MAX): a browser costs
    its memory for as long as it is kept, and one key's unanswered questions must not hold the machine's."""
    root = parked_root(config["VAR_DIR"])
    root.mkdir(mode=0o700, parents=True, exist_ok=True)
    with open(root / ".lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        keys = [record.get("api_key_id") for record in _records(root).values()]
        per_key, most = int(config["PARKED_BROWSERS_PER_KEY"]), int(config["PARKED_BROWSERS_MAX"])
        if keys.count(api_key_id) >= per_key:
            yield f"this API key already has {per_key} browser(s) kept at questions (PARKED_BROWSERS_PER_KEY)"
        elif len(keys) >= most:
            yield f"this machine already keeps {most} browser(s) at questions (PARKED_BROWSERS_MAX)"
        else:
            yield None


def park(config, task_id, pooled, seconds, api_key_id=None):
    """Record the browser as parked for `seconds` (in `admission`): the answer's run on this machine takes it
    (`take`), the machine's sweep (`ParkedBrowsers`) lets it go when the time is up or the task ended."""
    root = parked_root(config["VAR_DIR"])
    root.mkdir(mode=0o700, parents=True, exist_ok=True)
    part = root / f"{task_id}.part"
    part.write_text(json.dumps({"task_id": task_id, "api_key_id": api_key_id, "until": time.time() + seconds,
                                "box": asdict(pooled)}))
    part.replace(root / f"{task_id}{RECORD}")


def _records(root):
    """The parked browsers' records, by path (half a record cannot be: part files are renamed whole)."""
    records = {}
    for path in root.glob(f"*{RECORD}") if root.is_dir() else ():
        try:
            records[path] = json.loads(path.read_text())
        except (OSError, ValueError):  # taken meanwhile
            continue
    return records


def alive(pooled):
    return pooled.alive() and bool(proxies_under(pooled.egress_dir))


def take(config, task_id):
    """The browser parked for this task on this machine, now owned by this process; None when there is none or it
    died (then it is destroyed, and the run restores the pause's snapshot in a fresh browser)."""
    pooled = _claim(parked_root(config["VAR_DIR"]) / f"{task_id}{RECORD}")
    if pooled is None:
        return None
    if not alive(pooled):
        log.info("the browser kept for task %s had ended", task_id)
        destroy(pooled)
        return None
    sandbox.write_marker(pooled.directory, os.getpid())  # the reaper's rule follows it: it ends with this process
    return pooled


def _claim(path):
    taken = path.with_name(f"{path.stem}.{os.getpid()}{TAKEN}")
    try:
        os.rename(path, taken)  # atomic: one taker (a run, or the sweep) wins
    except OSError:
        return None
    try:
        return PooledBox(**json.loads(taken.read_text())["box"])
    except (OSError, ValueError, TypeError, KeyError):
        return None
    finally:
        taken.unlink(missing_ok=True)


def let_go(config, ended_tasks=lambda ids: set()):
    """End the parked browsers whose time is up, that died, or whose task ended (`ended_tasks(ids)` says which of
    these task ids did). Returns the task ids whose browser was let go."""
    records = {}
    for path, record in _records(parked_root(config["VAR_DIR"])).items():
        try:
            records[path] = (record["task_id"], float(record["until"]), PooledBox(**record["box"]))
        except (ValueError, TypeError, KeyError):
            continue
    now = time.time()
    waiting = [task_id for task_id, until, _ in records.values() if until > now]
    ended = ended_tasks(waiting) if waiting else set()
    gone = []
    for path, (task_id, until, pooled) in records.items():
        if until > now and task_id not in ended and alive(pooled):
            continue
        if _claim(path) is not None:
            destroy(pooled)
            gone.append(task_id)
    return gone


class ParkedBrowsers(Background):
    """The sweep of this machine's parked browsers, from a thread of the tasks worker's main process (as the warm
    pool): it runs on the machine that holds them, whatever the pool processes are busy with."""

    name = "parked-browsers"

    def __init__(self, config):
        super().__init__()
        self.config = config
        self.interval = min(float(config.get("SWEEP_INTERVAL_SECONDS") or 10), 5.0)
        self._engine = None

    def _run(self):
        while not self.stopping.wait(self.interval):
            try:
                gone = let_go(self.config, self._ended)
                if gone:
                    self._forget(gone)
                    log.info("let go of %d kept browser(s) of paused tasks", len(gone))
            except Exception:
                log.exception("the sweep of kept browsers failed; trying again")

    def engine(self):
        """Its own engine, without a pool: this process forks the worker's pool processes, which must inherit no
        open connection."""
        if self._engine is None:
            from sqlalchemy import create_engine
            from sqlalchemy.pool import NullPool

            self._engine = create_engine(self.config["SQLALCHEMY_DATABASE_URI"], poolclass=NullPool)
        return self._engine

    def _ended(self, ids):
        from sqlalchemy import select

        from app.models import Task

        with self.engine().connect() as conn:
            found = dict(conn.execute(select(Task.id, Task.status).where(Task.id.in_(ids))).all())
        return {task_id for task_id in ids if found.get(task_id, "error") in ENDED}

    def _forget(self, ids):
        """The answer to these tasks may go to any worker now: none holds their browser."""
        from sqlalchemy import update

        from app.models import Task

        with self.engine().begin() as conn:
            conn.execute(update(Task).where(Task.id.in_(ids), Task.status == "input-required")
                         .values(browser_node=None))
