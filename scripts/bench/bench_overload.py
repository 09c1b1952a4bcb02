#!/usr/bin/env python3
"""Overload benchmark driver (scripts/bench/bench-overload.sh): for each round and each
proxy in turn, the unloaded p99 (an eighth of the backend's capacity for 2 s) and then
2x its capacity for --seconds (open-loop, overload_load.open_loop); prints the medians
over rounds.

usage: bench_overload.py --rounds R --seconds S --capacity C NAME=HOST:PORT ...
"""
import argparse
import asyncio
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import overload_load  # noqa: E402


def run(host, port, rate, seconds):
    return asyncio.run(overload_load.open_loop(host, port, "/slow", rate, seconds, max_conns=2048, timeout=30))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=5)
    ap.add_argument("--capacity", type=float, required=True)
    ap.add_argument("targets", nargs="+")
    a = ap.parse_args()
    targets = [(t.split("=")[0], t.split("=")[1].rsplit(":", 1)) for t in a.targets]
    rows = {name: [] for name, _ in targets}
    for rnd in range(a.rounds):
        for name, (host, port) in targets:
            run(host, int(port), 20, 0.5)   # warm
            unloaded = overload_load.summary(run(host, int(port), a.capacity / 8, 2))
            loaded_results = run(host, int(port), 2 * a.capacity, a.seconds)
            loaded = overload_load.summary(loaded_results)
            statuses = {}
            for r in loaded_results:
                statuses[r.status] = statuses.get(r.status, 0) + 1
            row = {"unloaded_p99": unloaded["p99_ms"], "p50": loaded["p50_ms"], "p99": loaded["p99_ms"],
                   "admitted": loaded["admitted"], "refused": loaded["sent"] - loaded["admitted"], "sent": loaded["sent"]}
            rows[name].append(row)
            print(f"round {rnd + 1} {name:15s} unloaded p99 {row['unloaded_p99']:7.1f} ms | 2x: admitted {row['admitted']:5d} "
                  f"p50 {row['p50']:8.1f} ms p99 {row['p99']:8.1f} ms | refused {row['refused']:5d} of {row['sent']} "
                  f"{dict(sorted(statuses.items()))}", flush=True)
    print(f"\nmedians over {a.rounds} rounds (2x = {2 * a.capacity:.0f}/s for {a.seconds:g} s against a capacity of {a.capacity:.0f}/s):")
    print(f"{'proxy':15s} {'unloaded p99':>13s} {'admitted p50':>13s} {'admitted p99':>13s} {'p99/unloaded':>13s} {'refused':>9s} {'admitted':>9s}")
    for name, rs in rows.items():
        med = lambda k: statistics.median(r[k] for r in rs)  # noqa: E731
        print(f"{name:15s} {med('unloaded_p99'):11.1f}ms {med('p50'):11.1f}ms {med('p99'):11.1f}ms {med('p99') / med('unloaded_p99'):12.2f}x "
              f"{med('refused'):9.0f} {med('admitted'):9.0f}")


if __name__ == "__main__":
    main()
