"""cuda.device: choosing the device (JETMEM_DEVICE, the xdist worker), where GPU tests cannot run, and the
broken state after sticky errors.

Only the driver boundary is faked (tests/fakes/fake_driver.py); the plugin, device probing, memory modes,
buffers, the ``jetmem`` handle and kernel argument packing run for real. Each test installs a fake (the
fixtures of the repository's conftest.py) before an in-process ``pytester`` run, whose plugin opens the
device lazily and so talks to the fake; afterwards the test inspects what the fake saw.
"""

from __future__ import annotations

import re

import pytest

from fakes.fake_driver import FakeDriver, conftest_source
from memmode_runs import ALLOC_KIND, MODES, InstallFake, results, skip_reason
from pytest_jetmem.cuda.device import open_device, select_ordinal
from pytest_jetmem.errors import CudaUnavailable
from pytest_jetmem.plugin.children import CHANNEL_ENV
from runtime_runs import inner


# -- device selection -------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("count", "env", "expected"),
    [
        (4, {}, 0),
        (4, {"JETMEM_DEVICE": "2"}, 2),
        (4, {"JETMEM_DEVICE": " 3 "}, 3),
        (4, {"JETMEM_DEVICE": "1", "PYTEST_XDIST_WORKER": "gw2"}, 1),  # explicit choice wins
        (4, {"JETMEM_DEVICE": "", "PYTEST_XDIST_WORKER": "gw2"}, 2),
        (2, {"PYTEST_XDIST_WORKER": "gw0"}, 0),
        (2, {"PYTEST_XDIST_WORKER": "gw3"}, 1),
        (3, {"PYTEST_XDIST_WORKER": "gw7"}, 1),
        (1, {"PYTEST_XDIST_WORKER": "gw5"}, 0),
        (0, {"PYTEST_XDIST_WORKER": "gw5"}, 0),
        (4, {"PYTEST_XDIST_WORKER": "master"}, 0),
        (4, {"PYTEST_XDIST_WORKER": "gwx"}, 0),
    ],
)
def test_select_ordinal(count: int, env: dict[str, str], expected: int) -> None:
    assert select_ordinal(count, env) == expected


@pytest.mark.parametrize("value", ["gpu1", "1.5", "cuda:0"])
def test_select_ordinal_bad_jetmem_device_is_a_clear_error(value: str) -> None:
    with pytest.raises(CudaUnavailable, match=re.escape(f"JETMEM_DEVICE={value!r}: expected a device ordinal")):
        select_ordinal(4, {"JETMEM_DEVICE": value, "PYTEST_XDIST_WORKER": "gw1"})


def test_select_ordinal_negative_jetmem_device_is_a_clear_error() -> None:
    with pytest.raises(CudaUnavailable, match="JETMEM_DEVICE='-1'"):
        select_ordinal(4, {"JETMEM_DEVICE": "-1"})


def test_open_device_uses_the_xdist_worker_number(
    install_fake_driver: InstallFake, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = install_fake_driver("orin", devices=2)
    monkeypatch.delenv("JETMEM_DEVICE", raising=False)
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw3")
    avail = open_device(fake)
    assert avail.ok and avail.info is not None and avail.device is not None
    assert avail.info.ordinal == 1
    assert [c.ordinal for c in fake._contexts.values() if c.refcount] == [1]  # the context is on GPU 1
    avail.device.close()
    assert fake.leaks() == {}


@pytest.mark.parametrize(
    ("value", "reason"),
    [("abc", "JETMEM_DEVICE='abc': expected a device ordinal"), ("5", "no CUDA device 5: only 1 device(s) present")],
)
def test_bad_jetmem_device_is_a_usage_error_with_the_reason(
    pytester: pytest.Pytester, fake_driver: FakeDriver, monkeypatch: pytest.MonkeyPatch, value: str, reason: str
) -> None:
    """A configuration mistake stops the run (exit 4) instead of a green run of skips (issue 11)."""
    monkeypatch.setenv("JETMEM_DEVICE", value)
    pytester.makepyfile(test_d=inner('@pytest.mark.memmode("device")\ndef test_x(jetmem):\n    pass\n'))
    result = pytester.runpytest("-rs")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"ERROR: *{reason}*"])
    assert fake_driver.count("cuDevicePrimaryCtxRetain") == 0


@pytest.mark.parametrize(
    ("visible", "reason"),
    [
        (None, "JETMEM_DEVICE=2: no CUDA device 2: only 2 device(s) present, expected 0 to 1"),
        (
            "5,7",
            "JETMEM_DEVICE=2: no CUDA device 2: only 2 device(s) present, expected 0 to 1 "
            "(CUDA_VISIBLE_DEVICES='5,7': ordinals number the visible devices, from 0)",
        ),
    ],
    ids=["all-visible", "CUDA_VISIBLE_DEVICES"],
)
def test_a_jetmem_device_past_the_devices_says_which_ordinals_there_are(
    install_fake_driver: InstallFake, monkeypatch: pytest.MonkeyPatch, visible: str | None, reason: str
) -> None:
    fake = install_fake_driver("dgpu", devices=2)  # what the driver shows, CUDA_VISIBLE_DEVICES applied
    monkeypatch.setenv("JETMEM_DEVICE", "2")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    if visible is not None:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    avail = open_device(fake)
    assert (avail.ok, avail.misconfigured, avail.reason) == (False, True, reason)


def test_bad_jetmem_device_is_refused_before_the_driver_is_asked(install_fake_driver: InstallFake) -> None:
    fake = install_fake_driver("no_driver")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("JETMEM_DEVICE", "gpu0")
        avail = open_device(fake)
    assert (avail.ok, avail.misconfigured) == (False, True)
    assert avail.reason == "JETMEM_DEVICE='gpu0': expected a device ordinal >= 0"
    assert fake.calls == []


# -- where GPU tests cannot run -------------------------------------------------------------------------
UNAVAILABLE_TESTS = """
    import pytest

    @pytest.mark.memmode
    def test_gpu(jetmem):
        jetmem.zeros(4)

    @pytest.mark.memmode("device", "managed")
    def test_mode_only(memmode):
        pass

    def test_plain():
        assert 2 + 2 == 4
"""


@pytest.mark.parametrize(
    ("profile", "reason"),
    [
        ("no_driver", "jetmem: no CUDA driver: "),
        ("no_device", "jetmem: no CUDA device: "),
        ("no_nvrtc", "jetmem: NVRTC not found"),
    ],
)
def test_unavailable_gpu_skips_every_mode_with_the_reason(
    pytester: pytest.Pytester, install_fake_driver: InstallFake, profile: str, reason: str
) -> None:
    fake = install_fake_driver(profile)
    pytester.makepyfile(UNAVAILABLE_TESTS)
    reprec = pytester.inline_run()
    assert reprec.ret == pytest.ExitCode.OK
    outcomes = results(reprec)
    expected_skips = [f"test_gpu[{m}]" for m in MODES] + ["test_mode_only[device]", "test_mode_only[managed]"]
    assert sorted(outcomes) == sorted([*expected_skips, "test_plain"])
    for name in expected_skips:
        outcome, text = outcomes[name]
        assert outcome == "skipped", name
        assert skip_reason(text).startswith(reason), (name, text)
    assert outcomes["test_plain"][0] == "passed"
    # nothing was allocated or left behind
    assert fake.live == {}
    assert fake.count("cuMemAlloc") == fake.count("cuMemAllocManaged") == fake.count("cuMemHostAlloc") == 0
    assert fake.count("cuDevicePrimaryCtxRetain") == 0


def test_no_driver_asks_nothing_after_cuinit(pytester: pytest.Pytester, install_fake_driver: InstallFake) -> None:
    fake = install_fake_driver("no_driver")
    pytester.makepyfile(UNAVAILABLE_TESTS)
    pytester.inline_run().assertoutcome(passed=1, skipped=5)
    assert {c.name for c in fake.calls} == {"cuInit"}


def test_failing_cuinit_is_a_skip_not_an_error(pytester: pytest.Pytester, fake_driver: FakeDriver) -> None:
    fake_driver.inject("cuInit", "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH")
    pytester.makepyfile(UNAVAILABLE_TESTS)
    reprec = pytester.inline_run()
    reprec.assertoutcome(passed=1, skipped=5)
    outcome, text = results(reprec)["test_gpu[device]"]
    assert outcome == "skipped"
    reason = skip_reason(text)  # the jetmem tests still ran to their first GPU answer (plugin.nogpu)
    assert reason.startswith("jetmem: no usable CUDA driver: cuInit returned CUDA_ERROR_SYSTEM_DRIVER_MISMATCH; ")
    assert "without a GPU: compiled 0 kernels for sm_" in reason


@pytest.mark.parametrize(
    ("call", "error", "reason"),
    [
        (
            "cuDeviceGetAttribute(MANAGED_MEMORY)",
            "CUDA_ERROR_UNKNOWN",
            "jetmem: CUDA driver error while probing the device: cuDeviceGetAttribute(MANAGED_MEMORY) failed: "
            "CUDA_ERROR_UNKNOWN",
        ),
        (
            "cuDevicePrimaryCtxRetain",
            "CUDA_ERROR_OUT_OF_MEMORY",
            "jetmem: could not open CUDA device 0: cuDevicePrimaryCtxRetain failed: CUDA_ERROR_OUT_OF_MEMORY",
        ),
    ],
    ids=["probe", "context"],
)
def test_failing_device_open_is_a_skip_naming_the_error(
    pytester: pytest.Pytester, fake_driver: FakeDriver, call: str, error: str, reason: str
) -> None:
    fake_driver.inject(call, error)
    pytester.makepyfile(UNAVAILABLE_TESTS)
    reprec = pytester.inline_run()
    assert reprec.ret == pytest.ExitCode.OK
    outcomes = results(reprec)
    assert outcomes["test_plain"][0] == "passed"
    for mode in MODES:
        outcome, text = outcomes[f"test_gpu[{mode}]"]
        assert outcome == "skipped"
        assert skip_reason(text).startswith(reason), text


def test_unavailable_in_a_real_subprocess(pytester: pytest.Pytester) -> None:
    """The conftest route (for runpytest_subprocess): the fake is installed by the child's conftest."""
    pytester.makeconftest(conftest_source("no_device"))
    pytester.makepyfile(UNAVAILABLE_TESTS)
    result = pytester.runpytest_subprocess("-ra")
    result.assert_outcomes(passed=1, skipped=5)
    result.stdout.fnmatch_lines(["SKIPPED [[]*] *jetmem: no CUDA device: *"])
    result.stdout.fnmatch_lines(["jetmem: GPU tests will be skipped: no CUDA device: *"])


@pytest.mark.parametrize(
    ("profile", "skipped_mode", "reason"),
    [
        ("orin_no_map_host", "zero_copy", "jetmem: zero_copy: the device reports CAN_MAP_HOST_MEMORY=0"),
        ("orin_no_managed", "managed", "jetmem: managed: the device reports MANAGED_MEMORY=0"),
    ],
)
def test_unsupported_mode_is_skipped_with_the_attribute(
    pytester: pytest.Pytester, install_fake_driver: InstallFake, profile: str, skipped_mode: str, reason: str
) -> None:
    fake = install_fake_driver(profile)
    pytester.makepyfile(
        """
        import numpy as np
        import pytest

        @pytest.mark.memmode
        def test_x(jetmem):
            np.testing.assert_array_equal(jetmem.array([1, 2, 3]).to_numpy(), [1, 2, 3])
        """
    )
    reprec = pytester.inline_run()
    outcomes = results(reprec)
    for mode in MODES:
        outcome, text = outcomes[f"test_x[{mode}]"]
        if mode == skipped_mode:
            assert outcome == "skipped"
            assert skip_reason(text).startswith(reason), text
        else:
            assert outcome == "passed", text
    assert not any(a.kind == ALLOC_KIND[skipped_mode] for a in fake.freed)


# -- sticky errors ----------------------------------------------------------------------------------------
STICKY_WAYS = {
    # a kernel writes through a freed buffer: the fault shows at the next synchronisation
    "use-after-free": """
        buf = jetmem.zeros(64)
        ptr = buf.ptr
        buf.free()
        jetmem.kernel("stream_fill").launch(1, 64, (ptr, np.uint64(64), np.float32(1)))
        jetmem.synchronize()
    """,
    "sync-returns-it": """
        jetmem.zeros(64)
        driver.get().inject("cuStreamSynchronize", "CUDA_ERROR_ILLEGAL_ADDRESS")
        jetmem.synchronize()
    """,
    "launch-returns-it": """
        x = jetmem.zeros(64)
        driver.get().inject("cuLaunchKernel", "CUDA_ERROR_LAUNCH_FAILED")
        jetmem.kernel("stream_fill").launch(1, 64, (x, np.uint64(64), np.float32(1)))
    """,
}


@pytest.mark.parametrize("way", list(STICKY_WAYS))
def test_sticky_error_costs_only_its_own_test(pytester: pytest.Pytester, fake_driver: FakeDriver, way: str) -> None:
    """The faulting test fails; later GPU tests run in a fresh session (plugin.relay), never again here."""
    body = "\n".join("    " + line.strip() for line in STICKY_WAYS[way].strip().splitlines())
    # the fresh session is a subprocess: it installs a fake of its own (this process keeps the outer test's)
    pytester.makeconftest(
        "import os\n"
        f"if {CHANNEL_ENV!r} in os.environ:\n"
        + "\n".join("    " + line for line in conftest_source("dgpu").splitlines())
        + "\n"
    )
    pytester.makepyfile(
        test_sticky="import numpy as np\nimport pytest\nfrom pytest_jetmem.cuda import driver\n\n\n"
        '@pytest.mark.memmode("device")\n'
        f"def test_a_faults(jetmem):\n{body}\n\n\n"
        "@pytest.mark.memmode\n"
        "def test_b_later(jetmem):\n    jetmem.zeros(4)\n\n\n"
        "def test_c_plain():\n    assert 1 + 1 == 2\n"
    )
    error = "CUDA_ERROR_LAUNCH_FAILED" if way == "launch-returns-it" else "CUDA_ERROR_ILLEGAL_ADDRESS"
    reprec = pytester.inline_run()
    assert reprec.ret == pytest.ExitCode.TESTS_FAILED  # the session ends normally
    outcomes = results(reprec)
    outcome, text = outcomes["test_a_faults[device]"]
    assert outcome == "failed"
    assert error in text
    for mode in MODES:
        outcome, text = outcomes[f"test_b_later[{mode}]"]
        assert outcome == "passed", (mode, text)  # in the fresh session
    assert outcomes["test_c_plain"][0] == "passed"
    assert not any(name.endswith("teardown") for name in outcomes), outcomes
    # after the fault no later test touched the device: no allocation, module load or launch
    assert fake_driver.sticky == error and fake_driver.sticky_at is not None
    later = {c.api for c in fake_driver.calls[fake_driver.sticky_at :]}
    assert later.isdisjoint({"cuMemAlloc", "cuMemAllocManaged", "cuMemHostAlloc", "cuModuleLoadData", "cuLaunchKernel"})
