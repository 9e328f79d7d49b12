"""Readers of in-process pytester runs shared by the tests of the ``memmode`` half and the CUDA layer beneath it."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from fakes.fake_driver import FakeDriver
from pytest_jetmem.cuda.modes import default_names

MODES = default_names()  # the built-in modes: nothing else is registered when the tests import this
ALLOC_KIND = {"device": "device", "managed": "managed", "zero_copy": "host"}  # fake allocation kind per mode

InstallFake = Callable[..., FakeDriver]


def results(reprec: pytest.HookRecorder) -> dict[str, tuple[str, str]]:
    """Test name -> (outcome, text) of its call, or of its setup where setup did not pass.

    Teardown failures are added under ``"<name> teardown"``. The text of a skip is its reason.
    """
    out: dict[str, tuple[str, str]] = {}
    for rep in reprec.getreports("pytest_runtest_logreport"):
        name = rep.nodeid.split("::", 1)[1]
        text = rep.longrepr[2] if rep.skipped and isinstance(rep.longrepr, tuple) else rep.longreprtext
        if rep.when == "call" or (rep.when == "setup" and not rep.passed):
            out[name] = (rep.outcome, text)
        elif rep.when == "teardown" and not rep.passed:
            out[f"{name} teardown"] = (rep.outcome, text)
    return out


def skip_reason(text: str) -> str:
    return text.removeprefix("Skipped: ")
