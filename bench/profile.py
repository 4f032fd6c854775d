"""Profiles of the hot paths under benchmark load (py-spy): submit and poll (web workers), the pipeline."""
import os
import re
import shutil
import sys
from collections import Counter
from pathlib import Path

from bench import common, pipeline, poll
from bench.common import Proc

SECONDS = common.scaled(15, 6)
TOP = 15
GIL = ["--gil"] if os.environ.get("BENCH_PROFILE_GIL") else []  # only samples holding the GIL: CPU, not waits
# Leaf frames of threads waiting for work, which py-spy's idle detection does not catch here.
WAITING = ("_worker (concurrent/futures/thread.py)", "EpollSelector.select (selectors.py)",
           "_epoll.poll (kombu/utils/eventio.py)", "Connection._recv (billiard/connection.py)")
FRAME = re.compile(r"^(?P<func>.*) \((?P<file>[^()]*?)(?::\d+)?\)$")


def py_spy():
    found = Path(sys.executable).with_name("py-spy")
    return str(found) if found.exists() else shutil.which("py-spy")


def record(name, pid, load):
    """py-spy (raw, folded stacks) on pid and its children while load() runs; returns the output path."""
    out = common.LOG_DIR / f"profile-{name}.txt"
    spy = Proc(f"py-spy-{name}", [py_spy(), "record", "--pid", str(pid), "--subprocesses", "--rate", "100",
                                  *GIL, "--duration", str(SECONDS), "--format", "raw", "--output", str(out)])
    try:
        load()
        spy.proc.wait(SECONDS + 30)
    finally:
        spy.stop()
    return out


def frame_name(frame):
    match = FRAME.match(frame)
    if not match:
        return frame
    path = match["file"]
    for marker in ("site-packages/", "lib/python3.11/", str(common.ROOT) + "/"):
        path = path.split(marker)[-1]
    return f"{match['func']} ({path})"


def package(frame):
    """The top-level package (or stdlib module) a frame's file belongs to."""
    path = frame.rpartition(" (")[2].rstrip(")")
    return path.split("/")[0].removesuffix(".py") if path else "?"


def summarize(path):
    """Top frames by own time and by inclusive time (our code: app/, workers/), as text lines."""
    own, inclusive, packages, total, waiting = Counter(), Counter(), Counter(), 0, 0
    for line in Path(path).read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack:
            continue
        frames = [frame_name(f) for f in stack.split(";") if not f.startswith(("process ", "thread "))]
        count = int(count)
        if frames and frames[-1] in WAITING:
            waiting += count
            continue
        total += count
        if frames:
            own[frames[-1]] += count
            packages[package(frames[-1])] += count
        for frame in set(frames):
            if "(app/" in frame or "(workers/" in frame:
                inclusive[frame] += count
    share = lambda n: f"{100 * n / max(total, 1):5.1f}%"  # noqa: E731
    lines = [f"{total} samples ({waiting} more of threads waiting for work left out)", "  own time:"]
    lines += [f"    {share(n)}  {frame}" for frame, n in own.most_common(TOP)]
    lines += ["  own time by package:", "    " + ", ".join(
        f"{name} {share(n).strip()}" for name, n in packages.most_common(10))]
    lines += ["  inclusive, our code:"]
    lines += [f"    {share(n)}  {frame}" for frame, n in inclusive.most_common(TOP)]
    return lines


def main():
    with common.Stack() as stack:
        web = stack.web
        submit_url = f"{web.url}/fast/v2/remote-dispatch"
        submit = lambda: common.wrk(submit_url, SECONDS, 16, method="POST",  # noqa: E731
                                    body=common.SUBMIT_BODY, api_key=stack.api_key)
        profiles = {"submit": record("submit", web.pid, submit)}
        stack.purge("tasks")

        key_id, other_id = poll.bench_keys(stack)
        poll.fill(stack, 1, poll.SMALL, key_id, other_id)
        profiles["poll"] = record("poll", web.pid, lambda: poll.poll_load(stack, key_id))

        stack.tasks_worker
        profiles["pipeline"] = record("pipeline", stack.tasks_worker.pid,
                                      lambda: pipeline.run_product(stack, pipeline.N))
    for name, path in profiles.items():
        print(f"\n== {name}: {path.relative_to(common.ROOT)}")
        print("\n".join(summarize(path)))


if __name__ == "__main__":
    main()
