"""A user's test file, the quickstart's (docs/quickstart.md) and one more test, run through pytest on the GPU: it
passes in every mode."""

from quickstart import quickstart_test_file

USER_FILE = (
    quickstart_test_file()
    + """

@pytest.mark.memmode("device", "managed")
@pytest.mark.parametrize("a", [0.5, 3.0])
def test_scale_typed_python_numbers(jetmem, memmode, a):
    x = jetmem.array(np.ones(1000, dtype=np.float32))
    y = jetmem.zeros(1000)
    jetmem.compile(SRC, "scale").launch(4, 256, (x, y, a, 1000))   # plain numbers take the declared types
    assert y.mode == memmode
    np.testing.assert_array_equal(y.to_numpy(), a)
"""
)


def test_user_file_passes_in_every_mode(pytester, jetmem_device, tmp_path):
    pytester.makepyfile(test_user=USER_FILE)
    result = pytester.runpytest_subprocess("-v", f"--jetmem-cache-dir={tmp_path / 'cache'}")
    result.assert_outcomes(passed=7)
    result.stdout.fnmatch_lines(
        [
            "*test_scale?device? PASSED*",
            "*test_scale?managed? PASSED*",
            "*test_scale?zero_copy? PASSED*",
            "*test_scale_typed_python_numbers?0.5-device? PASSED*",
        ]
    )
    # a second session compiles nothing: every kernel comes from the disk cache
    cached = list((tmp_path / "cache").glob("*.cubin"))
    assert len(cached) == 1
    mtime = cached[0].stat().st_mtime_ns
    result = pytester.runpytest_subprocess(f"--jetmem-cache-dir={tmp_path / 'cache'}")
    result.assert_outcomes(passed=7)
    assert cached[0].stat().st_mtime_ns == mtime
    assert len(list((tmp_path / "cache").glob("*.cubin"))) == 1


def test_cli_mode_selection_on_gpu(pytester, jetmem_device):
    pytester.makepyfile(test_user=USER_FILE)
    result = pytester.runpytest_subprocess("--jetmem-modes=managed")
    result.assert_outcomes(passed=3, deselected=4)
