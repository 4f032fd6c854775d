"""Reaping the browsers of a worker that died without closing them (SIGKILL, OOM kill).

Only processes that are provably ours are touched: a command line naming a profile directory under
this deployment's `VAR_DIR/browsers/` (Chromium's `--user-data-dir`, chromedriver's `--log-path`)
that holds our marker file, whose recorded worker process is gone. Their whole process group
(chromedriver's session, which its Chromium processes share) is killed and the profile removed."""
import json
import logging
import os
import shutil
import signal

from .selenium_driver import MARKER, browsers_dir

log = logging.getLogger(__name__)
_FLAGS = ("--user-data-dir=", "--log-path=")


def _processes():
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as source:
                argv = source.read().split(b"\0")
            yield int(entry), [arg.decode(errors="replace") for arg in argv if arg]
        except OSError:
            continue


def our_browser_processes(var_dir):
    """{pid: profile directory} of every chromium/chromedriver process started under this VAR_DIR."""
    root = os.path.realpath(browsers_dir(var_dir)) + os.sep
    found = {}
    for pid, argv in _processes():
        for arg in argv[1:]:
            for flag in _FLAGS:
                if arg.startswith(flag):
                    path = os.path.realpath(arg[len(flag):])
                    if path.startswith(root):
                        found[pid] = os.path.join(root, os.path.relpath(path, root).split(os.sep)[0])
    return found


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie worker is dead too.
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def reap(var_dir):
    """Kill the orphaned browsers of dead workers; remove their profiles. Returns how many sessions were reaped."""
    orphans = {}
    for pid, profile in our_browser_processes(var_dir).items():
        try:
            with open(os.path.join(profile, MARKER)) as source:
                owner = json.load(source)["worker_pid"]
        except (OSError, ValueError, KeyError):
            continue  # no marker: not provably ours
        if _alive(owner):
            continue
        try:
            orphans.setdefault(profile, set()).add(os.getpgid(pid))
        except ProcessLookupError:
            continue
    for profile, groups in orphans.items():
        for group in groups:
            if group <= 1 or group == os.getpgrp():
                continue
            try:
                os.killpg(group, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        log.warning("reaped the browser of a dead worker (profile %s)", os.path.basename(profile))
    # Profiles whose processes are all gone and whose worker is dead: left by a crash.
    root = browsers_dir(var_dir)
    if os.path.isdir(root):
        live = set(our_browser_processes(var_dir).values())
        for name in os.listdir(root):
            profile = os.path.join(root, name)
            try:
                with open(os.path.join(profile, MARKER)) as source:
                    owner = json.load(source)["worker_pid"]
            except (OSError, ValueError, KeyError):
                continue
            if profile not in live and not _alive(owner):
                shutil.rmtree(profile, ignore_errors=True)
    return len(orphans)
