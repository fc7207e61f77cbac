"""Open the built documentation site in headless Chromium and check that its key pages render.

Usage (after ``python -m sphinx -W -b html docs docs/_build/html``)::

    python tools/check_site.py [--html docs/_build/html] [--screenshots DIR]

Checks, each failing the run with a message naming what is missing:

1. the API page shows the signature of ``scanarray.linear_recurrence`` (read from the DOM that
   Chromium built, ``--dump-dom``);
2. on the API page, a tutorial and the performance page, every ``<img>`` of a figure was
   *rendered*: a probe script added to a copy of each page reports, once the page has loaded,
   each image's ``naturalWidth`` and ``naturalHeight`` as the browser decoded them; the check also
   opens the PNG files themselves (non-empty, a valid PNG of sensible size);
3. screenshots of the home page, a tutorial and the performance page (``--screenshots DIR``) are
   not blank: a fair share of their pixels is not background, with several distinct colours.

Pages are served from a local HTTP server on 127.0.0.1; nothing else is reached. Chromium is
Debian's ``chromium`` (``apt-get install -y chromium``).
"""

from __future__ import annotations

import argparse
import html
import json
import os
import re
import tempfile

from _headless import chromium, find_chromium, finish, served_copy

PROBE = r"""
<script>
/* tools/check_site.py probe: what the browser actually decoded (not part of the site). */
(function () {
  function report() {
    var imgs = [];
    document.querySelectorAll("img").forEach(function (im) {
      imgs.push({src: im.getAttribute("src"), complete: im.complete,
                 w: im.naturalWidth, h: im.naturalHeight});
    });
    var pre = document.getElementById("site-check") || document.body.appendChild(
      Object.assign(document.createElement("pre"), {id: "site-check", hidden: true}));
    pre.textContent = JSON.stringify({imgs: imgs, title: document.title});
  }
  window.addEventListener("load", report);
  setInterval(report, 250);
})();
</script>
"""

#: page -> (images that must render, as substrings of their src; text the DOM must hold)
PAGES = {
    "api.html": ([], ["linear_recurrence", "a, b, axis=-1, chunk=64", "available_backends"]),
    "tutorials/plot_smoothing.html": (["sphx_glr_plot_smoothing_001.png"], ["Smoothing a noisy signal"]),
    "tutorials/plot_returns_gae.html": (["sphx_glr_plot_returns_gae_001.png"], ["GAE"]),
    "tutorials/plot_torch_linear_rnn.html": (["sphx_glr_plot_torch_linear_rnn_001.png"], ["Training a linear RNN"]),
    "performance.html": (["bandwidth_cpu-intel-xeon-2core.png"], ["copy bandwidth"]),
    "index.html": ([], ["pip install", "linear_recurrence(a, b, axis=-1, chunk=64", "On a GPU",
                        "How fast", "PyTorch and JAX, with gradients"]),
}
#: page -> screenshot file name
SCREENSHOTS = {"index.html": "home.png", "tutorials/plot_smoothing.html": "tutorial.png",
               "performance.html": "performance.png"}


def png_size(path):
    """(width, height) of a PNG file, or None when it is not one."""
    with open(path, "rb") as f:
        head = f.read(24)
    if len(head) < 24 or head[:8] != b"\x89PNG\r\n\x1a\n":
        return None
    return int.from_bytes(head[16:20], "big"), int.from_bytes(head[20:24], "big")


def not_blank(path, min_share=0.02, min_colours=8):
    """(ok, description): a screenshot with enough non-background pixels and colours."""
    from PIL import Image

    im = Image.open(path).convert("RGB")
    small = im.resize((im.width // 4 or 1, im.height // 4 or 1))
    pixels = list(small.get_flattened_data() if hasattr(small, "get_flattened_data") else small.getdata())
    background = max(set(pixels[:: max(1, len(pixels) // 5000)]), key=pixels.count)
    share = sum(1 for p in pixels if sum(abs(x - y) for x, y in zip(p, background)) > 60) / len(pixels)
    colours = len(set(pixels))
    ok = share >= min_share and colours >= min_colours
    return ok, f"{im.width}x{im.height}, {100 * share:.1f}% non-background pixels, {colours} colours"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--html", default="docs/_build/html")
    ap.add_argument("--screenshots", default=None, help="folder for the screenshots (default: a temporary one)")
    ap.add_argument("--window", default="1280,1400")
    args = ap.parse_args(argv)

    browser = find_chromium("check_site")
    failures = []
    shots = args.screenshots or tempfile.mkdtemp(prefix="site-shots-")
    os.makedirs(shots, exist_ok=True)
    with served_copy(args.html, "site-copy-") as (site, base):
        for page in PAGES:
            path = os.path.join(site, page)
            if not os.path.exists(path):
                failures.append(f"{page}: not built")
                continue
            with open(path, encoding="utf-8") as f:
                text = f.read()
            with open(path, "w", encoding="utf-8") as f:
                f.write(text.replace("</body>", PROBE + "</body>"))
        for page, (images, needles) in PAGES.items():
            if not os.path.exists(os.path.join(site, page)):
                continue
            proc = chromium(browser, base + page, ["--dump-dom", f"--window-size={args.window}"], 5000)
            dom = proc.stdout
            m = re.search(r'<pre id="site-check"[^>]*>(.*?)</pre>', dom, re.S)
            if not m:
                failures.append(f"{page}: no probe output (rc {proc.returncode}) {proc.stderr[-800:]}")
                continue
            probe = json.loads(html.unescape(m.group(1)))
            text = html.unescape(re.sub(r"<[^>]+>", "", dom))
            for needle in needles:
                if needle not in text:
                    failures.append(f"{page}: the rendered page does not show {needle!r}")
            for want in images:
                hits = [im for im in probe["imgs"] if want in (im["src"] or "")]
                if not hits:
                    failures.append(f"{page}: no <img> for {want}")
                    continue
                for im in hits:
                    file = os.path.normpath(os.path.join(os.path.dirname(os.path.join(args.html, page)),
                                                         im["src"].split("?")[0]))
                    size = png_size(file) if os.path.exists(file) else None
                    drawn = im["complete"] and im["w"] > 100 and im["h"] > 100
                    print(f"{page}: {im['src']}: rendered {im['w']}x{im['h']}, file "
                          f"{os.path.getsize(file) if os.path.exists(file) else 'missing'} bytes, PNG {size}")
                    if not drawn:
                        failures.append(f"{page}: {want} did not render ({im})")
                    if not size or os.path.getsize(file) < 2000:
                        failures.append(f"{page}: {file} is not a real PNG")
            print(f"{page}: {len(probe['imgs'])} images, title {probe['title']!r}, "
                  f"{len(needles)} texts checked")
        for page, name in SCREENSHOTS.items():
            out = os.path.abspath(os.path.join(shots, name))
            if os.path.exists(out):
                os.remove(out)
            proc = chromium(browser, base + page, [f"--screenshot={out}", f"--window-size={args.window}"], 5000)
            if not os.path.exists(out):
                failures.append(f"screenshot of {page} not written (rc {proc.returncode}): {proc.stderr[-500:]}")
                continue
            ok, what = not_blank(out)
            print(f"screenshot {out}: {what}")
            if not ok:
                failures.append(f"screenshot of {page} looks blank: {what}")
    finish("check_site", failures)


if __name__ == "__main__":
    main()
