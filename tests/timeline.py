"""Where a `make test` run's wall time went, from the lines TEST_TIMELINE collected (tests/conftest.py).

    TEST_TIMELINE=/tmp/timeline.jsonl make test
    python -m tests.timeline /tmp/timeline.jsonl
    python -m tests.timeline /tmp/timeline.jsonl --durations > tests/durations.json

Prints, per xdist worker, its files in the order it ran them (a file's span runs from its first test's start to its
last test's end, its module fixtures included) and how long the worker sat idle before the phase ended; then the
files by span. Under `--dist loadfile` the phase ends with its last file: a long file started late is the tail.
`--durations` prints each file's span in the parallel phase as JSON instead: tests/durations.json, by which
tests/conftest.py hands the longest files out first.
"""
import json
import sys
from collections import defaultdict


def spans(lines):
    """{(worker, file): [start, end]} of each file, in the order files started."""
    by_file = {}
    for entry in lines:
        key = (entry["worker"], entry["test"].split("::")[0])
        span = by_file.setdefault(key, [entry["start"], entry["end"]])
        span[0], span[1] = min(span[0], entry["start"]), max(span[1], entry["end"])
    return dict(sorted(by_file.items(), key=lambda item: item[1][0]))


def report(lines, out=sys.stdout):
    files = spans(lines)
    if not files:
        print("no tests in the timeline", file=out)
        return
    phases = defaultdict(list)  # the alone phase runs in the `main` process, after the workers
    for (worker, name), span in files.items():
        phases["alone" if worker == "main" else "parallel"].append((worker, name, span))
    for phase, rows in phases.items():
        begin, end = min(r[2][0] for r in rows), max(r[2][1] for r in rows)
        print(f"{phase} phase: {end - begin:.0f} s wall", file=out)
        per_worker = defaultdict(list)
        for worker, name, span in rows:
            per_worker[worker].append((name, span))
        for worker in sorted(per_worker):
            worker_files = per_worker[worker]
            busy = sum(span[1] - span[0] for _, span in worker_files)
            last = max(span[1] for _, span in worker_files)
            print(f"  {worker}: {len(worker_files)} files, busy {busy:.0f} s, idle at the end {end - last:.0f} s",
                  file=out)
            for name, span in worker_files[-3:]:
                print(f"    ... {name}: {span[0] - begin:.0f}-{span[1] - begin:.0f} s", file=out)
        print("  longest files:", file=out)
        for worker, name, span in sorted(rows, key=lambda r: r[2][0] - r[2][1])[:15]:
            print(f"    {span[1] - span[0]:6.0f} s  {name} ({worker})", file=out)


def durations(lines):
    """{file: seconds} of the parallel phase's files, longest first, whole seconds."""
    files = {name: round(end - start) for (worker, name), (start, end) in spans(lines).items() if worker != "main"}
    return dict(sorted(files.items(), key=lambda item: (-item[1], item[0])))


if __name__ == "__main__":
    with open(sys.argv[1]) as timeline:
        lines = [json.loads(line) for line in timeline if line.strip()]
    if "--durations" in sys.argv[2:]:
        print(json.dumps(durations(lines), indent=0))
    else:
        report(lines)
