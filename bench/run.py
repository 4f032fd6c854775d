"""`make bench`: every benchmark on one stack, one table of figures and ratios (BENCH_QUICK=1: short)."""
from bench import browser, common, latency, pipeline, planner, poll, replay, submit, window_channel

if __name__ == "__main__":
    common.main(submit.measure, pipeline.measure, latency.measure, poll.measure, planner.measure,
                window_channel.measure, browser.measure, replay.measure)
