"""How often a task's status tells the truth: the page's verdict × the task's status, for `make eval`."""
STATUSES = ("success", "error", "other")  # the task's status, the confusion table's columns
# (page rewarded, task said success) → what the episode was: the page is the judge, never the task's word.
VERDICTS = {(True, True): "true success", (False, True): "false success", (True, False): "missed success",
            (False, False): "true failure"}


def task_status(record):
    return record["status"] if record["status"] in ("success", "error") else "other"


def verdict(record):
    return VERDICTS[(bool(record["success"]), record["status"] == "success")]


def confusion(records):
    """Page verdict (raw reward > 0 or not) × task status: {"rewarded": {status: n}, "not rewarded": {...}}."""
    table = {row: dict.fromkeys(STATUSES, 0) for row in ("rewarded", "not rewarded")}
    for record in records:
        table["rewarded" if record["success"] else "not rewarded"][task_status(record)] += 1
    return table


def figures(records):
    """The table and its headline figures for a group of episodes (the results file's per-task and overall)."""
    n, table = len(records), confusion(records)
    yes, no = table["rewarded"], table["not rewarded"]
    return {
        "confusion": table,
        "task_successes": yes["success"] + no["success"],
        "true_successes": yes["success"],  # both say yes
        "false_successes": no["success"],  # the task says success, the page does not
        "missed_successes": yes["error"] + yes["other"],  # the page rewarded it, the task did not say success
        "true_success_rate": round(yes["success"] / n, 3) if n else None,
        "status_agrees": yes["success"] + no["error"] + no["other"],
    }


def episode_line(record):
    """What the page and the task each said, and what that makes the episode; never one word for both."""
    page = "rewarded" if record["success"] else "not rewarded"
    return (f"{verdict(record).upper()}: page {page} (raw {record['raw_reward']}, "
            f"{record.get('reason') or 'no ending'}), task {record['status']}")


def print_table(overall):
    """The confusion table and the headline figures, under the per-task table."""
    n, table = overall["episodes"], overall["confusion"]
    print("\nTruthfulness (page verdict × task status)\n| page \\ task | " + " | ".join(STATUSES) + " | all |\n|---|"
          + "---:|" * (len(STATUSES) + 1))
    for row, counts in table.items():
        print(f"| {row} | " + " | ".join(str(counts[s]) for s in STATUSES) + f" | {sum(counts.values())} |")
    print(f"page successes {overall['successes']}/{n}; true successes {overall['true_successes']}/{n} "
          f"(task success, page rewarded); false successes {overall['false_successes']} (task success, page not); "
          f"missed successes {overall['missed_successes']} (page rewarded, task not success); the status agrees "
          f"with the page in {overall['status_agrees']}/{n}", flush=True)
