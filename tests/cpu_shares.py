"""Where a run's CPU went, by kind of process: run it beside `make test` (or anything) and stop it with SIGTERM.

    python -m tests.cpu_shares /tmp/cpu.json &  make test;  kill %1
    python -m tests.cpu_shares --report /tmp/cpu.json

Once a second it reads every process's CPU time from /proc (user + system, by pid and start time, so a reused pid is
another process); on SIGTERM it writes them to the file. `--report` sums them by kind (a Celery worker, gunicorn,
Chromium, ...): how many processes of each kind and their CPU seconds, and how a kind's processes spread (a
worker's start alone costs it seconds). A process shorter than a second may be missed: the figures are a floor.
"""
import json
import os
import signal
import statistics
import sys
import time

KINDS = ("celery -A workers worker", "celery -A workers beat", "gunicorn", "chromedriver", "chromium", "config.local_chat",
         "/bin/st ", "proxy", "pytest", "-c import sys;exec(eval(sys.stdin.readline()))", "postgres", "beam.smp",
         "java", "node", "bwrap")
TICKS = os.sysconf("SC_CLK_TCK")


def kind(command):
    return next((k for k in KINDS if k in command), "other")


def sample(out):
    seen = {}  # (pid, start) -> [command, CPU seconds when first seen, CPU seconds now]
    first = True  # what the processes already running had spent before does not count

    def write(*_):
        with open(out, "w") as file:
            json.dump([[command, now - before] for command, before, now in seen.values()], file)
        sys.exit(0)

    signal.signal(signal.SIGTERM, write)
    while True:
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                with open(f"/proc/{pid}/stat") as file:
                    fields = file.read().rsplit(")", 1)[1].split()
                key = (pid, fields[19])  # its start time
                cpu = (int(fields[11]) + int(fields[12])) / TICKS
                if key not in seen:
                    with open(f"/proc/{pid}/cmdline", "rb") as file:
                        command = file.read().replace(b"\0", b" ").decode(errors="replace")
                    seen[key] = [command, cpu if first else 0.0, cpu]
                seen[key][2] = cpu
            except (OSError, IndexError, ValueError):
                pass  # it ended meanwhile
        first = False
        time.sleep(1)


def report(path):
    by_kind = {}
    for command, cpu in json.load(open(path)):
        by_kind.setdefault(kind(command), []).append(cpu)
    total = sum(sum(cpus) for cpus in by_kind.values())
    print(f"{total:,.0f} CPU seconds in all")
    print(f"{'kind':50} {'processes':>9} {'CPU s':>7} {'share':>6} {'median of those over 1 s':>25}")
    for name, cpus in sorted(by_kind.items(), key=lambda item: -sum(item[1])):
        busy = [c for c in cpus if c > 1]
        median = f"{statistics.median(busy):.1f}" if busy else "-"
        print(f"{name[:50]:50} {len(cpus):9} {sum(cpus):7.0f} {sum(cpus) / total:6.1%} {median:>25}")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--report"]:
        report(sys.argv[2])
    else:
        sample(sys.argv[1])
