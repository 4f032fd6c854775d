"""Our browser processes in /proc: finding, proving they are ours, ending them, reaping orphans."""
import fcntl
import json
import logging
import os
import shutil
import signal
import time

from .box import MARKER

log = logging.getLogger(__name__)
PF_EXITING = 0x4  # /proc/<pid>/stat's flags: the process is exiting
SIGKILL_PENDING = 1 << (signal.SIGKILL - 1)  # its bit in /proc/<pid>/status's SigPnd / ShdPnd masks


def processes():
    """(pid, argv) of every process on this machine that can be read."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        argv = command_line(entry)
        if argv is not None:
            yield int(entry), argv


def command_line(pid):
    """The argv of process `pid`, or None if it cannot be read."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as source:
            argv = source.read().split(b"\0")
    except OSError:
        return None
    return [arg.decode(errors="replace") for arg in argv if arg]


def alive(pid):
    """True while `pid` runs. Dead for our purpose: gone, a zombie, exiting, or with a SIGKILL pending: a killed
    Chromium is still listed, and answers signal 0, while the kernel tears its memory down (milliseconds to tens of
    them), and a pooled browser checked in that time must not pass for alive."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
        if fields[0] in ("Z", "X", "x") or int(fields[6]) & PF_EXITING:
            return False
        with open(f"/proc/{pid}/status") as status:
            return not any(line.startswith(("SigPnd:", "ShdPnd:")) and int(line.split()[1], 16) & SIGKILL_PENDING
                           for line in status)
    except (OSError, IndexError, ValueError):
        return False


def group_alive(pgid):
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as stat:
                    fields = stat.read().rsplit(")", 1)[1].split()
                if int(fields[2]) == pgid and fields[0] != "Z":
                    return True
            except (OSError, IndexError, ValueError):
                continue
    return False


def kill_group(pgid, grace=5):
    """SIGTERM, then SIGKILL, the process group `pgid` (never ours nor init's)."""
    if pgid <= 1 or pgid == os.getpgrp():
        return
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(pgid, sig)
        except (ProcessLookupError, PermissionError):
            return
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline:
            if not group_alive(pgid):
                return
            time.sleep(0.05)


def processes_under(root):
    """{pid: browser directory} of every process whose command line names a directory directly under `root`
    (chromedriver, Chromium, the sandbox and its forwarders all do)."""
    real = os.path.realpath(root)
    prefixes = {real + os.sep, os.path.abspath(root) + os.sep}
    found = {}
    for pid, argv in processes():
        for arg in argv[1:]:
            for prefix in prefixes:
                at = arg.find(prefix)
                if at >= 0:
                    name = arg[at + len(prefix):].split(os.sep)[0].split(",")[0].split(" ")[0]
                    if name:
                        found[pid] = os.path.join(real, name)
                        break
            if pid in found:
                break
    return found


def browser_pid(profile):
    """The browser process of a Chromium profile (the one without --type=: renderers and helpers have one), or None."""
    flag = f"--user-data-dir={profile}"
    found = [pid for pid, argv in processes() if flag in argv and not any(arg.startswith("--type=") for arg in argv)]
    return min(found) if found else None


def host_lock(path):
    """The open file whose flock this process now holds (one filler of a pool per host), or None if another has it.
    The kernel drops it when the holder dies, so the next one takes over."""
    handle = open(path, "a")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        handle.close()
        return None
    return handle


def pss_mib(pids):
    """Memory of these processes together: their PSS (shared pages split between their sharers), in MiB."""
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/smaps_rollup") as rollup:
                total += next((int(line.split()[1]) for line in rollup if line.startswith("Pss:")), 0)
        except OSError:
            continue
    return total / 1024


def owner_of(directory):
    """The owner pid in the directory's marker; False when there is no marker (not provably ours)."""
    try:
        with open(os.path.join(directory, MARKER)) as source:
            return json.load(source).get("owner_pid")
    except (OSError, ValueError, AttributeError):
        return False


def end_processes(pids, directory=None):
    """End these processes and their groups; then any process still naming `directory`."""
    groups = set()
    for pid in pids:
        try:
            groups.add(os.getpgid(pid))
        except ProcessLookupError:
            continue
    for group in groups:
        kill_group(group, grace=2)
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def reap(root):
    """Kill the browsers under `root` whose owner process is dead (a SIGKILLed or OOM-killed worker) and remove
    their directories. Only directories with our marker and an owner pid qualify. Returns how many were reaped."""
    found = processes_under(root)
    by_dir = {}
    for pid, directory in found.items():
        by_dir.setdefault(directory, []).append(pid)
    reaped = 0
    for directory, pids in by_dir.items():
        owner = owner_of(directory)
        if not owner or alive(owner):
            continue
        end_processes(pids)
        reaped += 1
        log.warning("reaped the browser of dead process %s (%s)", owner, os.path.basename(directory))
    if os.path.isdir(root):
        live = set(processes_under(root).values())
        for name in os.listdir(root):
            directory = os.path.join(os.path.realpath(root), name)
            owner = owner_of(directory)
            if owner and directory not in live and not alive(owner):
                shutil.rmtree(directory, ignore_errors=True)
    return reaped
