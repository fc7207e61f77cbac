"""Open the published asv dashboard in headless Chromium and assert that its graphs show data points.

Usage (after ``asv publish``)::

    python tools/render_dashboard.py [--html .asv/html] [--deps .asv/www-deps] [--screenshot dashboard.png]

What it checks, in order:

1. the published JSON: ``index.json`` lists benchmarks, the summary graph
   files (``graphs/summary/*.json``) hold finite (revision, value) points, and
   every machine has data for at least ``--min-revisions`` commits;
2. the pages, rendered by Chromium (Debian's ``chromium``) from a local HTTP
   server: the summary grid and one benchmark's history graph. asv draws with
   flot on ``<canvas>``, so the DOM alone shows no points. A copy of the site
   gets a small probe script that, once the plots exist, reads each flot plot's
   series (``$(el).data("plot").getData()``) and the painted pixels of the
   ``canvas.flot-base`` layers, and writes the counts into a hidden
   ``<pre id="asv-check">``; ``--dump-dom`` after a virtual-time budget returns
   it. The check fails unless both pages show plots with finite points and
   painted canvases;
3. a screenshot of the history graph (``--screenshot``), for the docs.

Exit status 0 on success; a message naming what is missing otherwise.
"""

from __future__ import annotations

import argparse
import glob
import json
import math
import os
import re
import shutil
import sys

from _headless import chromium, find_chromium, finish, served_copy

PROBE = r"""
<script>
/* render_dashboard.py probe: count what flot has plotted (not part of asv). */
(function () {
  function report() {
    var out = {plots: 0, series: 0, points: 0, canvases: 0, painted: 0, url: location.href};
    $("canvas.flot-base").each(function () {
      out.canvases++;
      try {
        var d = this.getContext("2d").getImageData(0, 0, this.width, this.height).data;
        for (var i = 3; i < d.length; i += 4) { if (d[i] !== 0) { out.painted++; } }
      } catch (e) { out.error = String(e); }
    });
    $("div").each(function () {
      var p = $(this).data("plot");
      if (!p) { return; }
      out.plots++;
      $.each(p.getData(), function (_, s) {
        out.series++;
        $.each(s.data || [], function (_, pt) {
          if (pt && pt[1] !== null && isFinite(pt[1])) { out.points++; }
        });
      });
    });
    var pre = document.getElementById("asv-check");
    if (!pre) {
      pre = document.createElement("pre");
      pre.id = "asv-check";
      pre.style.display = "none";
      document.body.appendChild(pre);
    }
    pre.textContent = JSON.stringify(out);
  }
  setInterval(report, 250);
})();
</script>
"""

def is_baseline(name):
    """A machine's copy bandwidth (``*.MemoryCopy.*``): the ceiling, not a scanarray benchmark."""
    return ".MemoryCopy." in name


def check_json(html):
    """Benchmarks in index.json and the number of finite points in the summary graphs."""
    with open(os.path.join(html, "index.json")) as f:
        index = json.load(f)
    benchmarks = index.get("benchmarks", {})
    if not benchmarks:
        sys.exit("render_dashboard: index.json lists no benchmarks")
    points = {}
    for path in glob.glob(os.path.join(html, "graphs", "summary", "*.json")):
        with open(path) as f:
            data = json.load(f)
        n = sum(1 for pt in data if pt and pt[1] is not None and math.isfinite(pt[1]))
        points[os.path.basename(path)[:-5]] = n
    total = sum(points.values())
    if total == 0:
        sys.exit("render_dashboard: the summary graphs hold no finite points")
    return index, points


def machine_history(html):
    """{machine: number of revisions with at least one finite value} from the per-machine graphs."""
    revs = {}
    for path in glob.glob(os.path.join(html, "graphs", "**", "*.json"), recursive=True):
        m = re.search(r"/machine-([^/]+)/", path)
        if not m:
            continue
        with open(path) as f:
            data = json.load(f)
        seen = revs.setdefault(m.group(1), set())
        for item in data if isinstance(data, list) else []:
            if not (isinstance(item, list) and len(item) == 2):
                continue  # not a (revision, value) series
            rev, val = item
            vals = val if isinstance(val, list) else [val]
            if any(v is not None and isinstance(v, (int, float)) and math.isfinite(v) for v in vals):
                seen.add(rev)
    return {k: len(v) for k, v in revs.items()}


def probe(browser, url, budget_ms, window):
    proc = chromium(browser, url, ["--dump-dom", f"--window-size={window}"], budget_ms)
    m = re.search(r'<pre id="asv-check"[^>]*>(.*?)</pre>', proc.stdout, re.S)
    if not m:
        sys.exit(f"render_dashboard: no probe output from {url} (rc {proc.returncode})\n"
                 f"{proc.stderr[-2000:]}")
    return json.loads(m.group(1).replace("&quot;", '"').replace("&amp;", "&"))


def use_local_deps(text, deps, site):
    """Point the page's CDN ``<script>``/``<link>`` URLs at local copies (tools/asv_www_deps.sh).

    Each URL maps by its last path component to a file in ``deps``; the
    subresource-integrity attributes go, since the copies come from npm.
    """
    have = set(os.listdir(deps))
    missing = []

    def swap(m):
        name = m.group(3).rsplit("/", 1)[-1]
        if name not in have:
            missing.append(m.group(3))
            return m.group(0)
        shutil.copy(os.path.join(deps, name), os.path.join(site, name))
        return f'{m.group(1)}{m.group(2)}="{name}"'

    text = re.sub(r'(<(?:script|link)\b[^>]*?\b)(src|href)="(https?://[^"]+)"', swap, text)
    text = re.sub(r'\s(integrity|crossorigin|referrerpolicy)="[^"]*"', "", text)
    if missing:
        sys.exit(f"render_dashboard: no local copy of {missing} in {deps}")
    return text


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--html", default=".asv/html", help="asv publish output (html_dir)")
    ap.add_argument("--bench", default=None, help="benchmark whose history graph to open "
                    "(default: cpu.CpuScan.track_gbps, else the scanarray benchmark with the most points)")
    ap.add_argument("--screenshot", default=None, help="PNG of the history graph page")
    ap.add_argument("--query", default="y-axis-scale=log",
                    help="asv graph-page options after '?' (e.g. 'y-axis-scale=log&x-axis-scale=date')")
    ap.add_argument("--deps", default=None, help="local copies of the page's CDN files "
                    "(tools/asv_www_deps.sh); without it Chromium must reach the CDNs")
    ap.add_argument("--window", default="1400,900")
    ap.add_argument("--budget-ms", type=int, default=20000, help="Chromium virtual-time budget")
    ap.add_argument("--min-points", type=int, default=2,
                    help="finite points the history graph must show (2: a line, not a dot)")
    ap.add_argument("--min-revisions", type=int, default=2,
                    help="commits every machine must have data for (a history, not a dot)")
    args = ap.parse_args(argv)

    index, points = check_json(args.html)
    # The grid shows benchmarks in index.json's order; its first tile, and the graph this check
    # opens, must be scanarray's, not a machine's copy baseline (MemoryCopy, sorted last).
    first = next(iter(index["benchmarks"]))
    if is_baseline(first):
        sys.exit(f"render_dashboard: the dashboard opens on the baseline {first}, not a scanarray benchmark")
    ours = {k: v for k, v in points.items() if not is_baseline(k)}
    bench = args.bench or ("cpu.CpuScan.track_gbps" if ours.get("cpu.CpuScan.track_gbps")
                           else max(ours, key=lambda k: (ours[k], k)))
    if bench not in index["benchmarks"]:
        sys.exit(f"render_dashboard: {bench} is not in index.json")
    print(f"first tile of the grid: {first}; history graph checked: {bench}")
    print(f"json: {len(index['benchmarks'])} benchmarks, {sum(points.values())} summary points, "
          f"{len(index.get('revision_to_hash', {}))} revisions, machines {sorted(index['params'].get('machine', []))}", flush=True)

    history = machine_history(args.html)
    print("revisions with data per machine: " + ", ".join(f"{k} {v}" for k, v in sorted(history.items())),
          flush=True)
    short = {k: v for k, v in history.items() if v < args.min_revisions}
    if not history or short:
        sys.exit(f"render_dashboard: machines with fewer than {args.min_revisions} measured commits: "
                 f"{short or 'no machine at all'}")

    browser = find_chromium("render_dashboard")
    failures = []
    with served_copy(args.html, "asv-site-") as (site, root):
        page = os.path.join(site, "index.html")
        with open(page) as f:
            text = f.read()
        if args.deps:
            text = use_local_deps(text, args.deps, site)
        with open(page, "w") as f:
            f.write(text.replace("</body>", PROBE + "</body>"))
        base = root + "index.html"
        graph = f"{base}#{bench}" + (f"?{args.query}" if args.query else "")
        for name, url, window in (("summary grid", base, "1400,4000"),
                                  (f"graph {bench}", graph, args.window)):
            got = probe(browser, url, args.budget_ms, window)
            print(f"{name}: {got['plots']} plots, {got['series']} series, {got['points']} points, "
                  f"{got['canvases']} canvases, {got['painted']} painted pixels")
            need = args.min_points if name.startswith("graph") else 1
            if got["plots"] < 1 or got["points"] < need or got["painted"] < 1:
                failures.append(f"{name}: {got}")
        if args.screenshot:
            shot = os.path.abspath(args.screenshot)
            os.makedirs(os.path.dirname(shot), exist_ok=True)
            proc = chromium(browser, graph, [f"--screenshot={shot}", f"--window-size={args.window}"],
                            args.budget_ms)
            if os.path.exists(shot):
                print(f"screenshot: {args.screenshot}")
            else:
                failures.append(f"no screenshot written (rc {proc.returncode}): {proc.stderr[-500:]}")
    finish("render_dashboard", failures, "graphs without data points")


if __name__ == "__main__":
    main()
