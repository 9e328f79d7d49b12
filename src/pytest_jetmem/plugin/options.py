"""The plugin's options and ini keys: one ``--help`` group, one way to resolve "the option, else the ini key".

Every setting ``<name>`` has the option ``--jetmem-<name>`` (dest ``jetmem_<name>``) and, where it makes
sense, the ini key ``jetmem_<name>``; the option wins when given. A bad value is a ``pytest.UsageError`` that
names the option or ini key, the value and what was expected.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

import pytest

from pytest_jetmem.measure.baseline import BaselineStore

GROUP = "jetmem"
GROUP_DESCRIPTION = "memory-mode testing of CUDA code (pytest-jetmem)"


def option_group(parser: pytest.Parser) -> pytest.OptionGroup:
    """The one ``--help`` group every half of the plugin adds its options to."""
    return parser.getgroup(GROUP, GROUP_DESCRIPTION)


def option_name(name: str) -> str:
    """``fail`` -> ``--jetmem-fail``."""
    return f"--jetmem-{name.replace('_', '-')}"


def ini_name(name: str) -> str:
    """``fail`` -> ``ini option jetmem_fail`` (as messages say it)."""
    return f"ini option jetmem_{name}"


def _ini(config: pytest.Config, name: str) -> Any:
    try:
        return config.getini(f"jetmem_{name}")
    except (ValueError, pytest.UsageError) as exc:  # a bool key pytest could not read ("invalid truth value 'maybe'")
        raise pytest.UsageError(f"{ini_name(name)}: expected true or false, got {exc}") from None


def raw(config: pytest.Config, name: str, *, ini: bool = True) -> tuple[Any, str]:
    """(value, where it came from): the option if given, else the ini key (``ini=False``: option only)."""
    value = config.getoption(f"jetmem_{name}", None)
    if value is not None or not ini:
        return value, option_name(name)
    return _ini(config, name), ini_name(name)


def get_str(config: pytest.Config, name: str, *, ini: bool = True) -> str | None:
    """A text setting; an empty ini value is None."""
    value, _ = raw(config, name, ini=ini)
    if value is None:
        return None
    text = str(value).strip()
    return text or None


def get_bool(config: pytest.Config, name: str) -> bool:
    """A flag: the option if given (store_true with default None), else the ini key (type bool)."""
    value, _ = raw(config, name)
    return bool(value)


def get_float(config: pytest.Config, name: str, *, minimum: float, what: str) -> float:
    """A finite number >= ``minimum``; ``what`` describes it for the error ("a percentage >= 0")."""
    value, source = raw(config, name)
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise pytest.UsageError(f"{source}: expected {what}, got {value!r}") from None
    if not math.isfinite(number) or number < minimum:  # the value as given (an ini key's text: "-1e9")
        raise pytest.UsageError(f"{source}: expected {what}, got {value!r}")
    return number


def get_int(config: pytest.Config, name: str, *, minimum: int, what: str) -> int:
    """An integer >= ``minimum``."""
    value, source = raw(config, name)
    try:
        number = int(str(value).strip()) if isinstance(value, str) else value
    except ValueError:
        raise pytest.UsageError(f"{source}: expected {what}, got {value!r}") from None
    if isinstance(number, bool) or not isinstance(number, int) or number < minimum:
        raise pytest.UsageError(f"{source}: expected {what}, got {value!r}")
    return number


def baseline_name(config: pytest.Config, name: str, *, ini: bool = True) -> str | None:
    """The baseline name setting ``name`` (``save``, ``compare``), checked before the session starts.

    None where it is not set (an empty ini value is not set); a name given empty (``--jetmem-save=``) or
    breaking the naming rules (:meth:`BaselineStore.check_name`) is a UsageError naming the setting.
    """
    value, source = raw(config, name, ini=ini)
    if value is None:
        return None
    text = str(value).strip()
    if not text:
        if source.startswith("--"):
            raise pytest.UsageError(f"{source}: expected a baseline name, got {value!r}")
        return None
    try:
        return BaselineStore.check_name(text)
    except ValueError as exc:
        raise pytest.UsageError(f"{source}={text}: {exc}") from None


def check_output_path(path: str | os.PathLike[str], source: str) -> Path:
    """``path`` as a Path if a file can be written there at the end of the session, else a UsageError.

    Refused: an existing directory, a path below a file, a folder this process may not write in. The
    folder is not created here (writing does that), only the nearest existing one checked.
    """
    target = Path(path)
    if target.is_dir():
        raise pytest.UsageError(f"{source}={path}: is a directory; expected a file path")
    parent = target.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        raise pytest.UsageError(f"{source}={path}: {parent} is not a directory, so nothing can be written there")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise pytest.UsageError(f"{source}={path}: cannot write in {parent} (permission denied)")
    return target


def cache_dir(config: pytest.Config) -> str | None:
    """The NVRTC kernel cache directory set (``--jetmem-cache-dir``, else the ini key; None: the default), checked
    with ``$JETMEM_CACHE_DIR``: a path that is a file, or lies below one, is a UsageError naming the setting."""
    chosen = get_str(config, "cache_dir")
    _, source = raw(config, "cache_dir")
    path = chosen
    if path is None:
        path, source = os.environ.get("JETMEM_CACHE_DIR", "").strip() or None, "JETMEM_CACHE_DIR"
    if path is not None:
        target = Path(path).expanduser()
        if target.exists() and not target.is_dir():
            raise pytest.UsageError(f"{source}={path}: is a file; expected a directory for the NVRTC kernel cache")
        parent = target.parent
        while not parent.exists() and parent != parent.parent:
            parent = parent.parent
        if not parent.is_dir():
            raise pytest.UsageError(
                f"{source}={path}: {parent} is a file, so the NVRTC kernel cache cannot be made there"
            )
    return chosen
