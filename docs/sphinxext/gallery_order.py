"""The tutorials' order in the gallery: the quickstart first, then from simple to involved."""

ORDER = [
    "quickstart.py",
    "plot_smoothing.py",
    "plot_pandas_scipy_vocabulary.py",
    "plot_returns_gae.py",
    "plot_torch_linear_rnn.py",
    "plot_linear_dynamical_system.py",
    "plot_dask_out_of_core.py",
]


class TutorialOrder:
    """sphinx-gallery ``within_subsection_order``: listed files first, then the rest by name."""

    def __init__(self, src_dir):
        self.src_dir = src_dir

    def __call__(self, filename):
        return (ORDER.index(filename) if filename in ORDER else len(ORDER), filename)

    def __repr__(self):
        return "<TutorialOrder>"
