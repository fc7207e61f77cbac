"""The packed kernel launch of the CuPy backends (``_cupy_common.PackedLauncher``), without a GPU.

A bound launch packs its template once and only the changing arguments per call; the parameters
``cuLaunchKernel`` reads (through its array of pointers into the launcher's buffer) must hold
exactly what packing every argument would give. A fake ``cupy.cuda.driver`` records them at each
launch.
"""

import ctypes
import struct
import sys
import types

import numpy as np
import pytest

from scanarray.backends.cupy._common import PackedLauncher


@pytest.fixture
def launches(monkeypatch):
    """The ``kernelParams`` addresses of the launches made through the fake driver (see
    :func:`_launched`)."""
    seen = []

    def launch_kernel(fptr, gx, gy, gz, bx, by, bz, smem, stream, params, extra):
        assert extra == 0
        seen.append(params)

    driver = types.SimpleNamespace(launchKernel=launch_kernel)
    cuda = types.ModuleType("cupy.cuda")
    cuda.driver = driver
    cuda.get_current_stream = lambda: types.SimpleNamespace(ptr=99)
    cupy = types.ModuleType("cupy")
    cupy.cuda = cuda
    monkeypatch.setitem(sys.modules, "cupy", cupy)
    monkeypatch.setitem(sys.modules, "cupy.cuda", cuda)
    return seen


def _launcher(sample):
    fn = types.SimpleNamespace(kernel=types.SimpleNamespace(ptr=1234))
    p = PackedLauncher.create(fn, sample)
    assert p is not None
    return p


def _template(rng, tail):
    """A scan kernel's argument list: 4 pointers and a flag, then mixed scalars, then ``tail``."""
    head = [0, 0, 0, 0, np.int32(0)]
    mid = [np.int64(rng.integers(-2**40, 2**40)) for _ in range(4)] + [np.int32(rng.integers(0, 9))] * 3
    mid += [np.int32(rng.integers(0, 4))] + [np.int64(rng.integers(1, 2**33)) for _ in range(16)]
    return head + mid + tail


def _launched(p, params):
    """The bytes of the parameters a launch of ``p`` passed, checking that its pointers lie at the
    parameters' offsets in one buffer."""
    ptrs = list((ctypes.c_uint64 * len(p._offsets)).from_address(params))
    assert [x - ptrs[0] for x in ptrs] == [int(o) for o in p._offsets]
    return ctypes.string_at(ptrs[0], p._size)


def _packed(p, args):
    buf = np.zeros(p._size, np.uint8)
    p._pack(buf, 0, *args)
    return buf.tobytes()


def _ptrs(rng):
    return [int(x) for x in rng.integers(1, 2**47, 4)]


def test_plain_bound_launch_packs_every_argument(launches, rng):
    template = _template(rng, [np.int64(7)])
    p = _launcher(template)
    go = p.bind(5, 128, template)
    for _ in range(3):
        pa, pb, po, ph = _ptrs(rng)
        go(99, pa, pb, po, ph)
        assert _launched(p, launches[-1]) == _packed(p, [pa, pb, po, ph, np.int32(1)] + template[5:])
        go(99, pa, pb, po, None)
        assert _launched(p, launches[-1]) == _packed(p, [pa, pb, po, pb, np.int32(0)] + template[5:])


def test_bound_launch_replaces_b_at(launches, rng):
    template = _template(rng, [0, np.uint32(0), np.int64(3)])
    at = len(template) - 3
    p = _launcher(template)
    go = p.bind(5, 128, template, b_at=at)
    for _ in range(3):
        pa, pb, po, _ = _ptrs(rng)
        go(99, pa, pb, po, None)
        want = [pa, pb, po, pb, np.int32(0)] + template[5:]
        want[at] = pb
        assert _launched(p, launches[-1]) == _packed(p, want)


class _Workspace:
    def __init__(self):
        self.ptr, self.epoch = 2**40 + 256, 1

    def launching(self):
        return self

    def __enter__(self):
        return self

    def __exit__(self, exc_type, *exc):
        if exc_type is None:
            self.epoch += 1
        return False


def test_lookback_bound_launch_packs_the_workspace(launches, rng):
    template = _template(rng, [0, np.uint32(0), np.int64(11)])
    p = _launcher(template)
    ws = _Workspace()
    go = p.bind(40, 128, template, workspace=lambda stream_ptr: ws)
    for i in range(3):
        pa, pb, po, ph = _ptrs(rng)
        go(99, pa, pb, po, ph if i % 2 else None)
        want = [pa, pb, po, ph if i % 2 else pb, np.int32(i % 2)] + template[5:-3]
        want += [ws.ptr, np.uint32(1 + i), template[-1]]
        assert _launched(p, launches[-1]) == _packed(p, want)
    assert ws.epoch == 4


def test_buffer_layout_aligns_each_parameter():
    """Each parameter at a multiple of its size, as the kernel's parameter list lays it out."""
    sample = [0, np.int32(1), np.int64(2), np.int32(3), np.uint32(4), np.float64(5.0), np.float32(6.0), 0]
    p = _launcher(sample)
    assert p._size == 56 and list(p._offsets) == [0, 8, 16, 24, 28, 32, 40, 48]
    got = _packed(p, sample)
    assert struct.unpack_from("<q", got, 16)[0] == 2 and struct.unpack_from("<d", got, 32)[0] == 5.0
    assert struct.unpack_from("<I", got, 28)[0] == 4 and struct.unpack_from("<Q", got, 48)[0] == 0


def test_parameters_ending_short_of_8_bytes(launches):
    """A parameter list ending 4 bytes past a multiple of 8 (the dense sequential kernels') is
    launched with exactly its own bytes: the driver takes each parameter from its pointer."""
    sample = [0, np.int64(3), np.int32(5)]
    p = _launcher(sample)
    assert p._size == 20
    p.launch(sys.modules["cupy"], 2, 32, sample)
    assert _launched(p, launches[-1]) == struct.pack("<QqI", 0, 3, 5)


def test_role_bound_launch_packs_roles_anywhere(launches, rng):
    """A dense launch's roles (pointers, scratch offsets, a workspace's pointer and epoch) sit at
    any positions; each call packs them from its values and leaves the rest as the template."""
    template = [np.int64(rng.integers(1, 2**33)), 0, np.int32(7), 0, np.uint64(0), np.int32(3), 0,
                np.uint32(0), np.float32(0.5), 0]
    roles = ((1, 0, 0), (3, 4, 4096), (4, 6, 0), (6, 2, 0), (7, 7, 0), (9, 4, 0))
    p = _launcher(template)
    go = p.bind_roles(9, 64, 1024, template, roles)
    for _ in range(3):
        vals = _ptrs(rng) + [int(rng.integers(1, 2**47)), 2**40, int(rng.integers(0, 2**60)), 17]
        go(99, vals)
        want = list(template)
        for i, slot, offset in roles:
            want[i] = vals[slot] + offset
        assert _launched(p, launches[-1]) == _packed(p, want)
