"""Headless Chromium for the repository's page checks (tools/check_site.py, tools/render_dashboard.py).

A copy of a static site is served from 127.0.0.1 (so the checks may add probe scripts to its
pages without touching the original) and opened by Debian's ``chromium`` with a fresh profile.
"""

from __future__ import annotations

import contextlib
import functools
import http.server
import shutil
import subprocess
import sys
import tempfile
import threading

CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--no-first-run", "--hide-scrollbars",
                  "--disable-dev-shm-usage"]


def find_chromium(tool):
    for name in ("chromium", "chromium-browser", "google-chrome", "chrome"):
        path = shutil.which(name)
        if path:
            return path
    sys.exit(f"{tool}: no chromium on PATH (Debian: apt-get install -y chromium)")


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@contextlib.contextmanager
def served_copy(src, prefix):
    """Copy the site at ``src`` to a temporary folder and serve it: yields (folder, base URL)."""
    site = tempfile.mkdtemp(prefix=prefix)
    try:
        shutil.copytree(src, site, dirs_exist_ok=True)
        handler = functools.partial(_Quiet, directory=site)
        httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=httpd.serve_forever, daemon=True).start()
        try:
            yield site, f"http://127.0.0.1:{httpd.server_address[1]}/"
        finally:
            httpd.shutdown()
    finally:
        shutil.rmtree(site, ignore_errors=True)


def chromium(browser, url, extra, budget_ms, timeout=120):
    """Run Chromium on ``url`` with a fresh profile and ``extra`` flags (--dump-dom, --screenshot=...)."""
    profile = tempfile.mkdtemp(prefix="chromium-profile-")
    cmd = [browser, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", f"--virtual-time-budget={budget_ms}",
           *extra, url]
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    finally:
        shutil.rmtree(profile, ignore_errors=True)


def finish(tool, failures, what="FAILED"):
    """Exit non-zero listing ``failures``, or print that ``tool`` passed."""
    if failures:
        sys.exit(f"{tool}: {what}:\n  " + "\n  ".join(failures))
    print(f"{tool}: OK")
