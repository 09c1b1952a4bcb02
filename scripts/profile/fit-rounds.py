#!/usr/bin/env python3
"""Reads interleaved `scripts/profile.sh` rounds as `instructions = a + B / requests`.

A profile run counts the whole process's instructions over the run and divides by the
requests served, so the fixed background of a run (timers, probes, the stats history)
weighs more in a slow run. Given runs of several cases (a label, the requests and the
instructions per request of each run, one run per line), this fits one `B` for all and
one `a` per case by least squares and prints each case's `a` (median of its runs) and
its difference to a base case.

Usage: scripts/profile/fit-rounds.py POINTS_FILE [BASE_LABEL]
  POINTS_FILE lines: `<label> <requests> <instructions per request>`, e.g. made with
    QW_BIN=<binary> scripts/profile.sh [--tracing 0.01] > out.txt
    echo "off $(grep 'instructions per request' out.txt | awk '{gsub(",","",$3); print $1, $3}')" >> points.txt
"""
import collections
import sys

points = collections.defaultdict(list)
for line in open(sys.argv[1]):
    p = line.split()
    if len(p) == 3:
        points[p[0]].append((int(p[1]), int(p[2])))
num = den = 0.0
for runs in points.values():
    xs = [1 / n for n, _ in runs]
    ys = [y for _, y in runs]
    xb, yb = sum(xs) / len(xs), sum(ys) / len(ys)
    num += sum((x - xb) * (y - yb) for x, y in zip(xs, ys))
    den += sum((x - xb) ** 2 for x in xs)
b = num / den if den else 0.0
print(f"background per run B = {b / 1e6:.2f}M instructions")
fitted = {}
for label in sorted(points):
    a = sorted(y - b / n for n, y in points[label])
    fitted[label] = a[len(a) // 2]
    print(f"{label:12s} runs {len(a)}  a (median) {fitted[label]:8.0f}  each {[round(x) for x in a]}  raw {[y for _, y in points[label]]}")
base = sys.argv[2] if len(sys.argv) > 2 else None
if base in fitted:
    for label in sorted(fitted):
        d = fitted[label] - fitted[base]
        print(f"  {label}: {d:+.0f} ({d / fitted[base] * 100:+.2f}%) against {base}")
