"""Tests of pytest_jetmem.cuda.launch (no GPU): signatures read from source, argument packing, launch shapes."""

from __future__ import annotations

import ctypes
import threading
import time
from typing import Any

import numpy as np
import pytest

from pytest_jetmem import kernels
from pytest_jetmem.cuda.compiler import CompiledKernel
from pytest_jetmem.cuda.launch import (
    POINTER,
    Kernel,
    LaunchArgumentError,
    LaunchTarget,
    Param,
    _dim3,
    pack_args,
    parse_signature,
)

I32, U32, I64, U64, F32, F64 = (np.dtype(t) for t in ("int32", "uint32", "int64", "uint64", "float32", "float64"))


def sig(*pairs: tuple[str, Any]) -> list[Param]:
    return [Param(n, k) for n, k in pairs]


# --- parse_signature on the bundled kernels -----------------------------------------------------------------

BUNDLED = {
    "conv2d_replicate": sig(
        ("in", POINTER), ("out", POINTER), ("k", POINTER), ("width", I32), ("height", I32), ("kw", I32), ("kh", I32)
    ),
    "matmul_tiled": sig(("A", POINTER), ("B", POINTER), ("C", POINTER), ("m", I32), ("n", I32), ("k", I32)),
    "stream_read": sig(("in", POINTER), ("n", U64), ("sink", POINTER)),
    "stream_write": sig(("out", POINTER), ("n", U64), ("scale", F32)),
    "stream_copy": sig(("in", POINTER), ("out", POINTER), ("n", U64)),
    "stream_fill": sig(("out", POINTER), ("n", U64), ("value", F32)),
    "coherence_check_write": sig(
        ("buf", POINTER), ("n", U64), ("expect_seed", U32), ("new_seed", U32), ("check", I32), ("result", POINTER)
    ),
    "jetmem_block_stream": sig(("flag", POINTER), ("timeout_ns", U64)),
    "jetmem_machine_add": sig(
        ("buf", POINTER), ("start", U64), ("step", I64), ("count", U64), ("value", U32), ("delay_ns", U64)
    ),
    "jetmem_machine_compare": sig(
        ("buf", POINTER), ("expected", POINTER), ("start", U64), ("step", I64), ("count", U64), ("result", POINTER)
    ),
    "jetmem_machine_wait": sig(("delay_ns", U64)),
    **{
        f"jetmem_probe_{w}": sig(
            ("buf", POINTER),
            ("start", U64),
            ("step", I64),
            ("count", U64),
            ("expect_seed", U32),
            ("new_seed", U32),
            ("flags", I32),
            ("delay_ns", U64),
            ("result", POINTER),
        )
        for w in ("u32", "u8")
    },
}


def test_every_bundled_kernel_has_an_expected_signature() -> None:
    assert sorted(BUNDLED) == kernels.names()


@pytest.mark.parametrize("name", sorted(BUNDLED))
def test_bundled_signatures(name: str) -> None:
    assert parse_signature(kernels.sources()[name], name) == BUNDLED[name]


# --- parse_signature on tricky declarations -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        pytest.param(
            'extern "C" __global__ void f(float* a, /* int b, */ int n // trailing, comment\n) {}',
            sig(("a", POINTER), ("n", I32)),
            id="comments-inside",
        ),
        pytest.param(
            '// extern "C" __global__ void f(double x)\n/* __global__ void f(char c) */\n'
            'extern "C" __global__ void f(int x) {}',
            sig(("x", I32)),
            id="commented-out-earlier-declaration",
        ),
        pytest.param(
            "__global__ void f(const float* __restrict__ in, float *__restrict__ out, const volatile int* flag) {}",
            sig(("in", POINTER), ("out", POINTER), ("flag", POINTER)),
            id="restrict-const-volatile",
        ),
        pytest.param(
            "__global__ void f(unsigned long long n, size_t m, long long s, unsigned u, const unsigned int c) {}",
            sig(("n", U64), ("m", U64), ("s", np.dtype("int64")), ("u", U32), ("c", U32)),
            id="integer-spellings",
        ),
        pytest.param(
            "__global__ void f(double d, __half h, bool b, unsigned char uc, signed char sc, short s) {}",
            sig(
                ("d", F64),
                ("h", np.dtype("float16")),
                ("b", np.dtype("bool")),
                ("uc", np.dtype("uint8")),
                ("sc", np.dtype("int8")),
                ("s", np.dtype("int16")),
            ),
            id="other-scalars",
        ),
        pytest.param(
            "__global__ void\nf(\n    int   a,\n    float\n    b\n)\n{}",
            sig(("a", I32), ("b", F32)),
            id="multi-line",
        ),
        pytest.param(
            'extern "C" __global__ void __launch_bounds__(256) f(int n) {}',
            sig(("n", I32)),
            id="launch-bounds",
        ),
        pytest.param("__global__ void f(int n = 4) {}", sig(("n", I32)), id="default-argument"),
        pytest.param(
            "__global__ void my_f(double x) {}\n__global__ void f_2(char c) {}\n__global__ void f(int n) {}",
            sig(("n", I32)),
            id="names-that-contain-the-name",
        ),
        pytest.param("__global__ void f(MyStruct s, float* p) {}", sig(("s", None), ("p", POINTER)), id="unknown-type"),
        pytest.param("__global__ void f() {}", [], id="no-params"),
        pytest.param("__global__ void f( ) {}", [], id="blank-params"),
        pytest.param("__global__ void f(void) {}", [], id="void"),
    ],
)
def test_parse_signature_tricky(source: str, expected: list[Param]) -> None:
    assert parse_signature(source, "f") == expected


def test_parameters_of_template_types_are_unknown_not_the_whole_signature() -> None:
    assert parse_signature("__global__ void f(Pair<int, float> p, int n) {}", "f") == sig(("p", None), ("n", I32))
    assert parse_signature("__global__ void f(int n, const Vec<float>* v) {}", "f") == sig(("n", I32), ("v", POINTER))


def test_template_kernel_by_name_expression_takes_the_instantiated_types() -> None:
    src = "template <typename T>\n__global__ void scale(T* x, T a, int n) {}"
    assert parse_signature(src, "scale<float>") == sig(("x", POINTER), ("a", F32), ("n", I32))
    assert parse_signature(src, "scale<double>") == sig(("x", POINTER), ("a", F64), ("n", I32))
    assert parse_signature(src, "scale< unsigned int >") == sig(("x", POINTER), ("a", U32), ("n", I32))
    # by its bare name: T is unknown, the rest is read
    assert parse_signature(src, "scale") == sig(("x", POINTER), ("a", None), ("n", I32))


@pytest.mark.parametrize(
    ("source", "name", "expected"),
    [
        pytest.param(
            "template <typename T>\n__global__ void saxpy(T* y, const T* x, T a, size_t n) {}",
            "saxpy<float>",
            sig(("y", POINTER), ("x", POINTER), ("a", F32), ("n", U64)),
            id="the-issue-saxpy",
        ),
        pytest.param(
            "template <class T, typename U = int, int N = 4>\n__global__ void k(T t, U u, int n) {}",
            "k<__half>",
            sig(("t", np.dtype("float16")), ("u", I32), ("n", I32)),
            id="defaults",
        ),
        pytest.param(
            "template <typename T, int N>\n__global__ void k(T t, int n) {}",
            "k<unsigned long long, 8>",
            sig(("t", U64), ("n", I32)),
            id="non-type-argument",
        ),
        pytest.param(
            "namespace ns { template <typename T> __global__ void k(const T* __restrict__ x, T v) {} }",
            "ns::k<int>",
            sig(("x", POINTER), ("v", I32)),
            id="namespace",
        ),
        pytest.param(
            "struct S { int a; };\ntemplate <typename T>\n__global__ void k(T t, float f) {}",
            "k<S>",
            sig(("t", None), ("f", F32)),
            id="struct-argument",
        ),
        pytest.param(
            "template <typename Tin, typename T>\n__global__ void k(Tin a, T b) {}",
            "k<double, float>",
            sig(("a", F64), ("b", F32)),
            id="names-containing-each-other",
        ),
    ],
)
def test_template_signatures(source: str, name: str, expected: list[Param]) -> None:
    assert parse_signature(source, name) == expected


@pytest.mark.parametrize(
    ("source", "name"),
    [
        pytest.param("template <typename... Ts>\n__global__ void k(Ts... ts) {}", "k<int>", id="pack"),
        pytest.param("template <typename T>\n__global__ void k(T t) {}", "k<int, float>", id="too-many-arguments"),
        pytest.param("template <typename T, typename U>\n__global__ void k(T t, U u) {}", "k<int>", id="too-few"),
        pytest.param("__global__ void k(int t) {}", "k<int>", id="not-a-template"),
        pytest.param("template <typename T>\n__global__ void k(T t) {}", "k<int", id="unbalanced"),
    ],
)
def test_template_signatures_that_cannot_be_read_give_none(source: str, name: str) -> None:
    assert parse_signature(source, name) is None


def test_template_launch_packs_plain_python_numbers() -> None:
    src = "template <typename T>\n__global__ void saxpy(T* y, const T* x, T a, size_t n) {}"
    holders, _ = pack_args(
        "saxpy<float>", (FakeDeviceArray(0x10), FakeDeviceArray(0x20), 2.0, 1000), parse_signature(src, "saxpy<float>")
    )
    assert [h.dtype for h in holders] == [U64, U64, F32, U64]
    with pytest.raises(LaunchArgumentError, match=r"argument 3 \(n\): -1 is out of range for uint64"):
        pack_args("saxpy<float>", (0x10, 0x20, 2.0, -1), parse_signature(src, "saxpy<float>"))


def test_missing_kernel_gives_none() -> None:
    assert parse_signature("__global__ void g(int n) {}", "f") is None
    assert parse_signature("__device__ void f(int n) {}", "f") is None
    assert parse_signature("", "f") is None


def test_unnamed_parameters() -> None:
    got = parse_signature("__global__ void f(unsigned short, signed char, float) {}", "f")
    assert got is not None
    assert [p.kind for p in got] == [np.dtype("uint16"), np.dtype("int8"), F32]


def test_param_describe() -> None:
    assert Param("x", POINTER).describe() == "x (a pointer)"
    assert Param("n", I32).describe() == "n (int32)"
    assert "numpy scalar" in Param("a", None).describe()


# --- pack_args ----------------------------------------------------------------------------------------------


class FakeDeviceArray:
    """Anything with a CUDA array interface (CuPy, Numba, PyTorch, a jetmem Buffer)."""

    def __init__(self, ptr: int) -> None:
        self.__cuda_array_interface__ = {"data": (ptr, False), "shape": (4,), "typestr": "<f4", "version": 3}


def read_back(address: int, dtype: np.dtype) -> Any:
    """The value of ``dtype`` stored at ``address`` (what cuLaunchKernel will copy)."""
    raw = (ctypes.c_char * dtype.itemsize).from_address(address)
    return np.frombuffer(bytes(raw), dtype=dtype)[0]


WRITE = BUNDLED["stream_write"]  # (out pointer, n uint64, scale float32)


def test_pack_args_addresses_point_at_the_values() -> None:
    params = BUNDLED["coherence_check_write"]
    buf, result = FakeDeviceArray(0x7F00_1234_5600), FakeDeviceArray(0x7F00_0000_0100)
    holders, addresses = pack_args("coherence_check_write", (buf, 1000, 0xFFFFFFFF, np.uint32(7), -3, result), params)
    assert addresses.dtype == np.uint64 and addresses.shape == (6,)
    assert [h.dtype for h in holders] == [U64, U64, U32, U32, I32, U64]
    expected = [0x7F00_1234_5600, 1000, 0xFFFFFFFF, 7, -3, 0x7F00_0000_0100]
    assert [read_back(int(a), h.dtype) for a, h in zip(addresses, holders, strict=True)] == expected
    # the array handed to cuLaunchKernel is these addresses, contiguous
    table = (ctypes.c_uint64 * 6).from_address(addresses.ctypes.data)
    assert list(table) == [int(a) for a in addresses]
    assert len(set(table)) == 6  # each argument has its own storage


def test_pack_args_float_values_read_back() -> None:
    _holders, addresses = pack_args("stream_write", (FakeDeviceArray(256), np.uint64(5), 2.5), WRITE)
    assert read_back(int(addresses[2]), F32) == np.float32(2.5)
    assert ctypes.c_float.from_address(int(addresses[2])).value == 2.5
    assert ctypes.c_uint64.from_address(int(addresses[1])).value == 5
    assert ctypes.c_uint64.from_address(int(addresses[0])).value == 256


def test_device_buffers_pass_their_pointer() -> None:
    holders, _ = pack_args("k", (FakeDeviceArray(0xDEAD_BEE0),), [Param("p", POINTER)])
    assert holders[0].dtype == U64 and int(holders[0][0]) == 0xDEAD_BEE0
    holders, _ = pack_args("k", (FakeDeviceArray(0),), None)  # no signature: still a pointer
    assert holders[0].dtype == U64 and int(holders[0][0]) == 0


def test_device_buffer_for_a_scalar_parameter_is_rejected() -> None:
    with pytest.raises(LaunchArgumentError, match=r"kernel 'stream_write' argument 1 \(n\): expected uint64"):
        pack_args("stream_write", (FakeDeviceArray(256), FakeDeviceArray(512), 1.0), WRITE)


def test_python_int_for_a_pointer_is_a_raw_address() -> None:
    holders, _ = pack_args("k", (0x1000,), [Param("p", POINTER)])
    assert holders[0].dtype == U64 and int(holders[0][0]) == 0x1000


@pytest.mark.parametrize("address", [-1, 2**64])
def test_out_of_range_raw_address_is_rejected(address: int) -> None:
    with pytest.raises(LaunchArgumentError, match="out of range"):
        pack_args("k", (address,), [Param("p", POINTER)])


def test_numpy_scalars_must_match_the_declared_type() -> None:
    with pytest.raises(LaunchArgumentError) as info:
        pack_args("stream_write", (FakeDeviceArray(256), np.uint64(4), np.float64(2.0)), WRITE)
    msg = str(info.value)
    assert "'stream_write'" in msg and "argument 2" in msg and "(scale)" in msg
    assert "expected float32" in msg and "float64" in msg

    with pytest.raises(LaunchArgumentError, match=r"argument 1 \(n\): expected uint64, got numpy int32"):
        pack_args("stream_write", (FakeDeviceArray(256), np.int32(4), np.float32(2.0)), WRITE)


def test_numpy_scalar_for_a_pointer_is_rejected() -> None:
    with pytest.raises(LaunchArgumentError, match=r"argument 0 \(out\): expected a pointer"):
        pack_args("stream_write", (np.uint64(256), np.uint64(4), np.float32(2.0)), WRITE)


def test_matching_numpy_scalars_keep_their_type() -> None:
    holders, _ = pack_args("stream_write", (FakeDeviceArray(256), np.uint64(4), np.float32(0.1)), WRITE)
    assert holders[1].dtype == U64 and holders[2].dtype == F32
    assert holders[2][0] == np.float32(0.1)


def test_numpy_scalars_without_a_signature_keep_their_own_type() -> None:
    holders, addresses = pack_args("k", (np.int16(-2), np.float64(0.25), np.uint8(255)), None)
    assert [h.dtype for h in holders] == [np.dtype("int16"), F64, np.dtype("uint8")]
    assert read_back(int(addresses[1]), F64) == 0.25
    assert read_back(int(addresses[0]), np.dtype("int16")) == -2


def test_python_numbers_take_the_declared_type() -> None:
    holders, _ = pack_args("stream_write", (FakeDeviceArray(256), 7, 3), WRITE)
    assert holders[1].dtype == U64 and int(holders[1][0]) == 7
    assert holders[2].dtype == F32 and holders[2][0] == 3.0  # an int for a float parameter is fine
    holders, _ = pack_args("f", (1.5,), [Param("d", F64)])
    assert holders[0].dtype == F64 and holders[0][0] == 1.5


def test_python_float_for_an_int_parameter_is_rejected() -> None:
    with pytest.raises(LaunchArgumentError, match=r"kernel 'stream_write' argument 1 \(n\): expected an integer"):
        pack_args("stream_write", (FakeDeviceArray(256), 4.0, 1.0), WRITE)


@pytest.mark.parametrize(
    ("dtype", "ok", "bad"),
    [
        ("int32", (-(2**31), 2**31 - 1), (-(2**31) - 1, 2**31)),
        ("uint32", (0, 2**32 - 1), (-1, 2**32)),
        ("uint64", (0, 2**64 - 1), (-1, 2**64)),
        ("int8", (-128, 127), (-129, 128)),
    ],
)
def test_python_int_range_is_checked(dtype: str, ok: tuple[int, int], bad: tuple[int, int]) -> None:
    param = [Param("v", np.dtype(dtype))]
    for value in ok:
        _holders, addresses = pack_args("k", (value,), param)
        assert read_back(int(addresses[0]), np.dtype(dtype)) == value
    for value in bad:
        with pytest.raises(LaunchArgumentError, match=rf"argument 0 \(v\): {value} is out of range for {dtype}"):
            pack_args("k", (value,), param)


def test_python_float_out_of_float32_range_is_rejected() -> None:
    with pytest.raises(LaunchArgumentError), np.errstate(over="ignore"):
        pack_args("k", (1e300,), [Param("x", F32)])


@pytest.mark.parametrize("value", [3, 2.5, True])
def test_python_number_without_a_known_type_is_rejected(value: Any) -> None:
    for params in (None, [Param("a", None)]):
        with pytest.raises(LaunchArgumentError) as info:
            pack_args("scale<float>", (value,), params)
        msg = str(info.value)
        assert "'scale<float>'" in msg and "argument 0" in msg
        assert "np.int32" in msg and "np.float32" in msg


def test_wrong_argument_count_names_the_parameters() -> None:
    with pytest.raises(LaunchArgumentError) as info:
        pack_args("stream_write", (FakeDeviceArray(256), 4), WRITE)
    msg = str(info.value)
    assert "'stream_write' takes 3 arguments" in msg and "got 2" in msg
    assert "out (a pointer)" in msg and "n (uint64)" in msg and "scale (float32)" in msg
    with pytest.raises(LaunchArgumentError, match="takes 0 arguments"):
        pack_args("f", (1,), [])


def test_unsupported_objects_are_rejected() -> None:
    for value in ("text", [1, 2], np.zeros(3, np.float32), None):
        with pytest.raises(LaunchArgumentError, match="cannot pass"):
            pack_args("k", (value,), None)


def test_launch_argument_error_is_a_type_error() -> None:
    assert issubclass(LaunchArgumentError, TypeError)


def test_no_arguments() -> None:
    holders, addresses = pack_args("f", (), [])
    assert holders == [] and addresses.shape == (0,) and addresses.dtype == np.uint64


# --- grid and block -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (4, (4, 1, 1)),
        (np.int64(7), (7, 1, 1)),
        ((16,), (16, 1, 1)),
        ((16, 16), (16, 16, 1)),
        ([2, 3, 4], (2, 3, 4)),
        ((np.int32(8), 2), (8, 2, 1)),
        (2**31 - 1, (2**31 - 1, 1, 1)),
    ],
)
def test_dim3_normalises(value: Any, expected: tuple[int, int, int]) -> None:
    got = _dim3(value, "grid")
    assert got == expected
    assert all(type(d) is int for d in got)


@pytest.mark.parametrize("value", [0, -1, (), (1, 2, 3, 4), (4, 0), (1, -2, 1), [0]])
def test_dim3_rejects(value: Any) -> None:
    with pytest.raises(ValueError, match=r"kernel 'k' block: expected 1 to 3 positive integers"):
        _dim3(value, "kernel 'k' block")


@pytest.mark.parametrize("value", [2.5, (2.5,), "4", (True,), (4, 1.0)])
def test_dim3_rejects_non_integers(value: Any) -> None:
    with pytest.raises(ValueError):
        _dim3(value, "grid")


# --- Kernel.launch with a recording owner (no GPU) ----------------------------------------------------------


class RecordingDriver:
    def __init__(self) -> None:
        self.launches: list[dict[str, Any]] = []

    def launch_kernel(self, func: Any, grid: Any, block: Any, shared_mem: int, stream: Any, params_ptr: int) -> None:
        # read the arguments back through the pointer table while the holders are alive, as the driver would
        table = (ctypes.c_uint64 * 3).from_address(params_ptr)
        values = (
            ctypes.c_uint64.from_address(table[0]).value,
            ctypes.c_uint64.from_address(table[1]).value,
            ctypes.c_float.from_address(table[2]).value,
        )
        self.launches.append(
            {"func": func, "grid": grid, "block": block, "shared": shared_mem, "stream": stream, "values": values}
        )


class RecordingOwner:
    def __init__(self) -> None:
        self.drv = RecordingDriver()
        self.stream = "jetmem-stream"
        self.before = 0
        self.loaded: list[str] = []
        self.observers = ["someone to tell"]  # before_launch is called only while a context has observers

    def launch_target(self, compiled: CompiledKernel) -> LaunchTarget:
        drv = self.drv
        return LaunchTarget(self.function(compiled), self.stream, drv.launch_kernel, self.observers, self.before_launch)

    def function(self, compiled: CompiledKernel) -> str:
        self.loaded.append(compiled.symbol)
        return f"func:{compiled.symbol}"

    def before_launch(self, stream: object = None) -> None:
        self.before += 1


def make_kernel(owner: RecordingOwner, from_cache: bool = False) -> Kernel:
    compiled = CompiledKernel("stream_write", "stream_write", "sm_87", (), (13, 0), b"\x7fELF", "", "key", from_cache)
    return Kernel(owner, compiled, WRITE)  # type: ignore[arg-type]


def test_kernel_launch_passes_shapes_and_arguments() -> None:
    owner = RecordingOwner()
    k = make_kernel(owner)
    k.launch(grid=8, block=(256,), args=(FakeDeviceArray(0x4000), 1024, np.float32(0.5)))
    k.launch(grid=(2, 3), block=[16, 16], args=(FakeDeviceArray(0x8000), np.uint64(9), 2), shared_mem=64, stream="s2")
    first, second = owner.drv.launches
    assert first == {
        "func": "func:stream_write",
        "grid": (8, 1, 1),
        "block": (256, 1, 1),
        "shared": 0,
        "stream": "jetmem-stream",
        "values": (0x4000, 1024, 0.5),
    }
    assert (second["grid"], second["block"], second["shared"], second["stream"]) == ((2, 3, 1), (16, 16, 1), 64, "s2")
    assert second["values"] == (0x8000, 9, 2.0)
    assert owner.before == 2 and owner.loaded == ["stream_write"]  # the function is looked up once per kernel


def test_kernel_launch_validates_before_launching() -> None:
    owner = RecordingOwner()
    k = make_kernel(owner)
    args = (FakeDeviceArray(0x4000), 1024, np.float32(0.5))
    with pytest.raises(ValueError, match="kernel 'stream_write' grid"):
        k.launch(grid=0, block=256, args=args)
    with pytest.raises(ValueError, match="kernel 'stream_write' block"):
        k.launch(grid=1, block=(1, 1, 1, 1), args=args)
    with pytest.raises(LaunchArgumentError, match="takes 3 arguments"):
        k.launch(grid=1, block=256, args=args[:2])
    with pytest.raises(LaunchArgumentError, match=r"\(scale\): expected float32"):
        k.launch(grid=1, block=256, args=(*args[:2], np.float64(0.5)))
    assert owner.drv.launches == [] and owner.before == 0


def test_kernel_repr_and_name() -> None:
    owner = RecordingOwner()
    assert make_kernel(owner).name == "stream_write"
    assert repr(make_kernel(owner)) == "<Kernel stream_write sm_87>"
    assert repr(make_kernel(owner, from_cache=True)) == "<Kernel stream_write sm_87 cached>"


# --- the per-kernel argument layout (launch cost, issue 10) -------------------------------------------------

MIXED = sig(
    ("p", POINTER),
    ("f", F32),
    ("d", F64),
    ("h", np.dtype("float16")),
    ("b", np.dtype("bool")),
    ("c", np.dtype("int8")),
    ("uc", np.dtype("uint8")),
    ("s", np.dtype("int16")),
    ("i", I32),
    ("u", U32),
    ("q", I64),
    ("n", U64),
)


class BytesDriver:
    """Reads each argument's bytes through the address table at launch time, as cuLaunchKernel copies them."""

    def __init__(self, params: list[Param]) -> None:
        self.sizes = [8 if p.kind == POINTER else np.dtype(p.kind).itemsize for p in params]  # type: ignore[arg-type]
        self.launches: list[tuple[list[bytes], int]] = []

    def launch_kernel(self, func: Any, grid: Any, block: Any, shared_mem: int, stream: Any, params_ptr: int) -> None:
        table = (ctypes.c_uint64 * len(self.sizes)).from_address(params_ptr)
        self.launches.append(([ctypes.string_at(table[i], n) for i, n in enumerate(self.sizes)], params_ptr))


class BytesOwner(RecordingOwner):
    def __init__(self, params: list[Param]) -> None:
        super().__init__()
        self.drv = BytesDriver(params)  # type: ignore[assignment]


def mixed_kernel(params: list[Param] = MIXED) -> tuple[Kernel, BytesOwner]:
    owner = BytesOwner(params)
    compiled = CompiledKernel("mixed", "mixed", "sm_87", (), (13, 0), b"\x7fELF", "", "key", False)
    return Kernel(owner, compiled, params), owner  # type: ignore[arg-type]


MIXED_ARGS = [
    (FakeDeviceArray(0xABC0), 1.5, -2.25, 0.5, True, -5, 200, -300, -70000, 3_000_000_000, -(2**40), 2**63),
    (0x1000, np.float32(3.0), 7, 65504.0, np.bool_(False), np.int8(1), 0, 0, np.int32(-1), 0, 2**62, np.uint64(5)),
    (FakeDeviceArray(2**64 - 1), float("inf"), float("nan"), -0.0, False, 127, 255, 32767, 2**31 - 1, 2**32 - 1, 0, 0),
]


@pytest.mark.parametrize("args", MIXED_ARGS, ids=["python-values", "numpy-and-raw-address", "limits"])
def test_the_layout_packs_the_same_bytes_as_the_checked_path(args: tuple[Any, ...]) -> None:
    k, owner = mixed_kernel()
    k.launch(1, 1, args)
    holders, _ = pack_args("mixed", args, MIXED)
    got, _ = owner.drv.launches[0]
    assert got == [h.tobytes() for h in holders]


def test_one_argument_table_per_thread_reused_by_every_launch() -> None:
    k, owner = mixed_kernel()
    k.launch(1, 1, MIXED_ARGS[0])
    k.launch(2, 2, MIXED_ARGS[1])
    (first, ptr1), (second, ptr2) = owner.drv.launches
    assert ptr1 == ptr2  # one table, reused
    assert first != second  # and refilled each launch
    thread = threading.Thread(target=k.launch, args=(1, 1, MIXED_ARGS[2]))
    thread.start()
    thread.join()
    third, ptr3 = owner.drv.launches[2]
    assert ptr3 != ptr1  # another thread packs into a table of its own (no lock on the hot path)
    assert third == [h.tobytes() for h in pack_args("mixed", MIXED_ARGS[2], MIXED)[0]]


def test_threads_launching_one_kernel_each_pass_their_own_arguments() -> None:
    """Many threads launch the same kernel at once: every launch carries the arguments of its own call."""
    params = sig(("p", POINTER), ("n", I64))
    seen: list[tuple[bytes, bytes]] = []
    lock = threading.Lock()

    class Reading(BytesDriver):
        def launch_kernel(self, func: Any, grid: Any, block: Any, shared_mem: int, stream: Any, ptr: int) -> None:
            time.sleep(0)  # let another thread run between packing and reading
            table = (ctypes.c_uint64 * 2).from_address(ptr)
            with lock:
                seen.append((ctypes.string_at(table[0], 8), ctypes.string_at(table[1], 8)))

    k, owner = mixed_kernel(params)
    owner.drv = Reading(params)  # type: ignore[assignment]

    def run(t: int) -> None:
        for i in range(200):
            k.launch(1, 1, (0x1000 * t + i, t * 1000 + i))

    threads = [threading.Thread(target=run, args=(t,)) for t in range(1, 5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    pairs = [(int.from_bytes(a, "little"), int.from_bytes(b, "little")) for a, b in seen]
    assert len(pairs) == 800
    assert all(p == 0x1000 * (n // 1000) + n % 1000 for p, n in pairs)


@pytest.mark.parametrize(
    ("index", "value", "message"),
    [
        (8, 2**31, r"argument 8 \(i\): 2147483648 is out of range for int32"),
        (1, 1e40, r"argument 1 \(f\): 1e\+40 is out of range for float32"),
        (3, 1e6, r"argument 3 \(h\): 1000000.0 is out of range for float16"),
        (1, np.float64(1.0), r"argument 1 \(f\): expected float32, got numpy float64"),
        (4, 5, r"argument 4 \(b\): expected a bool \(or 0/1\), got 5"),
        (11, -1, r"argument 11 \(n\): -1 is out of range for uint64"),
        (8, 1.5, r"argument 8 \(i\): expected an integer \(int32\), got float 1.5"),
        (0, 2**64, r"argument 0 \(p\): 18446744073709551616 is out of range for a pointer"),
        (0, np.int64(4), r"argument 0 \(p\): expected a pointer"),
        (9, FakeDeviceArray(0x10), r"argument 9 \(u\): expected uint32, got a device buffer"),
        (2, "1.0", r"argument 2 \(d\): cannot pass str"),
    ],
)
def test_a_bad_argument_names_its_parameter_and_launches_nothing(index: int, value: Any, message: str) -> None:
    k, owner = mixed_kernel()
    args = list(MIXED_ARGS[0])
    args[index] = value
    with pytest.raises(LaunchArgumentError, match=message):
        k.launch(1, 1, args)
    assert owner.drv.launches == [] and owner.before == 0


def test_bool_parameter_accepts_zero_and_one_through_the_checked_path() -> None:
    k, owner = mixed_kernel()
    args = list(MIXED_ARGS[0])
    args[4] = 1
    k.launch(1, 1, args)
    assert owner.drv.launches[0][0][4] == b"\x01"


def test_wrong_count_names_the_parameters() -> None:
    k, owner = mixed_kernel()
    with pytest.raises(LaunchArgumentError, match=r"takes 12 arguments \(p \(a pointer\), f \(float32\)"):
        k.launch(1, 1, MIXED_ARGS[0][:-1])
    assert owner.drv.launches == []


def test_a_signature_with_an_unknown_type_packs_through_the_checked_path() -> None:
    params = sig(("s", None), ("n", I32))
    k, owner = mixed_kernel(params)
    owner.drv.sizes = [8, 4]
    k.launch(1, 1, (np.uint64(7), 3))
    got, _ = owner.drv.launches[0]
    assert got == [np.uint64(7).tobytes(), np.int32(3).tobytes()]


def test_launch_shapes_are_checked_once_per_tuple() -> None:
    k, owner = mixed_kernel()
    k.launch((4, 2), [8, 8], MIXED_ARGS[0])
    k.launch((4, 2), (8, 8), MIXED_ARGS[0])
    assert k._shapes == {(4, 2): (4, 2, 1), (8, 8): (8, 8, 1)}  # the list was checked, not kept
    with pytest.raises(ValueError, match="kernel 'mixed' grid"):
        k.launch((4, 0), 1, MIXED_ARGS[0])
    assert (4, 0) not in k._shapes and len(owner.drv.launches) == 2
    with pytest.raises(ValueError, match="kernel 'mixed' grid"):
        k.launch((4.0, 2), 1, MIXED_ARGS[0])  # equal to a shape checked before, but not integers
    assert len(owner.drv.launches) == 2
