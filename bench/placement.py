#!/usr/bin/env python3
"""bench/placement.py PLACED_TSV: bench/compare.sh's runs by vCPU placement.

Each line of PLACED_TSV is one run: LABEL, TOOL (rdmx or ucx), its figure,
and the host's line ping-pong (us) just before and just after it. The
ping-pongs fall in two clusters on these VMs, the two vCPUs sharing a
last-level cache ("near") or not ("far"). The cut between them is the
geometric mean of the lowest and highest ping-pong, and at least 1.8x the
lowest (with one cluster, every run is "near"). A run is "near" when both
its ping-pongs are below the cut. Prints, per label in order of first
appearance, "LABEL, near" and "LABEL, far", each with rdmx's and ucx's
median over their runs in that placement (n/a: none), tab-separated.
"""
import statistics, sys
runs = [l.rstrip("\n").split("\t") for l in open(sys.argv[1])]
def num(v):
    try:
        return float(v)
    except ValueError:
        return None
pps = [p for r in runs for p in map(num, r[3:5]) if p]
lo, hi = (min(pps), max(pps)) if pps else (0, 0)
# Between the two placements' ping-pongs when both came, else above all.
cut = max(1.8 * lo, (lo * hi) ** 0.5)
names = []
for r in runs:
    if r[0] not in names:
        names.append(r[0])
for name in names:
    for where in ("near", "far"):
        out = []
        for tool in ("rdmx", "ucx"):
            vs = [num(r[2]) for r in runs if r[0] == name and r[1] == tool
                  and num(r[2]) is not None and num(r[3]) and num(r[4])
                  and (max(num(r[3]), num(r[4])) <= cut) == (where == "near")]
            out.append("%.3f" % statistics.median(vs) if vs else "n/a")
        print("%s, %s\t%s" % (name, where, "\t".join(out)))
