"""Changes to tunables advance ``_config.generation()``, which calls bound to a signature compare
(``_cupy_common.Binder``): attribute assignments on the modules holding tunables and item
assignments in their dicts, nested ones included, as tests and sweeps make them."""

import pytest

from scanarray import _config


def test_module_attribute_changes_count(monkeypatch):
    g = _config.generation()
    monkeypatch.setattr(_config, "SEQ_MAX_T", _config.SEQ_MAX_T + 1)
    assert _config.generation() == g + 1
    monkeypatch.undo()
    assert _config.generation() == g + 2


def test_dict_changes_count_nested_included(monkeypatch):
    g = _config.generation()
    monkeypatch.setitem(_config.CUPY_SCAN, "rows", {4: (32, 16, 1)})
    assert _config.generation() == g + 1
    # a dict put in is tracked too: changing it in place counts
    _config.CUPY_SCAN["rows"][8] = (32, 8, 1)
    assert _config.generation() == g + 2
    monkeypatch.setitem(_config.DENSE_STEP_US, 16, 1e-6)
    _config.CUPY_SCAN["rows"].update({16: (32, 4, 1)})
    del _config.CUPY_SCAN["rows"][16]
    assert _config.generation() == g + 5
    monkeypatch.undo()
    assert _config.generation() > g + 5
    assert _config.CUPY_SCAN["rows"][4] != (32, 16, 1) and _config.DENSE_STEP_US[16] != 1e-6


def test_reads_do_not_count():
    g = _config.generation()
    dict(_config.CUPY_SCAN)
    _ = _config.CUPY_SCAN["rows"][4], _config.SEQ_MAX_T, _config.DENSE_CHUNK_MMA_PER_MS.get(64)
    assert _config.generation() == g


@pytest.mark.parametrize("name", ["scanarray.backends.cupy._common", "scanarray.backends.cupy.scan",
                                  "scanarray.backends.cupy.dense"])
def test_backend_modules_are_tracked(name, monkeypatch):
    """The CuPy modules' own tunables (``PACKED_LAUNCH``, the dense kernels' shapes) count too
    (``_cupy_dense`` imports CuPy; the other two import without it)."""
    if name.endswith(".dense"):
        pytest.importorskip("cupy")
    import importlib

    mod = importlib.import_module(name)
    assert isinstance(mod, _config._TunableModule)
    g = _config.generation()
    monkeypatch.setattr(mod, "_changed_by_test", 1, raising=False)
    assert _config.generation() == g + 1
