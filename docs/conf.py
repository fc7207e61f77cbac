"""Sphinx configuration of scanarray's documentation site.

Build from a checkout (the command README.md documents; CI runs it in tools/ci_docs.sh)::

    python -m pip install ".[docs]" && python -m sphinx -W -b html docs docs/_build/html

Markdown pages through MyST, the API reference from the numpydoc docstrings,
the tutorials (``examples/*.py``) executed at every build by sphinx-gallery.
Two things are generated at build time into ``docs/_generated/`` (git-ignored)
so that they are never stale: the API page's list, from the ``__all__`` of
each public module that exists, and the performance figures and CPU table,
from the committed asv results (``tools/plot_benchmarks.py``).
"""

from __future__ import annotations

import importlib
import inspect
import os
import sys
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)  # the checkout's scanarray, whatever is installed
sys.path.insert(0, os.path.join(ROOT, "tools"))
sys.path.insert(0, os.path.join(HERE, "sphinxext"))

import scanarray  # noqa: E402

project = "scanarray"
author = "the scanarray developers"
copyright = "the scanarray developers"
release = version = scanarray.__version__

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.mathjax",
    "numpydoc",
    "sphinx_gallery.gen_gallery",
]

source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
root_doc = "index"

# The lab notebooks below belong to other pages' owners, who replace them with guide pages
# (docs/guide/); until they are deleted they stay out of the site.
LEGACY_PAGES = ["gpu.md", "dense.md", "matmulscan.md", "numba.md", "dask.md"]
exclude_patterns = ["_build", "_generated", "screenshots", "Thumbs.db", ".DS_Store", *LEGACY_PAGES]

myst_enable_extensions = ["colon_fence", "dollarmath", "deflist", "substitution"]

#: Links to guide pages that may not exist in every checkout: a page links to
#: ``{{ gpu_guide }}``, which becomes a link once docs/guide/gpu.md exists and plain text before.
OPTIONAL_PAGES = {
    "contract_guide": ("guide/contract", "the contract page"),
    "cpu_guide": ("guide/cpu", "the CPU guide"),
    "gpu_guide": ("guide/gpu", "the GPU guide"),
    "dense_guide": ("guide/dense", "the dense guide"),
    "dask_guide": ("guide/dask", "the Dask guide"),
    "frameworks_guide": ("guide/frameworks", "the PyTorch and JAX guide"),
    "ewm_guide": ("guide/ewm", "the EWM guide"),
    "signal_guide": ("guide/signal", "the signal guide"),
    "rl_guide": ("guide/rl", "the RL guide"),
    "architecture": ("architecture", "the architecture page"),
}
myst_substitutions = {
    key: (f"{{doc}}`{title} </{doc}>`" if os.path.exists(os.path.join(HERE, doc + ".md"))
          else f"{title} (not yet written)")
    for key, (doc, title) in OPTIONAL_PAGES.items()
}
myst_heading_anchors = 3

# numpydoc: the docstrings are the API reference; no autosummary tables of class members.
numpydoc_show_class_members = False
numpydoc_xref_param_type = False
autodoc_typehints = "none"
autosummary_generate = False

html_theme = "pydata_sphinx_theme"
html_title = "scanarray"
html_static_path = []
html_theme_options = {
    "navigation_with_keys": False,
    "show_toc_level": 2,
    "footer_start": ["copyright"],
    "footer_end": ["sphinx-version"],
    "secondary_sidebar_items": ["page-toc"],
}
html_sidebars = {"index": [], "performance": []}
html_show_sourcelink = False

# ------------------------------------------------------------ sphinx-gallery
sphinx_gallery_conf = {
    "examples_dirs": os.path.join(ROOT, "examples"),
    "gallery_dirs": "tutorials",
    "filename_pattern": r".*\.py$",  # every example runs at every build
    "abort_on_example_error": True,
    "only_warn_on_example_error": False,
    "download_all_examples": False,
    "remove_config_comments": True,
    "matplotlib_animations": False,
    "image_scrapers": ("matplotlib",),
    "show_memory": False,
    "plot_gallery": "True",
    "write_computation_times": False,
    "within_subsection_order": "gallery_order.TutorialOrder",  # docs/sphinxext/
}
# Examples run on the CPU only; no backend may grab a GPU at a docs build.
os.environ.setdefault("MPLBACKEND", "Agg")

# ------------------------------------------------ generated: the API listing
GENERATED = os.path.join(HERE, "_generated")
os.makedirs(GENERATED, exist_ok=True)

#: public modules whose ``__all__`` the API page documents; missing ones are skipped.
PUBLIC_MODULES = [
    ("scanarray", "The core"),
    ("scanarray.signal", "Filters (scanarray.signal)"),
    ("scanarray.rl", "Reinforcement learning (scanarray.rl)"),
]


def _directive(obj):
    if inspect.isclass(obj):
        return "autoclass"
    if callable(obj):
        return "autofunction"
    return "autodata"


def write_api_listing(path=os.path.join(GENERATED, "api_listing.rst")):
    """The API page's body: one section per public module that exists, each name in ``__all__``."""
    lines = []
    for modname, title in PUBLIC_MODULES:
        try:
            mod = importlib.import_module(modname)
        except ImportError:
            continue  # that module has not landed (or is not importable here): no section
        names = list(getattr(mod, "__all__", []))
        if not names:
            continue
        lines += [title, "-" * len(title), "", f".. currentmodule:: {modname}", "",
                  ".. autosummary::", ""]
        lines += [f"   {name}" for name in names]
        lines.append("")
        for name in names:
            lines += [f".. {_directive(getattr(mod, name))}:: {name}", ""]
    _write_if_changed(path, "\n".join(lines) + "\n")


def write_performance_material():
    """Figures and the CPU table from the committed asv results, into ``_generated/``."""
    import plot_benchmarks

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        plot_benchmarks.main(["--results", os.path.join(ROOT, "benchmarks", "results", "asv"),
                              "--out", GENERATED, "--markdown", GENERATED, "--quiet"])


#: the user guide's order; pages not listed follow by name, listed pages that do not exist are skipped
GUIDE_ORDER = ["recurrence", "contract", "backends", "cpu", "gpu", "dense", "dask", "frameworks",
               "ewm", "signal", "rl", "migration"]


def _write_if_changed(path, text):
    old = open(path).read() if os.path.exists(path) else None
    if old != text:  # rewrite only on change, so Sphinx does not rebuild for nothing
        with open(path, "w") as f:
            f.write(text)


def write_toctrees():
    """The home page's guide and contributing toctrees, from the pages that exist.

    A toctree entry or glob that matches no page is a warning (an error under ``-W``), and the
    guide pages arrive one by one; so the toctrees list what is there, in ``GUIDE_ORDER``.
    """
    pages = sorted(f[:-3] for f in os.listdir(os.path.join(HERE, "guide")) if f.endswith(".md"))
    ordered = [p for p in GUIDE_ORDER if p in pages] + [p for p in pages if p not in GUIDE_ORDER]
    text = "```{toctree}\n:hidden:\n:caption: User guide\n\n"
    text += "".join(f"guide/{p}\n" for p in ordered if p != "recurrence") + "```\n"
    _write_if_changed(os.path.join(GENERATED, "toctree_guide.md"), text)
    contributing = [p for p in ("architecture",) if os.path.exists(os.path.join(HERE, p + ".md"))]
    text = ""
    if contributing:
        text = "```{toctree}\n:hidden:\n:caption: Contributing\n\n" + "\n".join(contributing) + "\n```\n"
    _write_if_changed(os.path.join(GENERATED, "toctree_contributing.md"), text)


write_toctrees()
write_api_listing()
write_performance_material()
