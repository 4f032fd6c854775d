"""Reaping the browsers of a worker that died without closing them (SIGKILL, OOM kill): app/browser_host.reap
over this deployment's `VAR_DIR/browsers/`, run by beat's sweep and when a worker (or pool process) starts."""
from app import browser_host

from .selenium_driver import browsers_dir


def our_browser_processes(var_dir):
    """{pid: browser directory} of every process of a task's browser under this VAR_DIR (the sandbox, its
    forwarders, chromedriver, Chromium)."""
    return browser_host.processes_under(browsers_dir(var_dir))


def reap(var_dir):
    """Kill the orphaned browsers of dead workers; remove their directories. Returns how many were reaped."""
    return browser_host.reap(browsers_dir(var_dir))
