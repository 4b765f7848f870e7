#!/usr/bin/env python3
"""Compare detkit benchmark results against the CUB baseline.

Usage: compare.py detkit.csv cub.csv [--out FILE]

Both inputs use the CSV format `impl,primitive,n,median_ms,gbps,gitems`; lines
starting with '#' are comments. detkit.csv holds impl `detkit` rows (possibly
with primitives CUB lacks); cub.csv holds impl `cub` rows plus impl `copy`
rows (primitive `copy`) used as the memory-bandwidth reference.
"""
import argparse
import csv
import sys


def load(path):
    with open(path, newline="") as f:
        lines = [l for l in f if l.strip() and not l.lstrip().startswith("#")]
    rows = []
    for r in csv.DictReader(lines):
        rows.append({
            "impl": r["impl"].strip(),
            "primitive": r["primitive"].strip(),
            "n": int(r["n"]),
            "ms": float(r["median_ms"]),
            "gbps": float(r["gbps"]),
            "gitems": float(r["gitems"]),
        })
    return rows


def fmt_n(n):
    return f"2^{n.bit_length() - 1}" if n > 0 and n & (n - 1) == 0 else str(n)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("detkit_csv")
    ap.add_argument("cub_csv")
    ap.add_argument("--out", help="also write the Markdown table to this file")
    a = ap.parse_args()

    det = [r for r in load(a.detkit_csv) if r["impl"] not in ("cub", "copy")]
    base = load(a.cub_csv)
    cub = {(r["primitive"], r["n"]): r for r in base if r["impl"] == "cub"}
    copy = {r["n"]: r for r in base if r["impl"] == "copy"}

    out = [
        "| primitive | n | detkit GB/s | detkit G items/s | CUB GB/s | detkit/CUB | detkit/copy |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for r in det:
        # A shape variant (`NAME@vK`, detkit-bench --variants) compares with CUB's NAME.
        c = cub.get((r["primitive"].split("@")[0], r["n"]))
        cp = copy.get(r["n"])
        cub_gbps = f"{c['gbps']:.1f}" if c else "-"
        vs_cub = f"{c['ms'] / r['ms']:.2f}x" if c and r["ms"] > 0 else "-"
        vs_copy = f"{r['gbps'] / cp['gbps']:.2f}" if cp and cp["gbps"] > 0 else "-"
        out.append(f"| {r['primitive']} | {fmt_n(r['n'])} | {r['gbps']:.1f} | {r['gitems']:.2f} "
                   f"| {cub_gbps} | {vs_cub} | {vs_copy} |")
    text = "\n".join(out) + "\n"
    sys.stdout.write(text)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
