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


def num(v):
    try:
        return float(v)
    except ValueError:
        return None


# (label, tool, figure, placement): a run with a figure and both ping-pongs.
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1])]
runs = [(r[0], r[1], num(r[2]), (num(r[3]), num(r[4]))) for r in rows]
pps = [p for _, _, _, pp in runs for p in pp if p]
lo, hi = (min(pps), max(pps)) if pps else (0, 0)
# Between the two placements' ping-pongs when both came, else above all.
cut = max(1.8 * lo, (lo * hi) ** 0.5)
where_of = {}
for label, tool, fig, pp in runs:
    if fig is not None and all(pp):
        where_of.setdefault((label, tool, max(pp) <= cut), []).append(fig)
labels = list(dict.fromkeys(label for label, _, _, _ in runs))
for label in labels:
    for where, near in (("near", True), ("far", False)):
        out = []
        for tool in ("rdmx", "ucx"):
            vs = where_of.get((label, tool, near))
            out.append("%.3f" % statistics.median(vs) if vs else "n/a")
        print("%s, %s\t%s" % (label, where, "\t".join(out)))
