"""Plot effective bandwidth against size from the committed asv results (the docs' benchmark page).

Usage::

    python tools/plot_benchmarks.py [--results benchmarks/results/asv] [--out docs/img] [--table]

For every machine in the results directory, the newest commit that has the
sweep (``cpu.CpuSweep.track_gbps`` or ``gpu.GpuSweep.track_gbps``) gives one
PNG, ``bandwidth_<machine>.png``: effective bandwidth (bytes of ``a`` and ``b``
read plus ``h`` written, over the best time) against the number of elements,
one line per backend/method and peer, with the machine's copy bandwidth
(``CpuCopy``/``GpuCopy.track_copy_gbps`` of the same run) as a dashed line,
and the device and the date of the measurement in the title. ``--table``
prints the headline benchmarks of each machine's newest run as Markdown for
``docs/benchmarks.md``.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import sys

SWEEPS = {"cpu.CpuSweep.track_gbps": "cpu.CpuCopy.track_copy_gbps",
          "gpu.GpuSweep.track_gbps": "gpu.GpuCopy.track_copy_gbps"}


def _strip(v):
    return v[1:-1] if isinstance(v, str) and len(v) > 1 and v[0] == v[-1] == "'" else v


def load(results_dir):
    """{machine: (machine_info, [Results newest first])} from asv's results directory."""
    from asv.results import Results

    out = {}
    for machine in sorted(os.listdir(results_dir)):
        mdir = os.path.join(results_dir, machine)
        if not os.path.isdir(mdir):
            continue
        with open(os.path.join(mdir, "machine.json")) as f:
            info = json.load(f)
        runs = []
        for name in os.listdir(mdir):
            if name.endswith(".json") and name != "machine.json":
                runs.append(Results.load(os.path.join(mdir, name)))
        runs.sort(key=lambda r: r.date, reverse=True)
        out[machine] = (info, runs)
    return out


def table_of(run, key):
    """[(params tuple, value)] of one benchmark in one run (values None where skipped)."""
    if key not in run.get_all_result_keys():
        return []
    import itertools

    params = run.get_result_params(key)
    values = run.get_result_value(key, params)
    combos = list(itertools.product(*params)) if params else [()]
    return [(tuple(_strip(p) for p in c), v) for c, v in zip(combos, values)]


def finite(v):
    return v is not None and isinstance(v, (int, float)) and math.isfinite(v)


def measured(run, key):
    """When ``key`` ran (asv's started_at), not the commit's date."""
    ms = run.started_at.get(key, run.date)
    return datetime.datetime.fromtimestamp(ms / 1000, datetime.timezone.utc)


def device_of(machine, info):
    return info.get("cpu") or machine


def plot_machine(machine, info, runs, outdir):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    for sweep, copy in SWEEPS.items():
        run = next((r for r in runs if any(finite(v) for _, v in table_of(r, sweep))), None)
        if run is None:
            continue
        rows = [(p, v) for p, v in table_of(run, sweep) if finite(v)]
        copy_bw = [v for _, v in table_of(run, copy) if finite(v)]
        fig, ax = plt.subplots(figsize=(8, 5))
        lines = {}
        for p, v in rows:
            *label, n = p
            lines.setdefault(" ".join(f"{x}" for x in label), []).append((int(n), v))
        for label, pts in sorted(lines.items()):
            pts.sort()
            ax.plot([n for n, _ in pts], [v for _, v in pts], marker="o", label=label)
        if copy_bw:
            ax.axhline(copy_bw[0], color="k", linestyle="--", label=f"copy {copy_bw[0]:.0f} GB/s")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("elements (float64, one row)" if sweep.startswith("cpu") else
                      "elements (float32, rows of 4096 steps, full-size a)")
        ax.set_ylabel("effective bandwidth, GB/s (a, b read + h written)")
        ax.set_title(f"{device_of(machine, info)}\n{machine}, commit {run.commit_hash[:8]}, "
                     f"measured {measured(run, sweep):%Y-%m-%d %H:%M} UTC", fontsize=10)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8, loc="best")
        fig.tight_layout()
        path = os.path.join(outdir, f"bandwidth_{machine}.png")
        fig.savefig(path, dpi=110)
        plt.close(fig)
        print(f"wrote {path} ({len(rows)} points, commit {run.commit_hash[:8]})")


HEADLINES = [
    ("cpu.CpuScan.track_gbps", "GB/s"), ("cpu.CpuEma.time_scan", "s"), ("cpu.CpuGae.time_scan", "s"),
    ("cpu.CpuDense.time_dense", "s"), ("cpu.CpuCopy.track_copy_gbps", "GB/s"),
    ("gpu.GpuScan.track_gbps", "GB/s"), ("gpu.GpuEma.time_scan", "s"), ("gpu.GpuGae.time_scan", "s"),
    ("gpu.GpuDense.time_dense", "s"), ("gpu.GpuChunkState.time_scan", "s"),
    ("gpu.GpuCopy.track_copy_gbps", "GB/s"),
]


def fmt(v, unit):
    if not finite(v):
        return "n/a"
    if unit == "s":
        return f"{v * 1e3:.3g} ms" if v >= 1e-3 else f"{v * 1e6:.3g} µs"
    return f"{v:.4g}"


def markdown(machines):
    out = []
    for machine, (info, runs) in machines.items():
        if not runs:
            continue
        run = runs[0]
        when = max(run.started_at.values(), default=run.date)
        when = datetime.datetime.fromtimestamp(when / 1000, datetime.timezone.utc)
        out.append(f"### {machine} ({device_of(machine, info)}), commit {run.commit_hash[:8]}, "
                   f"measured {when:%Y-%m-%d %H:%M} UTC\n")
        for key, unit in HEADLINES:
            rows = [(p, v) for p, v in table_of(run, key) if finite(v)]
            if not rows:
                continue
            out.append(f"`{key}` ({unit})\n")
            out.append("| parameters | value |\n|---|---|")
            out.extend(f"| {' / '.join(map(str, p))} | {fmt(v, unit)} |" for p, v in rows)
            out.append("")
    return "\n".join(out)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--results", default="benchmarks/results/asv")
    ap.add_argument("--out", default="docs/img")
    ap.add_argument("--table", action="store_true", help="print Markdown tables of the newest runs")
    args = ap.parse_args(argv)
    machines = load(args.results)
    if not machines:
        sys.exit(f"plot_benchmarks: no machines under {args.results}")
    os.makedirs(args.out, exist_ok=True)
    for machine, (info, runs) in machines.items():
        plot_machine(machine, info, runs, args.out)
    if args.table:
        print(markdown(machines))


if __name__ == "__main__":
    main()
