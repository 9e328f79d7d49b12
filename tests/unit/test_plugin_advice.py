"""plugin.advice: the "jetmem advice" section at the end of a session, serial and under pytest-xdist.

pytester runs against the fake driver, whose virtual clock charges each launch by the kind of memory it touches
(``kind_ms``), so the figures the advice reads are exact; the wording of the advice itself is checked on synthetic
records in test_advice.py. Nothing here asserts on wall-clock time.
"""

from __future__ import annotations

import re

import pytest

from fakes.fake_driver import conftest_source
from runtime_fixtures import _module_kernel_cache, _no_user_device_choice, jetmem_kernel_cache  # noqa: F401
from runtime_runs import InstallFake, inner

EVERY_MODE = """
@pytest.mark.memmode
def test_fill(jetmem):
    jetmem.measure(fill(jetmem), label="fill")

@pytest.mark.memmode("device")
def test_alone(jetmem):
    jetmem.measure(fill(jetmem), label="fill")
"""

ONE_MODE = """
@pytest.mark.memmode("device")
def test_alone(jetmem):
    jetmem.measure(fill(jetmem), label="fill")
"""


def section(result: pytest.RunResult) -> list[str]:
    """The lines of the "jetmem advice" section (up to the next section or the end of the summary)."""
    lines = result.outlines
    start = next(i for i, line in enumerate(lines) if re.fullmatch(r"=+ jetmem advice =+", line))
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("=")), len(lines))
    return lines[start + 1 : end]


def test_advice_follows_the_runtimes_table_with_the_pick_the_reasons_and_the_rule(
    pytester: pytest.Pytester, install_fake_driver: InstallFake
) -> None:
    install_fake_driver("orin", kernel_ms=0.1, kind_ms={"host": 0.5})
    pytester.makepyfile(test_a=inner(EVERY_MODE))
    result = pytester.runpytest("-p", "no:cacheprovider", "--jetmem-max-time=0.05")
    assert result.ret == pytest.ExitCode.OK
    out = result.outlines
    runtimes = next(i for i, line in enumerate(out) if "jetmem runtimes" in line)
    advice = next(i for i, line in enumerate(out) if re.fullmatch(r"=+ jetmem advice =+", line))
    assert advice > runtimes
    lines = section(result)
    assert lines[0] == "device: Orin (integrated GPU; CONCURRENT_MANAGED_ACCESS=0, PAGEABLE_MEMORY_ACCESS=0)"
    assert lines[2].startswith('NVIDIA\'s CUDA for Tegra note ("Memory Selection", ')
    assert "test_a.py::test_alone  fill:kernel" not in lines  # measured in one mode: no advice
    body = lines[lines.index("test_a.py::test_fill  fill:kernel") + 1 :]
    assert body[0] == (
        "  no clear winner: device and managed are tied (managed 1.00x device, 99% CI 1.00x..1.00x: not clear of "
        "the 5% margin)"
    )
    # device and managed cost the same on the fake's clock: either may be the fastest by a rounding error
    ref = r"(device|managed)"
    assert re.fullmatch(rf"  clearly slower: zero_copy 5\.00x {ref} \(99% CI 5\.00x\.\.5\.00x\)", body[1])
    assert re.fullmatch(
        rf"    - zero_copy's kernel takes 5\.00x {ref}'s time \(99% CI 5\.00x\.\.5\.00x\): the integrated .*", body[3]
    )
    assert re.fullmatch(
        rf".*this run agrees: zero_copy's kernel takes 5\.00x {ref}'s time .*: the uncached reads cost", body[-1]
    )


def test_a_discrete_gpu_says_zero_copy_figures_are_not_jetson_figures(
    pytester: pytest.Pytester, install_fake_driver: InstallFake
) -> None:
    install_fake_driver("h100", kernel_ms=0.1, kind_ms={"host": 0.5, "managed": 0.2})
    pytester.makepyfile(test_a=inner(EVERY_MODE))
    result = pytester.runpytest("-p", "no:cacheprovider", "--jetmem-max-time=0.05")
    assert result.ret == pytest.ExitCode.OK
    lines = section(result)
    assert lines[0].startswith("device: NVIDIA H100 80GB HBM3 (discrete GPU;")
    assert "(25% where either reads over PCIe)" in lines[1]
    assert "NVIDIA's CUDA for Tegra note: no rule applies: it is about integrated GPUs (Jetson), and this is a " in (
        "\n".join(lines)
    )
    assert (
        "  pick device: the next mode, managed, takes 2.00x as long (99% CI 2.00x..2.00x; more than the 5% margin)"
        in (lines)
    )
    pcie = [line for line in lines if "read over the PCIe link of this discrete GPU" in line]
    assert pcie == [
        "    - zero_copy was read over the PCIe link of this discrete GPU (NVIDIA H100 80GB HBM3; median zero_copy "
        "0.500 ms): such figures depend on that link and are not Jetson figures, and ties with them are called within "
        "25%, their spread between processes"
    ]


def test_nothing_is_printed_without_a_test_measured_in_two_modes(
    pytester: pytest.Pytester, install_fake_driver: InstallFake
) -> None:
    install_fake_driver("orin")
    pytester.makepyfile(test_a=inner(ONE_MODE))
    result = pytester.runpytest("-p", "no:cacheprovider", "--jetmem-max-time=0.05")
    assert result.ret == pytest.ExitCode.OK
    assert any("jetmem runtimes" in line for line in result.outlines)
    assert not any("jetmem advice" in line for line in result.outlines)


@pytest.mark.parametrize("how", ["option", "ini"])
def test_advice_off_prints_nothing(pytester: pytest.Pytester, install_fake_driver: InstallFake, how: str) -> None:
    install_fake_driver("orin", kind_ms={"host": 0.05})
    pytester.makepyfile(test_a=inner(EVERY_MODE))
    args = ["-p", "no:cacheprovider", "--jetmem-max-time=0.05"]
    if how == "option":
        args.append("--jetmem-advice=off")
    else:
        pytester.makeini("[pytest]\njetmem_advice = OFF\n")
    result = pytester.runpytest(*args)
    assert result.ret == pytest.ExitCode.OK
    assert any("jetmem runtimes" in line for line in result.outlines)
    assert not any("jetmem advice" in line for line in result.outlines)


def test_a_bad_advice_setting_is_a_usage_error_naming_it(
    pytester: pytest.Pytester, install_fake_driver: InstallFake
) -> None:
    fake = install_fake_driver("orin")
    pytester.makepyfile(test_a=inner(EVERY_MODE))
    pytester.makeini("[pytest]\njetmem_advice = maybe\n")
    result = pytester.runpytest("-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: ini option jetmem_advice: expected one of on, off, got 'maybe'"])
    result = pytester.runpytest("-p", "no:cacheprovider", "--jetmem-advice=sometimes")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--jetmem-advice: invalid choice: 'sometimes' (choose from*on*off*)"])
    assert fake.launches == []  # stopped before anything ran


def test_under_xdist_the_controller_prints_the_advice_once(pytester: pytest.Pytester) -> None:
    pytest.importorskip("xdist")
    pytester.makeconftest(conftest_source("orin", kernel_ms=0.1, kind_ms={"host": 0.2}))
    pytester.makepyfile(test_a=inner(EVERY_MODE))
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-n", "2", "--jetmem-max-time=0.05")
    assert result.ret == pytest.ExitCode.OK
    assert sum(bool(re.fullmatch(r"=+ jetmem advice =+", line)) for line in result.outlines) == 1
    lines = section(result)
    assert lines[0] == "device: Orin (integrated GPU; CONCURRENT_MANAGED_ACCESS=0, PAGEABLE_MEMORY_ACCESS=0)"
    body = lines[lines.index("test_a.py::test_fill  fill:kernel") + 1 :]
    assert body[0].startswith("  no clear winner: device and managed are tied")
    # device and managed cost the same on the fake's clock: either may be the fastest by a rounding error
    assert re.fullmatch(r"  clearly slower: zero_copy 2\.00x (device|managed) \(99% CI 2\.00x\.\.2\.00x\)", body[1])
