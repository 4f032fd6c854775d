"""Reaping the browsers of a worker that died without closing them (SIGKILL, OOM kill): app/sandbox/processes.reap
over this deployment's `VAR_DIR/browsers/` (and its warm pool's folder, and the kept sessions' pooled browsers), run by beat's sweep and when a worker (or
pool process) starts."""
from app.sandbox import processes as sandbox_processes
from app.sessions.browsers import sessions_root

from .pool import pool_root
from .launch import browsers_dir


def our_browser_processes(var_dir):
    """{pid: browser directory} of every process of a task's browser under this VAR_DIR (the sandbox, its
    forwarders, chromedriver, Chromium), pooled ones included (their directory is then the pool's folder)."""
    return sandbox_processes.processes_under(browsers_dir(var_dir))


def reap(var_dir):
    """Kill the orphaned browsers of dead workers; remove their directories. Returns how many were reaped."""
    # Kept sessions' folders too: only a pooled one not yet adopted names a process (the web's that started it).
    return (sandbox_processes.reap(browsers_dir(var_dir)) + sandbox_processes.reap(pool_root(var_dir))
            + sandbox_processes.reap(sessions_root({"VAR_DIR": var_dir})))
