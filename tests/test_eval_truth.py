"""`make eval`'s truthfulness figures: the confusion table of page verdict × task status, from a fixed results file."""
import json
import os
import subprocess
import sys

from bench import truth
from tests.processes import ROOT


def episode(task, seed, raw, status):
    return {"task": task, "seed": seed, "planner": "model", "reward": raw, "raw_reward": raw, "success": raw > 0,
            "status": status, "steps": 2, "seconds": 4.0 + seed, "model_calls": 3, "model_tokens": 3000,
            "error": None if status == "success" else "No progress", "left_host": False, "reason": "done"}


# Two tasks: a true success, a false success, two missed successes (one error, one cancelled at the bound:
# "other"), a true failure that ended error and one still running when the bound came.
EPISODES = [episode("click-test", 0, 1, "success"), episode("click-test", 1, 1, "error"),
            episode("click-test", 2, 1, "input-required"), episode("click-link", 0, -1, "success"),
            episode("click-link", 1, -1, "error"), episode("click-link", 2, -1, "pending")]


def test_the_confusion_table_and_its_headline_figures_from_a_results_file(tmp_path):
    path = tmp_path / "results.json"
    path.write_text(json.dumps({
        "started": "2026-11-26T18:00:00Z", "planner": "scripted", "mode": "model", "cpus": 2, "load_average": 1.0,
        "load_average_last": 1.0, "tasks": ["click-test", "click-link"], "episodes": EPISODES}))
    # The harness's --report reads the file (bench.miniwob sets up its own service's environment when imported:
    # it runs in a process of its own).
    done = subprocess.run([sys.executable, "-m", "bench.miniwob", "--report", str(path)], cwd=ROOT, timeout=120,
                          env={**os.environ, "BENCH_LOG_DIR": str(tmp_path)}, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout
    overall = truth.figures(EPISODES)
    assert overall["confusion"] == {"rewarded": {"success": 1, "error": 1, "other": 1},
                                    "not rewarded": {"success": 1, "error": 1, "other": 1}}
    assert (overall["true_successes"], overall["false_successes"], overall["missed_successes"],
            overall["task_successes"], overall["status_agrees"]) == (1, 1, 2, 2, 3)
    assert overall["true_success_rate"] == round(1 / 6, 3)
    assert truth.figures(EPISODES[:3])["missed_successes"] == 2
    # per task: page success, true, false, missed
    assert "| click-test | 3/3 | 1 | 0 | 2 |" in out and "| click-link | 0/3 | 0 | 1 | 0 |" in out
    assert "| overall | 3/6 | 1 | 1 | 2 |" in out
    assert "| rewarded | 1 | 1 | 1 | 3 |" in out and "| not rewarded | 1 | 1 | 1 | 3 |" in out
    assert ("page successes 3/6; true successes 1/6 (task success, page rewarded); false successes 1 "
            "(task success, page not); missed successes 2 (page rewarded, task not success); the status agrees "
            "with the page in 3/6") in out


def test_the_episode_line_says_what_the_page_and_the_task_said_without_contradiction():
    lines = [truth.episode_line(record) for record in EPISODES[:2] + EPISODES[3:5]]
    assert lines == [
        "TRUE SUCCESS: page rewarded (raw 1, done), task success",
        "MISSED SUCCESS: page rewarded (raw 1, done), task error",
        "FALSE SUCCESS: page not rewarded (raw -1, done), task success",
        "TRUE FAILURE: page not rewarded (raw -1, done), task error",
    ]
