"""Benchmarks: each figure measured side by side with its baseline in the same run (`make bench`)."""
