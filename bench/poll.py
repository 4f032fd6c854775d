"""Benchmark 4: poll under wrk load with 1k vs. 1M rows in the tasks table (indexes should hold it flat)."""
import time

from bench import common
from bench.common import Row

SMALL, LARGE = 1_000, common.scaled(1_000_000, 100_000)
SECONDS = common.scaled(15, 4)
CONNECTIONS = 16
POLLED = 100  # distinct requestIds the load cycles through, all the bench key's
# A finished task shaped like the real ones (response with trace, usage), from the database clock.
ROWS = """
INSERT INTO tasks (id, api_key_id, status, agent, execution_mode, prompt, options, response, usage,
                   trace, attempt, cancel_requested, created_at, updated_at, started_at, completed_at)
SELECT gen_random_uuid()::text, CASE WHEN i % 10 = 0 THEN :key ELSE :other END, 'success', 'general',
       'cloud', 'answer hi', '{}',
       '{"output": {"type": "text", "content": "hi"}, "text": "hi", "structuredOutput": null,
         "actionTrace": [{"url": "", "action": "hi", "credits": 0.0, "startTs": "2026-11-21T22:56:20.994Z",
                          "endTs": "2026-11-21T22:56:20.994Z", "durationMs": 0}]}',
       '{"actions": 0, "credits": 0.0}', '[]', 1, false, ts, ts, ts, ts + interval '200 ms'
FROM generate_series(:first, :last) AS i, LATERAL (SELECT now() - i * interval '2 s' AS ts) AS t
"""


def measure(stack):
    key_id, other_id = bench_keys(stack)
    stack.sql("TRUNCATE tasks CASCADE")
    fill(stack, 1, SMALL, key_id, other_id)
    small = poll_load(stack, key_id)
    started = time.monotonic()
    fill(stack, SMALL + 1, LARGE, key_id, other_id)
    filled = time.monotonic() - started
    large = poll_load(stack, key_id)
    some_id = stack.sql("SELECT min(id) FROM tasks")[0][0]
    plan = stack.sql("EXPLAIN SELECT * FROM tasks WHERE id = :id", id=some_id)
    stack.sql("TRUNCATE tasks CASCADE")  # give the disk back; the next run resets the database anyway
    common.say(f"{LARGE - SMALL:,} rows inserted in {filled:.0f} s; plan: {plan[0][0]}")
    section, baseline = "4 poll", f"same, {SMALL:,} rows"
    return common.checked([
        Row(section, f"poll throughput, {LARGE:,} rows (req/s, {CONNECTIONS} connections)", large.rps,
            baseline, small.rps),
        Row(section, f"poll latency p50, {LARGE:,} rows (ms)", large.p50_ms, baseline, small.p50_ms),
        Row(section, f"poll latency p99, {LARGE:,} rows (ms)", large.p99_ms, baseline, small.p99_ms),
        Row(section, f"web worker CPU per poll, {LARGE:,} rows (ms)", large.cpu_ms, baseline, small.cpu_ms),
    ], (large, 200), (small, 200))


def bench_keys(stack):
    """The bench key (whose tasks are polled) and one other key owning 90% of the rows."""
    from app.cli import create_key

    from app.extensions import db

    other = create_key("bench-others", "bench")[0].id
    db.session.remove()  # reading .id began a transaction: end it before the load
    key = stack.sql("SELECT id FROM api_keys WHERE name = 'bench'")[0][0]
    return key, other


def fill(stack, first, last, key_id, other_id):
    from app.extensions import db

    stack.sql(ROWS, first=first, last=last, key=key_id, other=other_id)
    with db.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.exec_driver_sql("VACUUM ANALYZE tasks")  # settle as a live table would, not mid-autovacuum


def poll_load(stack, key_id):
    ids = [row[0] for row in stack.sql(
        "SELECT id FROM tasks WHERE api_key_id = :key ORDER BY random() LIMIT :n", key=key_id, n=POLLED)]
    paths = common.LOG_DIR / "poll-paths.txt"
    paths.write_text("".join(f"/fast/v2/remote-dispatch/responses/{i}\n" for i in ids))
    common.wrk(stack.web.url, 1, CONNECTIONS, api_key=stack.api_key, paths_file=paths)  # warm-up
    return common.wrk(stack.web.url, SECONDS, CONNECTIONS, api_key=stack.api_key, paths_file=paths,
                      cpu_of=stack.web.children())


if __name__ == "__main__":
    common.main(measure)
