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
