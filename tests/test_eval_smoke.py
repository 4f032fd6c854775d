"""`make eval` works (never how well the agent does): the harness runs MiniWoB++ episodes through the API, with
hand-written built-in steps and with the bundled model, reads every episode's reward from the page and writes
its results file; no episode leaves the MiniWoB host."""
import json
import os
import subprocess
import sys
import tempfile

import pytest

from tests.processes import ROOT

# About 2 minutes on an idle machine (two service start-ups, three episodes); far longer on a loaded one.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]


@pytest.fixture(scope="module")
def eval_env(tmp_path_factory):
    """The harness's own database and vhost (it empties its database first), beside the tests' ones."""
    db = os.environ.get("TEST_DB", "remote_dispatch_test") + "_eval"
    vhost = os.environ.get("TEST_VHOST", "rd_test") + "_eval"
    subprocess.run(["bash", "tests/ensure_services.sh"], cwd=ROOT, check=True, capture_output=True,
                   env={**os.environ, "TEST_DB": db, "TEST_VHOST": vhost})
    return {**os.environ, "BENCH_DB": db, "BENCH_VHOST": vhost,
            # short: the browser sandbox's Unix sockets live under VAR_DIR (a pytest tmp path is too long)
            "BENCH_LOG_DIR": tempfile.mkdtemp(prefix="rd-eval-"), "LLM_BASE_URL": "", "LLM_MODEL": ""}


def run_harness(env, tmp_path, *args):
    results = tmp_path / "results.json"
    done = subprocess.run([sys.executable, "-m", "bench.miniwob", *args, "--results", str(results)], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=580)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report = json.loads(results.read_text())
    return report, done.stdout


def assert_every_episode_was_measured(report, episodes):
    assert len(report["episodes"]) == episodes
    for record in report["episodes"]:
        assert not (record["error"] or "").startswith("harness:"), record
        assert record["utterance"] and record["requestId"], record
        assert record["status"] in ("success", "error"), record
        assert isinstance(record["raw_reward"], (int, float)), record  # read from the page, whatever it is
        assert record["left_host"] is False, record
        assert record["final_url"].startswith(f"http://{report['pages_host']}/miniwob/"), record
    assert report["overall"]["rewards_read"] == episodes


def test_hand_written_steps_and_the_bundled_model_run_through_the_harness(eval_env, tmp_path):
    report, out = run_harness(eval_env, tmp_path, "--planner", "steps", "--tasks", "click-link,login-user",
                              "--seeds", "1", "--first-seed", "4", "--replay")
    assert_every_episode_was_measured(report, 2)
    assert "| overall |" in out and out.count("] click-link seed 4:") == 1
    assert [r["prompt"].splitlines()[0] for r in report["episodes"]] == ["/Operator", "/Operator"]
    # --replay: each successful task's script ran again on the same seed, in a new session, as its own task.
    for record in report["episodes"]:
        if record["status"] == "success":
            replay = record["replay"]
            assert replay["requestId"] != record["requestId"] and replay["status"] in ("success", "error"), replay
            assert isinstance(replay["raw_reward"], (int, float)), replay
    assert "replays of the successful tasks' scripts:" in out

    report, out = run_harness(eval_env, tmp_path, "--planner", "model", "--tasks", "click-test", "--seeds", "1",
                              "--max-steps", "2", "--episode-seconds", "20")
    assert_every_episode_was_measured(report, 1)
    assert report["planner"] == "smollm2-135m-instruct"
    assert report["episodes"][0]["prompt"] == "/Operator Click the button."


def test_miniwob_drag_tasks_pass_with_hand_written_drag_steps(eval_env, tmp_path):
    """drag-box (jQuery UI draggable), drag-items (jQuery UI sortable) and use-slider (jQuery UI slider): real pointer
    drags of the built-in steps, through the API, rewarded by the pages themselves."""
    report, out = run_harness(eval_env, tmp_path, "--planner", "steps", "--tasks", "drag-box,drag-items,use-slider",
                              "--seeds", "3", "--first-seed", "0")
    assert_every_episode_was_measured(report, 9)
    failed = [(r["task"], r["seed"], r["status"], r["raw_reward"], r["error"]) for r in report["episodes"]
              if not (r["success"] and r["status"] == "success")]
    assert not failed, out[-3000:]
    assert all(r["prompt"].splitlines()[1].startswith("drag ") for r in report["episodes"])
