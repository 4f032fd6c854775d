"""`make bench`: every benchmark on one stack, one table of figures and ratios (BENCH_QUICK=1: short)."""
from bench import (browser, caller_proxy, common, latency, live, lost_machine, metrics, pipeline, planner, poll, pool,
                   profiles, recording, replay, schemas, sessions, submit, tenancy, window_channel)

if __name__ == "__main__":
    common.main(submit.measure, pipeline.measure, latency.measure, poll.measure, planner.measure,
                window_channel.measure, browser.measure, pool.measure, pool.measure_sessions, profiles.measure,
                live.measure, recording.measure, caller_proxy.measure, replay.measure, schemas.measure,
                sessions.measure_direct_actions, lost_machine.measure, tenancy.measure, metrics.measure)
