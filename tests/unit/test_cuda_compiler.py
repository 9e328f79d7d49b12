"""Tests of pytest_jetmem.cuda.compiler with the real NVRTC (no GPU needed): bundled kernels, the disk cache, errors."""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path
from typing import Any

import pytest

from pytest_jetmem import kernels
from pytest_jetmem.atomic import write_atomic
from pytest_jetmem.cuda import compiler, driver
from pytest_jetmem.cuda.compiler import CompiledKernel, KernelCache, cache_key, compile_kernel
from pytest_jetmem.errors import CompileError, CudaUnavailable

try:
    DRV = driver.CudaDriver()
    NVRTC = DRV.nvrtc_version()
except CudaUnavailable as exc:  # pragma: no cover - depends on the install
    pytest.skip(f"no NVRTC: {exc}", allow_module_level=True)

HEADERS = driver.find_cuda_headers()
SM72_REASON = "sm_72 needs the CUDA 12 NVRTC (pip install nvidia-cuda-nvrtc-cu12)"
ARCHS = [
    "sm_87",
    "sm_90",
    pytest.param("sm_72", marks=pytest.mark.skipif(NVRTC[0] != 12, reason=SM72_REASON)),
]

C_SRC = 'extern "C" __global__ void c_fn(int* x, int v) { x[threadIdx.x] = v; }\n'
TEMPLATE_SRC = """
template <typename T>
__global__ void scale(T* x, T a, int n)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] *= a;
}
"""
EM_CUDA = 190
STT_FUNC = 2
SHT_SYMTAB = 2


# --- helpers ------------------------------------------------------------------------------------------------


class CountingDriver:
    """The real driver object, with its NVRTC compiles counted (and the NVRTC version optionally overridden)."""

    def __init__(self, real: Any, version: tuple[int, int] | None = None) -> None:
        self._real = real
        self._version = version
        self.compiles: list[tuple[str, tuple[str, ...], tuple[str, ...]]] = []

    def nvrtc_version(self) -> tuple[int, int]:
        return self._version if self._version is not None else self._real.nvrtc_version()

    def nvrtc_compile(self, source: str, filename: str, options: Any, name_expressions: Any = ()) -> Any:
        self.compiles.append((filename, tuple(options), tuple(name_expressions)))
        return self._real.nvrtc_compile(source, filename, options, name_expressions)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)


class Untouchable:
    """A driver that fails the test if compile_kernel touches it at all."""

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"the driver was used ({name}) although the arguments were invalid")


def elf_sm(cubin: bytes) -> set[int]:
    """The SM number(s) the CUDA ELF header can encode: bits 8-15 (ABI v2, CUDA 12.8+) or bits 0-7 (older)."""
    (flags,) = struct.unpack_from("<I", cubin, 0x30)
    return {(flags >> 8) & 0xFF, flags & 0xFF}


def elf_functions(cubin: bytes) -> set[str]:
    """The FUNC symbols of a little-endian ELF64 image (a CUBIN)."""
    assert cubin[4] == 2 and cubin[5] == 1, "expected ELFCLASS64, little-endian"
    (shoff,) = struct.unpack_from("<Q", cubin, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", cubin, 0x3A)
    sections = [struct.unpack_from("<IIQQQQIIQQ", cubin, shoff + i * shentsize) for i in range(shnum)]
    names: set[str] = set()
    for _name, sh_type, _flags, _addr, offset, size, link, _info, _align, entsize in sections:
        if sh_type != SHT_SYMTAB:
            continue
        str_off = sections[link][4]
        for pos in range(offset, offset + size, entsize):
            st_name, st_info = struct.unpack_from("<IB", cubin, pos)
            if st_info & 0xF == STT_FUNC:
                end = cubin.index(b"\0", str_off + st_name)
                names.add(cubin[str_off + st_name : end].decode())
    return names


@pytest.fixture
def counting() -> CountingDriver:
    return CountingDriver(DRV)


def entries(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


# --- every bundled kernel, for real -------------------------------------------------------------------------


def test_bundled_names_include_every_kernel() -> None:
    names = kernels.names()
    for expected in (
        "conv2d_replicate",
        "matmul_tiled",
        "stream_read",
        "stream_write",
        "stream_copy",
        "stream_fill",
        "coherence_check_write",
        "jetmem_block_stream",
    ):
        assert expected in names
    assert names == sorted(names)


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("name", kernels.names())
def test_bundled_kernel_compiles(name: str, arch: str, counting: CountingDriver) -> None:
    src = kernels.sources()[name]
    filename = kernels.source_file(name)
    ck = compile_kernel(src, name, arch, drv=counting, filename=filename)
    assert isinstance(ck, CompiledKernel)
    assert ck.cubin[:4] == b"\x7fELF"
    (machine,) = struct.unpack_from("<H", ck.cubin, 0x12)
    assert machine == EM_CUDA
    assert int(arch[3:]) in elf_sm(ck.cubin), f"CUBIN is not for {arch}: e_flags SM candidates {elf_sm(ck.cubin)}"
    assert ck.symbol == name  # extern "C": no mangling
    assert name in elf_functions(ck.cubin)
    assert (ck.name, ck.arch, ck.options, ck.nvrtc_version) == (name, arch, (), NVRTC)
    assert ck.from_cache is False
    assert ck.key == cache_key(src, name, (), arch, NVRTC, HEADERS.paths, HEADERS.fingerprint, {})
    assert ck.include_dirs == HEADERS.paths
    includes = tuple(f"-I{d}" for d in HEADERS.paths)
    assert counting.compiles == [(filename, (f"--gpu-architecture={arch}", *includes), (name,))]


def test_arch_changes_the_cubin() -> None:
    a = compile_kernel(C_SRC, "c_fn", "sm_87", drv=DRV)
    b = compile_kernel(C_SRC, "c_fn", "sm_90", drv=DRV)
    assert a.cubin != b.cubin
    assert 87 in elf_sm(a.cubin) and 87 not in elf_sm(b.cubin)
    assert 90 in elf_sm(b.cubin)
    assert a.key != b.key


def test_options_reach_nvrtc() -> None:
    src = (
        "#ifndef JETMEM_FLAG\n#error JETMEM_FLAG is not defined\n#endif\n"
        'extern "C" __global__ void f(int* x) { x[0] = 1; }\n'
    )
    with pytest.raises(CompileError, match="JETMEM_FLAG is not defined"):
        compile_kernel(src, "f", "sm_87", drv=DRV)
    ck = compile_kernel(src, "f", "sm_87", options=["-DJETMEM_FLAG=1"], drv=DRV)
    assert ck.options == ("-DJETMEM_FLAG=1",)
    assert ck.cubin[:4] == b"\x7fELF"


def test_a_compile_with_an_empty_log_leaves_the_shared_one_byte_bytes_alone() -> None:
    """NVRTC's empty log is one byte (its NUL). Fetched into ``b" " * 1``, which is CPython's shared ``b" "``, it
    turned every ``b" "`` of the process into ``b"\\x00"``: on Python 3.12 every f-string compiled afterwards lost
    the space between two fields (the advice section printed "managed1.01xdevice" on an H100)."""
    ck = compile_kernel('extern "C" __global__ void quiet(float* x) { x[0] = 1.0f; }', "quiet", "sm_90", drv=DRV)
    assert ck.cubin[:4] == b"\x7fELF"
    assert bytes([32]) == b" " and b"a b"[1:2] == b" "  # bytes([32]) is the shared one-byte object
    assert driver.out_buffer(1) is not driver.out_buffer(1)  # a fresh buffer each time, never a shared one


# --- the disk cache -----------------------------------------------------------------------------------------


def test_second_compile_comes_from_the_cache_without_nvrtc(tmp_path: Path, counting: CountingDriver) -> None:
    cache = KernelCache(tmp_path)
    first = compile_kernel(C_SRC, "c_fn", "sm_87", cache=cache, drv=counting)
    assert len(counting.compiles) == 1
    assert first.from_cache is False
    assert entries(tmp_path) == sorted([f"{first.key}.cubin", f"{first.key}.json"])
    assert (tmp_path / f"{first.key}.cubin").read_bytes() == first.cubin
    meta = json.loads((tmp_path / f"{first.key}.json").read_text())
    assert meta["symbol"] == "c_fn" and meta["size"] == len(first.cubin) and meta["arch"] == "sm_87"

    second = compile_kernel(C_SRC, "c_fn", "sm_87", cache=cache, drv=counting)
    assert len(counting.compiles) == 1, "a cache hit must not call NVRTC"
    assert second.from_cache is True
    assert (second.cubin, second.symbol, second.key, second.log) == (first.cubin, first.symbol, first.key, first.log)
    assert (cache.hits, cache.misses) == (1, 1)


def test_cache_survives_a_new_cache_object(tmp_path: Path, counting: CountingDriver) -> None:
    compile_kernel(C_SRC, "c_fn", "sm_90", cache=KernelCache(tmp_path), drv=counting)
    again = compile_kernel(C_SRC, "c_fn", "sm_90", cache=KernelCache(tmp_path), drv=counting)
    assert again.from_cache is True
    assert len(counting.compiles) == 1


def test_template_symbol_is_kept_in_the_cache(tmp_path: Path, counting: CountingDriver) -> None:
    cache = KernelCache(tmp_path)
    first = compile_kernel(TEMPLATE_SRC, "scale<float>", "sm_87", cache=cache, drv=counting)
    second = compile_kernel(TEMPLATE_SRC, "scale<float>", "sm_87", cache=cache, drv=counting)
    assert second.from_cache is True
    assert second.symbol == first.symbol != "scale<float>"
    assert len(counting.compiles) == 1


@pytest.mark.parametrize(
    ("field", "other"),
    [
        ("source", C_SRC + "// changed\n"),
        ("name", "c_fn2"),
        ("options", ("-lineinfo",)),
        ("arch", "sm_90"),
        ("nvrtc_version", (NVRTC[0], NVRTC[1] + 1)),
    ],
)
def test_cache_key_changes_with_each_input(field: str, other: Any) -> None:
    base = {"source": C_SRC, "name": "c_fn", "options": (), "arch": "sm_87", "nvrtc_version": NVRTC}
    key = cache_key(**base)
    assert key == cache_key(**base)  # deterministic
    assert len(key) == 64 and int(key, 16) >= 0
    assert cache_key(**{**base, field: other}) != key


def test_cache_key_option_order_matters() -> None:
    a = cache_key(C_SRC, "c_fn", ("-DA=1", "-DA=2"), "sm_87", NVRTC)
    b = cache_key(C_SRC, "c_fn", ("-DA=2", "-DA=1"), "sm_87", NVRTC)
    assert a != b  # the last definition wins, so the order changes the program


@pytest.mark.parametrize(
    "change",
    [
        {"source": C_SRC + "\n"},
        {"options": ("-lineinfo",)},
        {"arch": "sm_90"},
    ],
)
def test_changed_input_misses_the_cache(tmp_path: Path, counting: CountingDriver, change: dict[str, Any]) -> None:
    cache = KernelCache(tmp_path)
    args = {"source": C_SRC, "name": "c_fn", "arch": "sm_87", "options": ()}
    first = compile_kernel(**args, cache=cache, drv=counting)
    second = compile_kernel(**{**args, **change}, cache=cache, drv=counting)
    assert second.from_cache is False
    assert second.key != first.key
    assert len(counting.compiles) == 2
    assert len(entries(tmp_path)) == 4


def test_new_nvrtc_version_misses_the_cache(tmp_path: Path) -> None:
    cache = KernelCache(tmp_path)
    real = CountingDriver(DRV)
    newer = CountingDriver(DRV, version=(NVRTC[0], NVRTC[1] + 1))
    first = compile_kernel(C_SRC, "c_fn", "sm_87", cache=cache, drv=real)
    second = compile_kernel(C_SRC, "c_fn", "sm_87", cache=cache, drv=newer)
    assert second.from_cache is False
    assert second.nvrtc_version == (NVRTC[0], NVRTC[1] + 1)
    assert second.key != first.key
    assert len(newer.compiles) == 1
    assert compile_kernel(C_SRC, "c_fn", "sm_87", cache=cache, drv=real).from_cache is True


def _prime(tmp_path: Path, counting: CountingDriver) -> tuple[KernelCache, CompiledKernel]:
    cache = KernelCache(tmp_path)
    first = compile_kernel(C_SRC, "c_fn", "sm_87", cache=cache, drv=counting)
    return cache, first


@pytest.mark.parametrize(
    ("suffix", "corrupt"),
    [
        ("cubin", lambda data: data[: len(data) // 2]),  # truncated CUBIN
        ("cubin", lambda data: b""),  # empty CUBIN
        ("cubin", lambda data: data + b"\0"),  # longer than recorded
        ("json", lambda data: data[: len(data) // 2]),  # truncated sidecar
        ("json", lambda data: b"\xff\xfe not json"),  # garbage sidecar
    ],
    ids=["cubin-truncated", "cubin-empty", "cubin-longer", "json-truncated", "json-garbage"],
)
def test_corrupt_entry_is_a_miss_and_is_rewritten(
    tmp_path: Path, counting: CountingDriver, suffix: str, corrupt: Any
) -> None:
    cache, first = _prime(tmp_path, counting)
    path = tmp_path / f"{first.key}.{suffix}"
    good = path.read_bytes()
    path.write_bytes(corrupt(good))

    again = compile_kernel(C_SRC, "c_fn", "sm_87", cache=cache, drv=counting)
    assert again.from_cache is False
    assert again.cubin == first.cubin
    assert len(counting.compiles) == 2
    assert cache.misses == 2
    assert path.read_bytes() == good  # rewritten
    assert compile_kernel(C_SRC, "c_fn", "sm_87", cache=cache, drv=counting).from_cache is True
    assert len(counting.compiles) == 2


def test_missing_cubin_is_a_miss(tmp_path: Path, counting: CountingDriver) -> None:
    cache, first = _prime(tmp_path, counting)
    (tmp_path / f"{first.key}.cubin").unlink()
    assert compile_kernel(C_SRC, "c_fn", "sm_87", cache=cache, drv=counting).from_cache is False
    assert (tmp_path / f"{first.key}.cubin").read_bytes() == first.cubin


@pytest.mark.parametrize("sidecar", ["[]", '"text"', "42", "null"])
def test_sidecar_that_is_not_an_object_is_a_miss(tmp_path: Path, counting: CountingDriver, sidecar: str) -> None:
    cache, first = _prime(tmp_path, counting)
    (tmp_path / f"{first.key}.json").write_text(sidecar)
    assert compile_kernel(C_SRC, "c_fn", "sm_87", cache=cache, drv=counting).from_cache is False


def test_sidecar_without_symbol_is_a_miss(tmp_path: Path, counting: CountingDriver) -> None:
    cache, first = _prime(tmp_path, counting)
    (tmp_path / f"{first.key}.json").write_text(json.dumps({"size": len(first.cubin)}))
    assert compile_kernel(C_SRC, "c_fn", "sm_87", cache=cache, drv=counting).from_cache is False


def test_same_size_corrupt_cubin_is_a_miss(tmp_path: Path, counting: CountingDriver) -> None:
    cache, first = _prime(tmp_path, counting)
    (tmp_path / f"{first.key}.cubin").write_bytes(b"\0" * len(first.cubin))
    again = compile_kernel(C_SRC, "c_fn", "sm_87", cache=cache, drv=counting)
    assert again.cubin == first.cubin


def test_writes_leave_no_temp_files(tmp_path: Path, counting: CountingDriver) -> None:
    cache = KernelCache(tmp_path / "nested" / "dir")  # created on first write
    for arch in ("sm_87", "sm_90"):
        compile_kernel(C_SRC, "c_fn", arch, cache=cache, drv=counting)
    names = entries(tmp_path / "nested" / "dir")
    assert len(names) == 4
    assert all(n.endswith((".cubin", ".json")) and not n.startswith(".") for n in names)


def test_rewrite_replaces_the_file_rather_than_writing_in_place(tmp_path: Path, counting: CountingDriver) -> None:
    cache, first = _prime(tmp_path, counting)
    path = tmp_path / f"{first.key}.cubin"
    path.write_bytes(b"stale")
    keep = tmp_path.parent / f"{tmp_path.name}-old-inode"
    os.link(path, keep)  # a reader holding the old file must never see a half-written one
    try:
        compile_kernel(C_SRC, "c_fn", "sm_87", cache=cache, drv=counting)
        assert path.read_bytes() == first.cubin
        assert keep.read_bytes() == b"stale"
        assert os.stat(path).st_ino != os.stat(keep).st_ino
    finally:
        keep.unlink()


def test_failed_write_removes_its_temp_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(*args: Any) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(compiler.os, "replace", boom)
    with pytest.raises(OSError, match="disk full"):
        write_atomic(tmp_path / "x.cubin", b"data")
    assert entries(tmp_path) == []

    cache = KernelCache(tmp_path)
    cache.put("k", b"data", {"symbol": "f"})  # a failing cache costs a recompile, never an error
    assert entries(tmp_path) == []
    assert cache.get("k") is None


def test_unwritable_cache_still_compiles(tmp_path: Path, counting: CountingDriver) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    cache = KernelCache(blocker / "cache")
    ck = compile_kernel(C_SRC, "c_fn", "sm_87", cache=cache, drv=counting)
    assert ck.cubin[:4] == b"\x7fELF"
    assert compile_kernel(C_SRC, "c_fn", "sm_87", cache=cache, drv=counting).from_cache is False
    assert len(counting.compiles) == 2


def test_default_cache_dir(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("JETMEM_CACHE_DIR", str(tmp_path / "explicit"))
    assert compiler.default_cache_dir() == tmp_path / "explicit"
    monkeypatch.delenv("JETMEM_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert compiler.default_cache_dir() == tmp_path / "xdg" / "pytest-jetmem" / "kernels"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert compiler.default_cache_dir() == tmp_path / "home" / ".cache" / "pytest-jetmem" / "kernels"


# --- errors -------------------------------------------------------------------------------------------------


def test_compile_error_names_the_kernel_and_holds_the_log(tmp_path: Path) -> None:
    src = 'extern "C" __global__ void broken(int* x) { x[0] = undefined_thing; }\n'
    cache = KernelCache(tmp_path)
    with pytest.raises(CompileError) as info:
        compile_kernel(src, "broken", "sm_87", cache=cache, drv=DRV)
    msg = str(info.value)
    assert "'broken'" in msg
    assert "undefined_thing" in msg and "undefined" in msg.replace("undefined_thing", "")
    assert "NVRTC_ERROR_COMPILATION" in msg
    assert entries(tmp_path) == []  # failures are not cached


def test_undeclared_name_is_a_compile_error(tmp_path: Path) -> None:
    cache = KernelCache(tmp_path)
    with pytest.raises(CompileError, match="'not_there'"):
        compile_kernel(C_SRC, "not_there", "sm_87", cache=cache, drv=DRV)
    assert entries(tmp_path) == []


def test_bad_template_argument_is_a_compile_error() -> None:
    with pytest.raises(CompileError, match=r"(?s)'scale<flaot>'.*flaot"):
        compile_kernel(TEMPLATE_SRC, "scale<flaot>", "sm_87", drv=DRV)


def test_unsupported_arch_is_a_compile_error() -> None:
    with pytest.raises(CompileError, match="gpu-architecture"):
        compile_kernel(C_SRC, "c_fn", "sm_10", drv=DRV)


def test_bad_option_is_a_compile_error() -> None:
    with pytest.raises(CompileError, match=r"(?s)'c_fn'.*--no-such-option"):
        compile_kernel(C_SRC, "c_fn", "sm_87", options=["--no-such-option"], drv=DRV)


@pytest.mark.parametrize("arch", ["87", "sm87", "compute_87", "sm_", "SM_87", "sm_87 ", "sm_8.7", "sm_87ab", ""])
def test_bad_arch_string_is_a_value_error(arch: str) -> None:
    with pytest.raises(ValueError, match="arch"):
        compile_kernel(C_SRC, "c_fn", arch, drv=Untouchable())


def test_arch_with_feature_suffix_is_accepted() -> None:
    ck = compile_kernel(C_SRC, "c_fn", "sm_90a", drv=DRV)
    assert 90 in elf_sm(ck.cubin)


# --- C++ names ----------------------------------------------------------------------------------------------


def test_template_name_expression_yields_a_mangled_symbol(counting: CountingDriver) -> None:
    f = compile_kernel(TEMPLATE_SRC, "scale<float>", "sm_87", drv=counting)
    d = compile_kernel(TEMPLATE_SRC, "scale<double>", "sm_87", drv=counting)
    assert f.symbol.startswith("_Z") and d.symbol.startswith("_Z")
    assert f.symbol != d.symbol
    assert "scale" in f.symbol
    assert f.symbol in elf_functions(f.cubin)
    assert d.symbol in elf_functions(d.cubin)
    assert counting.compiles[0][2] == ("scale<float>",)  # passed to NVRTC as a name expression
    assert f.name == "scale<float>"


def test_plain_name_of_a_cpp_kernel_yields_its_real_symbol() -> None:
    src = "__global__ void cpp_fn(int* x) { x[0] = 1; }\n"
    ck = compile_kernel(src, "cpp_fn", "sm_87", drv=DRV)
    assert ck.symbol in elf_functions(ck.cubin)


def test_name_declared_only_in_a_comment_is_a_compile_error() -> None:
    src = C_SRC + "// __global__ void ghost(int* x)\n"
    with pytest.raises(CompileError, match="'ghost'"):
        compile_kernel(src, "ghost", "sm_87", drv=DRV)


def test_an_arch_nvrtc_13_dropped_names_the_cu12_extra() -> None:
    """Issue 11: sm_72 (Xavier) under NVRTC 13 says that CUDA 12's NVRTC, the cu12 extra, compiles it."""
    backend = driver.CudaDriver()
    if backend.nvrtc_version() < (13, 0):
        pytest.skip("needs NVRTC 13 (this one compiles sm_72)")
    with pytest.raises(CompileError, match=r"CUDA 12's NVRTC does: install pytest-jetmem\[cu12\]"):
        compile_kernel('extern "C" __global__ void k() {}', "k", "sm_72", drv=backend)


# --- CUDA headers, include directories, options (issue 10) ----------------------------------------------------

from user_kernels import USER_KERNELS  # noqa: E402  (the sources the GPU tests run: tests/user_kernels.py)

NEEDS_HEADERS = pytest.mark.skipif(
    not HEADERS.dirs, reason=f"no CUDA headers installed (pip install -e '.[cu13]'): {HEADERS.describe()}"
)


@NEEDS_HEADERS
@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("kernel", USER_KERNELS, ids=lambda k: k.id)
def test_kernels_including_cuda_headers_compile_without_help(kernel: Any, arch: str) -> None:
    ck = compile_kernel(kernel.source, kernel.name, arch, options=kernel.options, drv=DRV)
    assert ck.symbol in elf_functions(ck.cubin)
    assert int(arch[3:]) in elf_sm(ck.cubin)


def test_header_search_finds_the_cuda_headers_in_order() -> None:
    search = driver.find_cuda_headers()
    assert search is driver.find_cuda_headers()  # cached
    if search.dirs:
        runtime = search.paths[0]
        assert Path(runtime, "cuda_fp16.h").is_file()
        assert any(Path(d, "cuda", "std", "version").is_file() for d in search.paths)
        assert "used" in search.describe()


@pytest.fixture
def no_pathfinder(monkeypatch: pytest.MonkeyPatch) -> Any:
    """cuda.pathfinder finds nothing: the environment variables and /usr/local/cuda decide."""
    pathfinder = pytest.importorskip("cuda.pathfinder")
    monkeypatch.setattr(pathfinder, "locate_nvidia_header_directory", lambda libname: None)
    monkeypatch.setattr(driver, "SYSTEM_CUDA", "/nonexistent/cuda")
    driver._find_cuda_headers.cache_clear()
    yield
    driver._find_cuda_headers.cache_clear()


def fake_toolkit(root: Path) -> Path:
    (root / "include" / "cccl" / "cuda" / "std").mkdir(parents=True)
    (root / "include" / "cuda_fp16.h").write_text("// fake\n")
    (root / "include" / "cccl" / "cuda" / "std" / "version").write_text("// fake\n")
    return root


def test_cuda_home_is_used_after_pathfinder(no_pathfinder: None, tmp_path: Path) -> None:
    home = fake_toolkit(tmp_path / "home")
    search = driver.find_cuda_headers({"CUDA_HOME": str(home)})
    assert search.paths == (str((home / "include").resolve()), str((home / "include" / "cccl").resolve()))
    assert [via for _, via in search.dirs] == ["$CUDA_HOME", "$CUDA_HOME"]
    assert "cuda.pathfinder cudart: no header wheel or toolkit found" in search.describe()
    assert "$CUDA_PATH: not set" in search.describe()


def test_cuda_path_is_used_where_cuda_home_has_no_headers(no_pathfinder: None, tmp_path: Path) -> None:
    path = fake_toolkit(tmp_path / "path")
    search = driver.find_cuda_headers({"CUDA_HOME": str(tmp_path / "empty"), "CUDA_PATH": str(path)})
    assert [via for _, via in search.dirs] == ["$CUDA_PATH", "$CUDA_PATH"]
    assert f"$CUDA_HOME: {tmp_path / 'empty' / 'include'} (no cuda_fp16.h)" in search.describe()


def test_missing_cuda_headers_say_where_they_were_looked_for(no_pathfinder: None) -> None:
    search = driver.find_cuda_headers({})
    assert search.dirs == ()
    src = '#include <cuda_fp16.h>\nextern "C" __global__ void f(__half* x) { }\n'
    with pytest.raises(CompileError) as info:
        compile_kernel(src, "f", "sm_87", drv=DRV, cuda_headers=search)
    msg = str(info.value)
    assert "header 'cuda_fp16.h' not found" in msg
    assert "your include directories (none given)" in msg
    assert "the CUDA headers (none found)" in msg
    assert "$CUDA_HOME: not set" in msg and "/nonexistent/cuda/include (no cuda_fp16.h)" in msg
    assert "include_dirs=" in msg and "jetmem_include_dirs" in msg and "CUDA_HOME" in msg


def test_include_dirs_find_user_headers(tmp_path: Path) -> None:
    (tmp_path / "inc").mkdir()
    (tmp_path / "inc" / "scale.h").write_text("#define SCALE 3\n")
    src = '#include "scale.h"\nextern "C" __global__ void f(int* x) { x[0] = SCALE; }\n'
    with pytest.raises(CompileError, match=r"(?s)header 'scale.h' not found.*your include directories \(none given\)"):
        compile_kernel(src, "f", "sm_87", drv=DRV)
    ck = compile_kernel(src, "f", "sm_87", drv=DRV, include_dirs=tmp_path / "inc")
    assert ck.include_dirs[0] == str(tmp_path / "inc")
    assert ck.cubin[:4] == b"\x7fELF"


def test_missing_include_dir_is_a_value_error_naming_it(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"include_dirs: '.*nope' is not a directory"):
        compile_kernel(C_SRC, "c_fn", "sm_87", drv=Untouchable(), include_dirs=[str(tmp_path / "nope")])


def test_user_header_content_is_part_of_the_cache_key(tmp_path: Path, counting: CountingDriver) -> None:
    inc = tmp_path / "inc"
    (inc / "sub").mkdir(parents=True)
    (inc / "top.h").write_text('#include "sub/inner.h"\n')
    (inc / "sub" / "inner.h").write_text("#define VALUE 1\n")
    src = '#include <top.h>\nextern "C" __global__ void f(int* x) { x[0] = VALUE; }\n'
    cache = KernelCache(tmp_path / "cache")
    first = compile_kernel(src, "f", "sm_87", cache=cache, drv=counting, include_dirs=[inc])
    assert compile_kernel(src, "f", "sm_87", cache=cache, drv=counting, include_dirs=[inc]).from_cache
    (inc / "sub" / "inner.h").write_text("#define VALUE 2\n")  # a header two levels down changes
    second = compile_kernel(src, "f", "sm_87", cache=cache, drv=counting, include_dirs=[inc])
    assert second.from_cache is False and second.key != first.key and second.cubin != first.cubin
    assert len(counting.compiles) == 2


def test_user_headers_lists_nested_headers_and_skips_the_toolkit(tmp_path: Path) -> None:
    (tmp_path / "a.h").write_text('#include "b.h"\n#include <cuda_fp16.h>\n')
    (tmp_path / "b.h").write_text('#include "a.h"\n')  # a cycle is fine
    found = compiler.user_headers('#include "a.h"\n', [str(tmp_path)])
    assert sorted(Path(p).name for p in found) == ["a.h", "b.h"]
    assert all(len(digest) == 64 for digest in found.values())


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        ("-lineinfo", ("-lineinfo",)),
        ("-lineinfo  -DN=4 '-DMSG=a b'", ("-lineinfo", "-DN=4", "-DMSG=a b")),
        (["-lineinfo", "-DN=4"], ("-lineinfo", "-DN=4")),
        (("-lineinfo",), ("-lineinfo",)),
        ("", ()),
        (None, ()),
    ],
)
def test_options_take_a_string_or_a_sequence(options: Any, expected: tuple[str, ...]) -> None:
    assert compiler.normalize_options(options) == expected


def test_a_string_option_reaches_nvrtc_whole() -> None:
    src = '#if N != 4\n#error N is not 4\n#endif\nextern "C" __global__ void f(int* x) { x[0] = N; }\n'
    ck = compile_kernel(src, "f", "sm_87", options="-lineinfo -DN=4", drv=DRV)
    assert ck.options == ("-lineinfo", "-DN=4")


@pytest.mark.parametrize("options", [3, b"-lineinfo", ["-lineinfo", 3], [None]])
def test_bad_options_are_a_type_error(options: Any) -> None:
    with pytest.raises(TypeError, match="options"):
        compile_kernel(C_SRC, "c_fn", "sm_87", options=options, drv=Untouchable())
