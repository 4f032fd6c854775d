"""What a process's start costs in CPU before it does any work: a tasks worker (`import workers.celery`, which builds
its Flask app) and a web process (`create_app()`, as each gunicorn worker does), in this tree and in a baseline
commit checked out beside it, run alternately. The suite starts a worker or a web process some hundred times
(docs/testing.md), `make run` and every deployment's restart once per process.

`python -m bench.process_start [--baseline REF] [--runs N]` prints each one's median CPU seconds and the ratio."""
import argparse
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROBES = {
    "worker (import workers.celery)": "import workers.celery",
    "web (create_app())": "from app import create_app; create_app()",
}


def cpu_seconds(tree, statement):
    """User + system CPU of one fresh interpreter running `statement` in `tree` (its own app and workers)."""
    probe = ("import resource, time\n" + statement + "\n"
             "usage = resource.getrusage(resource.RUSAGE_SELF)\nprint(usage.ru_utime + usage.ru_stime)")
    out = subprocess.run([sys.executable, "-c", probe], cwd=tree, capture_output=True, text=True, check=True)
    return float(out.stdout.split()[-1])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", default="HEAD~1", help="the commit to compare with (default HEAD~1)")
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="rd-bench-start-") as folder:
        baseline = Path(folder) / "baseline"
        subprocess.run(["git", "worktree", "add", "--detach", "-q", str(baseline), args.baseline], cwd=ROOT,
                       check=True)
        try:
            print(f"{'':34} {'baseline':>9} {'this tree':>9} {'ratio':>6}   (median CPU s of {args.runs} starts)")
            for name, statement in PROBES.items():
                before, after = [], []
                for _ in range(args.runs):  # alternately, so a busy moment falls on both
                    before.append(cpu_seconds(baseline, statement))
                    after.append(cpu_seconds(ROOT, statement))
                b, a = statistics.median(before), statistics.median(after)
                print(f"{name:34} {b:9.2f} {a:9.2f} {a / b:6.2f}")
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(baseline)], cwd=ROOT, check=True)


if __name__ == "__main__":
    main()
