#!/usr/bin/env python3
"""Compares the CSVs of bench/ab.sh: for each row key, B's time over A's (the mean of A's two
runs), beside A's own run-to-run spread (a2 / a1). Usage: ab_compare.py DIR"""
import csv, sys, os, statistics

TIME_COLS = {"median_ms", "ms", "value", "ours_chain_us_per_event", "seed_chain_us_per_event",
             "ours_find_us", "ours_count_us"}

def load(path):
    rows = {}
    if not os.path.exists(path):
        return rows
    with open(path) as f:
        lines = [l for l in f if not l.startswith("#")]
    for r in csv.DictReader(lines):
        r = {c: v for c, v in r.items() if c is not None}
        tcols = [c for c in r if c in TIME_COLS]
        key = tuple((c, r[c]) for c in r if c not in TIME_COLS and c not in
                    ("gbps", "gitems", "mitems_per_s", "ours_events_per_s", "seed_events_per_s",
                     "speedup_vs_seed", "digis", "spacepoints", "medium_modules",
                     "fallback_modules", "baseline_ms", "ours_cut_us", "seed_find_us"))
        for c in tcols:
            try:
                rows[key + (("col", c),)] = float(r[c])
            except ValueError:
                pass
    return rows

d = sys.argv[1]
names = sorted({f.split("-", 1)[1] for f in os.listdir(d) if f.endswith(".csv")})
ratios_all = []
for n in names:
    a1, a2, b = (load(os.path.join(d, f"{p}-{n}")) for p in ("a1", "a2", "b"))
    print(f"\n## {n[:-4]}\n\n| row | A ms | B ms | B/A | A2/A1 |\n|---|---:|---:|---:|---:|")
    for k in a1:
        if k in b and k in a2 and a1[k] > 0 and a2[k] > 0:
            a = (a1[k] + a2[k]) / 2
            r = b[k] / a
            ratios_all.append(r)
            label = ", ".join(f"{v}" for c, v in k if c != "col") + f" [{dict(k)['col']}]"
            print(f"| {label} | {a:.4g} | {b[k]:.4g} | {r:.3f} | {a2[k]/a1[k]:.3f} |")
if ratios_all:
    print(f"\nall rows: median B/A {statistics.median(ratios_all):.3f}, "
          f"min {min(ratios_all):.3f}, max {max(ratios_all):.3f}, n = {len(ratios_all)}")
