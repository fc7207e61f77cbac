"""Figures and tables of the performance page, from the committed asv results.

Usage::

    python tools/plot_benchmarks.py [--results benchmarks/results/asv] [--out docs/_generated]
                                    [--markdown docs/_generated] [--table]

The docs build runs this (``docs/conf.py``), so the site always shows the
newest committed results. For every machine in the results directory:

* ``bandwidth_<machine>.png``: effective bandwidth (bytes of ``a`` and ``b``
  read plus ``h`` written, over the best time) against the number of elements,
  one line per backend/method and peer, and the machine's copy bandwidth of the
  same run (``MemoryCopy.track_copy_gbps``) as a dashed line; machine, commit
  and date in the title. Drawn only when the machine's *newest* measured
  commit ran the sweep (``cpu.CpuSweep``/``gpu.GpuSweep``): an older sweep
  would show older kernels, so it is left out rather than shown stale.
* ``figure_<machine>.md`` (``--markdown``): that figure, or a sentence saying
  there is no current one;
* ``table_<machine>.md`` (``--markdown``): a table of the headline benchmarks
  of the newest commit, naming machine, commit, date and the command.

``--table`` prints the tables to standard output.
"""

from __future__ import annotations

import argparse
import datetime
import itertools
import json
import math
import os
import sys

SWEEPS = {"cpu": ("cpu.CpuSweep.track_gbps", "cpu.MemoryCopy.track_copy_gbps"),
          "gpu": ("gpu.GpuSweep.track_gbps", "gpu.MemoryCopy.track_copy_gbps")}

#: how each machine's results were made (the performance page names it)
COMMANDS = {
    "cpu": "asv run --machine {machine} --launch-method forkserver --bench '^cpu\\.' <commit>^!",
    "gpu": "tools/asv_gpu_prepare.sh <commit>, then tools/asv_gpu.sh on the GPU host",
}

#: (benchmark, implementation, peers) rows of the headline table; missing ones are left out
HEADLINES = {
    "cpu": [
        ("cpu.CpuScan.track_gbps", "numba/auto", ["numpy/chunked"]),
        ("cpu.CpuEma.time_scan", "numba/auto", ["scipy.lfilter", "pandas.ewm"]),
        ("cpu.CpuGae.time_scan", "numba/auto", ["numpy/chunked", "jax.associative_scan"]),
        ("cpu.CpuDense.time_dense", "numba/sequential", ["numba/cyclic_reduction", "numpy/prefix"]),
    ],
    "gpu": [
        ("gpu.GpuScan.track_gbps", "cupy/auto", ["numba_cuda/blelloch"]),
        ("gpu.GpuEma.time_scan", "cupy/auto", ["cupyx.lfilter", "jax.associative_scan"]),
        ("gpu.GpuGae.time_scan", "cupy/auto", ["jax.associative_scan"]),
        ("gpu.GpuDenseTarget.time_dense", "cupy/auto", ["jax.associative_scan"]),
    ],
}

WORKLOADS = {
    "cpu.CpuScan": "full-size `a`",
    "cpu.CpuEma": "EMA, scalar `a`, one row of 2**24 float64",
    "cpu.CpuGae": "GAE, reverse with 1% resets, (256, 16384) float32 along axis 0",
    "cpu.CpuDense": "dense, (1, 1024, n, n) float64",
    "gpu.GpuScan": "full-size `a`",
    "gpu.GpuEma": "EMA, scalar `a`, 1e8 float64",
    "gpu.GpuGae": "GAE, reverse with 1% resets, (256, 16384) float32 along axis 0",
    "gpu.GpuDenseTarget": "dense float32, batch x T x n",
}


def _strip(v):
    return v[1:-1] if isinstance(v, str) and len(v) > 1 and v[0] == v[-1] == "'" else v


def load(results_dir):
    """{machine: (machine_info, [Results newest commit first])} from asv's results directory."""
    from asv.results import Results

    out = {}
    for machine in sorted(os.listdir(results_dir)):
        mdir = os.path.join(results_dir, machine)
        if not os.path.isdir(mdir) or not os.path.exists(os.path.join(mdir, "machine.json")):
            continue
        with open(os.path.join(mdir, "machine.json")) as f:
            info = json.load(f)
        runs = [Results.load(os.path.join(mdir, name)) for name in os.listdir(mdir)
                if name.endswith(".json") and name != "machine.json"]
        runs.sort(key=lambda r: r.date, reverse=True)
        out[machine] = (info, runs)
    return out


def kind_of(machine):
    return "gpu" if machine.startswith("gpu") else "cpu"


def table_of(run, key):
    """[(params tuple, value)] of one benchmark in one run (values None where skipped)."""
    if key not in run.get_all_result_keys():
        return []
    params = run.get_result_params(key)
    values = run.get_result_value(key, params)
    combos = list(itertools.product(*params)) if params else [()]
    return [(tuple(_strip(p) for p in c), v) for c, v in zip(combos, values)]


def finite(v):
    return v is not None and isinstance(v, (int, float)) and math.isfinite(v)


def measured(run, key=None):
    """When ``key`` (default: anything) ran: asv's started_at, not the commit's date."""
    ms = run.started_at.get(key, run.date) if key else max(run.started_at.values(), default=run.date)
    return datetime.datetime.fromtimestamp(ms / 1000, datetime.timezone.utc)


def device_of(machine, info):
    return info.get("cpu") or machine


def newest_measured(runs):
    """The newest commit's run that holds any finite value."""
    for run in runs:
        if any(finite(v) for key in run.get_all_result_keys() for _, v in table_of(run, key)):
            return run
    return None


def copy_bandwidth(run, kind):
    vals = [v for _, v in table_of(run, SWEEPS[kind][1]) if finite(v)]
    return vals[0] if vals else None


def plot_machine(machine, info, runs, outdir):
    """Draw the sweep of the newest measured commit; return the PNG's path or None."""
    kind = kind_of(machine)
    sweep, _ = SWEEPS[kind]
    run = newest_measured(runs)
    # What a plain call does (``auto``) against the peers; forced methods belong to the dashboard.
    rows = [(p, v) for p, v in table_of(run, sweep)
            if finite(v) and ("/" not in p[0] or p[0].endswith("/auto"))] if run else []
    if not rows:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    copy_bw = copy_bandwidth(run, kind)
    fig, ax = plt.subplots(figsize=(8, 4.8))
    lines = {}
    for p, v in rows:
        *label, n = p
        lines.setdefault(" ".join(str(x) for x in label), []).append((int(n), v))
    for label, pts in sorted(lines.items(), key=lambda kv: (not kv[0].startswith(("numba", "cupy")), kv[0])):
        pts.sort()
        mine = label.startswith(("numpy/", "numba/", "cupy/", "numba_cuda/"))
        ax.plot([n for n, _ in pts], [v for _, v in pts], marker="o", linewidth=2.4 if mine else 1.4,
                linestyle="-" if mine else ":", label=("scanarray " if mine else "") + label)
    if copy_bw:
        ax.axhline(copy_bw, color="k", linestyle="--", label=f"copy {copy_bw:.0f} GB/s")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("elements (float64, one row; 'full': an array a, 'scalar': a Python float)"
                  if kind == "cpu" else "elements (float32, rows of 4096 steps, full-size a)")
    ax.set_ylabel("effective GB/s (a, b read + h written)")
    best = max((copy_bandwidth(r, kind) or 0 for r in runs), default=0)
    busy = (f"\nbusy machine: copy at {100 * copy_bw / best:.0f}% of its best ({best:.0f} GB/s)"
            if copy_bw and best and copy_bw < 0.75 * best else "")
    ax.set_title(f"{device_of(machine, info)} ({machine}), commit {run.commit_hash[:8]}, "
                 f"measured {measured(run, sweep):%Y-%m-%d}{busy}", fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, loc="best", ncol=2)
    fig.tight_layout()
    path = os.path.join(outdir, f"bandwidth_{machine}.png")
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def fmt(v, unit):
    if not finite(v):
        return "n/a"
    if unit == "s":
        return f"{v * 1e3:.3g} ms" if v >= 1e-3 else f"{v * 1e6:.3g} µs"
    return f"{v:.3g} GB/s"


def headline_rows(run, kind):
    """Markdown rows: workload | scanarray | peers."""
    rows = []
    copy_bw = copy_bandwidth(run, kind)
    for key, impl, peers in HEADLINES[kind]:
        unit = "GB/s" if ".track_gbps" in key else "s"
        cls = key.rsplit(".", 1)[0]
        data = {}
        for p, v in table_of(run, key):
            data.setdefault(p[1:], {})[p[0]] = v
        for rest, by_impl in data.items():
            mine = by_impl.get(impl)
            if not finite(mine):
                continue
            cell = fmt(mine, unit)
            if unit == "GB/s" and copy_bw:
                cell += f" ({100 * mine / copy_bw:.0f}% of the copy)"
            others = []
            for peer in peers:
                pv = by_impl.get(peer)
                if finite(pv):
                    ratio = pv / mine if unit == "s" else mine / pv
                    others.append(f"`{peer}` {fmt(pv, unit)} ({ratio:.2g})")
            what = WORKLOADS.get(cls, cls)
            if rest:
                what += ", " + ", ".join(str(x) for x in rest)
            rows.append(f"| {what} | `{impl}` {cell} | {'; '.join(others) or ''} |")
    return rows


def figure_markdown(machine, runs, figure):
    kind = kind_of(machine)
    if figure:
        return f"![Bandwidth against size on {machine}](/_generated/{os.path.basename(figure)})\n"
    run = newest_measured(runs)
    newest = f"its newest measured commit ({run.commit_hash[:8]})" if run else "it"
    return (f"*No current figure for {machine}: {newest} has no bandwidth sweep "
            f"(`{SWEEPS[kind][0]}`), and an older sweep would show older kernels.*\n")


def load_note(runs, run, kind):
    """A sentence when ``run``'s copy bandwidth is far below the machine's best: a busy machine.

    The copy runs in the same process as the scans, so a low copy figure means that other jobs
    shared the memory bus and cores, and the scans' figures are low by at least as much.
    """
    best = max((copy_bandwidth(r, kind) or 0 for r in runs), default=0)
    mine = copy_bandwidth(run, kind)
    if not mine or not best or mine >= 0.75 * best:
        return ""
    return (f"**This run shared a busy machine**: its copy bandwidth, {mine:.3g} GB/s, is "
            f"{100 * mine / best:.0f}% of the best this machine has measured ({best:.3g} GB/s), so "
            "scanarray's figures here are low, its multi-core paths (one long row, EMA) most of all; "
            "compare figures within one run. ")


def table_markdown(machine, info, runs):
    kind = kind_of(machine)
    run = newest_measured(runs)
    rows = headline_rows(run, kind) if run else []
    if not rows:
        return f"*No headline results for {machine} yet.*\n"
    copy_bw = copy_bandwidth(run, kind)
    cmd = COMMANDS[kind].format(machine=machine)
    return "\n".join([load_note(runs, run, kind) + 
        f"Machine: {device_of(machine, info)} (asv machine `{machine}`); commit "
        f"{run.commit_hash[:8]}, measured {measured(run):%Y-%m-%d}; command: `{cmd}`. "
        + (f"Copy bandwidth in the same run: {copy_bw:.3g} GB/s. " if copy_bw else "")
        + "Times are asv's medians; GB/s from the best of a few calls; `auto` is what a plain "
        "call picks.", "",
        "| workload | scanarray | others in the same run (scanarray's speed-up) |", "|---|---|---|", *rows, ""])


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--results", default="benchmarks/results/asv")
    ap.add_argument("--out", default="docs/_generated", help="folder of the PNGs")
    ap.add_argument("--markdown", default=None, help="folder of perf_<machine>.md")
    ap.add_argument("--table", action="store_true", help="print the Markdown of each machine")
    ap.add_argument("--quiet", action="store_true")
    args = ap.parse_args(argv)
    machines = load(args.results)
    if not machines:
        sys.exit(f"plot_benchmarks: no machines under {args.results}")
    os.makedirs(args.out, exist_ok=True)
    for machine, (info, runs) in machines.items():
        figure = plot_machine(machine, info, runs, args.out)
        if not args.quiet:
            print(f"{machine}: " + (f"wrote {figure}" if figure else "no current sweep, no figure"))
        texts = {f"figure_{machine}.md": figure_markdown(machine, runs, figure),
                 f"table_{machine}.md": table_markdown(machine, info, runs)}
        for name, text in texts.items():
            if args.markdown:
                os.makedirs(args.markdown, exist_ok=True)
                path = os.path.join(args.markdown, name)
                if not os.path.exists(path) or open(path).read() != text:
                    with open(path, "w") as f:
                        f.write(text)
            if args.table:
                print(f"### {name}\n\n{text}")


if __name__ == "__main__":
    main()
