#!/usr/bin/env python3
"""Before/after in one run: every row of bench/compare.py measured for two praetor binaries.

    bench/ab.py --before /path/to/praetor-old --after target/release/praetor \
        [--only row,row] [--runs 3] [--duration 3] [--out results/ab-<UTC>]

A change to a hot path must show its before and after measured in the same sitting on the
same machine. Each row runs once per binary, in the order before, after for even rows and
after, before for odd ones, so a slow drift of the machine does not favour one side. Each
row's own figure is already a ratio against a peer measured in the same invocation (the
floor, etcd, NSD, another praetor query), so the table compares ratios, which survive the
machine's run-to-run noise far better than absolute rates; the absolute praetor figures are
listed too. Standard library only; the compare script does the starting and stopping.
"""

import argparse
import datetime
import json
import os
import subprocess
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))


def run_row(label, binary, row, args, out_dir):
    """Runs one row for one binary; returns its rows.json entry (or a failure stand-in)."""
    row_out = os.path.join(out_dir, f"{row}-{label}")
    command = [sys.executable, os.path.join(ROOT, "bench", "compare.py"), "--root", ROOT,
               "--praetor", binary, "--only", row, "--out", row_out]
    if args.loadgen:
        command += ["--loadgen", args.loadgen]
    if args.runs:
        command += ["--runs", str(args.runs)]
    if args.duration:
        command += ["--duration", str(args.duration)]
    print(f"[ab] {row} ({label}): {' '.join(command)}", flush=True)
    finished = subprocess.run(command, cwd=ROOT)
    try:
        with open(os.path.join(row_out, "rows.json")) as f:
            rows = json.load(f)
    except (OSError, ValueError):
        rows = []
    for entry in rows:
        if entry.get("id") == row:
            return entry
    return {"id": row, "praetor": "—", "ratio": "—", "result": f"no result (exit {finished.returncode})",
            "note": "", "load": None}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--before", required=True, help="praetor binary before the change")
    parser.add_argument("--after", required=True, help="praetor binary after the change")
    parser.add_argument("--only", help="comma-separated row ids (default: every row)")
    parser.add_argument("--runs", type=int, help="interleaved runs per side within a row")
    parser.add_argument("--duration", type=float, help="seconds per run")
    parser.add_argument("--loadgen", help="loadgen binary both sides use (default: compare.py's, target/release/loadgen)")
    parser.add_argument("--out", help="results directory (default results/ab-<UTC timestamp>)")
    args = parser.parse_args()

    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    out_dir = args.out or os.path.join("results", f"ab-{stamp}")
    os.makedirs(out_dir, exist_ok=True)
    if args.only:
        rows = [r for r in args.only.split(",") if r]
    else:
        listed = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "compare.py"), "--list"],
                                capture_output=True, text=True, check=True)
        rows = [line.strip() for line in listed.stdout.splitlines() if line.strip()]

    table = []
    for position, row in enumerate(rows):
        order = [("before", args.before), ("after", args.after)]
        if position % 2 == 1:
            order.reverse()
        results = {label: run_row(label, binary, row, args, out_dir) for label, binary in order}
        table.append((row, results["before"], results["after"]))

    lines = [f"# Before/after, {stamp}", "",
             f"before: `{args.before}`  ", f"after: `{args.after}`  ",
             f"command: `bench/ab.py {' '.join(sys.argv[1:])}`", "",
             "| row | ratio before | ratio after | praetor before | praetor after | result before | result after | load 1-min (b/a) |",
             "|---|---|---|---|---|---|---|---|"]
    for row, before, after in table:
        load = "/".join("—" if r.get("load") is None else f"{r['load']:.1f}" for r in (before, after))
        lines.append(f"| {row} | {before.get('ratio')} | {after.get('ratio')} | {before.get('praetor')} | "
                     f"{after.get('praetor')} | {before.get('result')} | {after.get('result')} | {load} |")
    report = "\n".join(lines) + "\n"
    with open(os.path.join(out_dir, "ab.md"), "w") as f:
        f.write(report)
    print(report)
    print(f"[ab] written {os.path.relpath(os.path.join(out_dir, 'ab.md'))}")


if __name__ == "__main__":
    main()
