import os

import numpy as np
import pytest
from hypothesis import HealthCheck, settings

# CI draws the same examples every run; locally hypothesis explores.
settings.register_profile(
    "ci", derandomize=True, deadline=None, max_examples=30,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.differing_executors],
)
settings.register_profile(
    "dev", deadline=None, max_examples=40,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.differing_executors],
)
settings.load_profile("ci" if os.environ.get("CI") else "dev")


@pytest.fixture
def rng(request):
    """Fresh random inputs for every test; the seed is printed when a test fails."""
    seed = np.random.SeedSequence().entropy % 2**32
    request.node.user_properties.append(("seed", seed))
    print(f"seed={seed}")
    return np.random.default_rng(seed)


@pytest.fixture(autouse=True)
def _doctest_namespace(doctest_namespace):
    doctest_namespace["np"] = np


@pytest.fixture
def count_full_path(monkeypatch):
    """``count(module, **options)``: counts calls that go through ``module.linear_recurrence`` (a
    CuPy backend driver, the full path, called with ``options``) rather than the launches bound to
    their signature, and starts with no bound calls; returns the one-element list of the count."""

    def count(module, **options):
        import cupy

        import scanarray
        from scanarray import _bound

        # the public function binds calls once it knows CuPy's array type: from its first call on
        scanarray.linear_recurrence(cupy.ones(2, np.float32), cupy.ones(2, np.float32), backend="cupy")
        monkeypatch.setattr(_bound.CALLS, "table", {})
        calls = [0]
        real = module.linear_recurrence

        def counting(p):
            calls[0] += 1
            return real(p, **options)

        monkeypatch.setattr(module, "linear_recurrence", counting)
        return calls

    return count


@pytest.fixture
def on_streams():
    """``run(call, n, reps)``: ``n`` threads, each on a CuPy stream of its own, start together
    and make ``call(i)`` ``reps`` times; returns each thread's last result (any exception is
    re-raised here)."""

    def run(call, n, reps):
        import threading

        import cupy

        cupy.cuda.Device().synchronize()
        out, errors = [None] * n, []
        barrier = threading.Barrier(n)

        def work(i):
            try:
                with cupy.cuda.Stream(non_blocking=True) as s:
                    barrier.wait()
                    for _ in range(reps):
                        out[i] = call(i)
                    s.synchronize()
            except Exception as e:  # noqa: BLE001 - reported below
                errors.append(e)

        threads = [threading.Thread(target=work, args=(i,)) for i in range(n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors, errors
        return out

    return run


def _cuda_device() -> bool:
    """Whether a CUDA device is usable here (CuPy's or torch's view of it; no import fails)."""
    try:
        import cupy

        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:
        pass
    try:
        import torch

        return torch.cuda.is_available()
    except Exception:
        return False


def pytest_collection_modifyitems(config, items):
    """Tests marked ``gpu`` (pyproject.toml: "needs a CUDA device") skip where there is none, also
    where CuPy or torch is installed without a device."""
    gpu_items = [item for item in items if item.get_closest_marker("gpu") is not None]
    if gpu_items and not _cuda_device():
        skip = pytest.mark.skip(reason="no CUDA device")
        for item in gpu_items:
            item.add_marker(skip)
