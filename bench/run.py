"""`make bench`: every benchmark on one stack, one table of figures and ratios (BENCH_QUICK=1: short)."""
from bench import browser, common, latency, pipeline, poll, submit

if __name__ == "__main__":
    common.main(submit.measure, pipeline.measure, latency.measure, poll.measure, browser.measure)
