"""Medians of interleaved benchmark rounds, shared by the bench scripts.

Result files hold one line per run: `name v1 v2 ...` (req/s, p50 ms, p99 ms, CPU us per
request, non-2xx, and any extra columns a script adds).
"""
import statistics


def medians(path):
    """{name: [median of each column]} over the rounds in `path`."""
    rows = {}
    for line in open(path):
        name, *vals = line.split()
        rows.setdefault(name, []).append([float(v) for v in vals])
    return {k: [statistics.median(c) for c in zip(*v)] for k, v in rows.items()}
