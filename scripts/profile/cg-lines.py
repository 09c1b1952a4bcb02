#!/usr/bin/env python3
"""Instructions per source line of one function, from a callgrind profile.

valgrind 3.19 cannot read the DWARF of Swift 6 binaries, so `scripts/profile.sh`
profiles a copy without debug info. Run it with
`QW_PROFILE_KEEP=1 QW_CALLGRIND_ARGS=--dump-instr=yes` and this script maps the
per-instruction counts back to source lines with llvm-symbolizer on the unstripped
binary (the text section is the same). Calls made from a line are shown apart
(inclusive cost of the callee).

The binary must be the build that was profiled: by default the `quickway.debug` that
`profile.sh` keeps next to CG_OUT (with QW_PROFILE_KEEP), else .build/release/quickway.

Usage: scripts/profile/cg-lines.py CG_OUT FUNCTION_SUBSTRING [--binary PATH]
                           [--requests N] [--top 40]
"""
import argparse
import collections
import os
import re
import shutil
import subprocess
import sys


def parse(path, want):
    """Yields (address, cost, is_call) for instructions of functions whose mangled
    name contains `want`, in the quickway object."""
    ob_names, fn_names = {}, {}
    cur_ob = cur_fn = None
    in_target = False
    pending_call = False
    last_addr = 0
    def name_of(table, spec):
        m = re.match(r"\((\d+)\)(?: (.*))?", spec)
        if not m:
            return spec
        if m.group(2):
            table[m.group(1)] = m.group(2)
        return table.get(m.group(1), "")
    with open(path) as f:
        for line in f:
            line = line.rstrip("\n")
            if line.startswith("ob="):
                cur_ob = name_of(ob_names, line[3:])
                continue
            if line.startswith("fn="):
                cur_fn = name_of(fn_names, line[3:])
                in_target = want in cur_fn and (cur_ob or "").endswith("/quickway")
                continue
            if line.startswith(("cob=", "cfi=", "cfl=")):
                if line.startswith("cob="):
                    name_of(ob_names, line[4:])
                continue
            if line.startswith("cfn="):
                name_of(fn_names, line[4:])
                continue
            if line.startswith("calls="):
                pending_call = True
                continue
            if not line or not (line[0] in "+-*0123456789"):
                continue
            parts = line.split()
            a = parts[0]
            if a == "*":
                addr = last_addr
            elif a[0] in "+-":
                addr = last_addr + int(a, 0)
            else:
                addr = int(a, 16)
            last_addr = addr
            cost = int(parts[2]) if len(parts) > 2 else 0
            if in_target:
                yield addr, cost, pending_call
            pending_call = False


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("cg_out")
    ap.add_argument("function")
    ap.add_argument("--binary")
    ap.add_argument("--requests", type=int, default=1)
    ap.add_argument("--top", type=int, default=40)
    args = ap.parse_args()
    if not args.binary:
        kept = os.path.join(os.path.dirname(os.path.abspath(args.cg_out)), "quickway.debug")
        args.binary = kept if os.path.exists(kept) else ".build/release/quickway"
    self_cost = collections.Counter()
    call_cost = collections.Counter()
    for addr, cost, is_call in parse(args.cg_out, args.function):
        (call_cost if is_call else self_cost)[addr] += cost
    addrs = sorted(set(self_cost) | set(call_cost))
    if not addrs:
        sys.exit(f"no instructions of a function matching {args.function!r} in {args.cg_out}")
    sym = shutil.which("llvm-symbolizer") or "/opt/swift/usr/bin/llvm-symbolizer"
    out = subprocess.run([sym, "--obj", args.binary, "--no-inlines", "--relative-address"] +
                         [hex(a) for a in addrs], capture_output=True, text=True).stdout
    blocks = [b.split("\n") for b in out.strip().split("\n\n")]
    by_line = collections.Counter()
    calls_by_line = collections.Counter()
    for a, b in zip(addrs, blocks):
        loc = b[1] if len(b) > 1 else "?"
        loc = re.sub(r".*/Sources/", "", loc)
        by_line[loc] += self_cost[a]
        calls_by_line[loc] += call_cost[a]
    n = args.requests
    total = sum(by_line.values())
    print(f"self {total / n:,.0f} per request; calls {sum(calls_by_line.values()) / n:,.0f}")
    for loc, c in sorted(by_line.items(), key=lambda kv: -(kv[1] + calls_by_line[kv[0]]))[:args.top]:
        print(f"{c / n:>8,.0f} {calls_by_line[loc] / n:>8,.0f}  {loc}")


if __name__ == "__main__":
    main()
