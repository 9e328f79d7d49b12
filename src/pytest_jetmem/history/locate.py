"""Which results store the ``pytest-jetmem`` command reads: the same one pytest stores in, found the same way.

pytest takes ``--jetmem-store``, else ``$JETMEM_STORE``, else the ini key ``jetmem_store`` of the rootdir's
configuration file, a relative path being relative to the rootdir, and a bare ``--jetmem-store`` is
``.jetmem/history.sqlite`` under the rootdir (docs/history.md). The command takes ``--store``, then the same.
The rootdir and its configuration file are found as pytest finds them when run with no arguments from the current
folder (https://docs.pytest.org/en/stable/reference/customize.html#finding-the-rootdir): the first of
``pytest.ini``, ``.pytest.ini``, ``pyproject.toml`` (with a ``[tool.pytest.ini_options]`` or ``[tool.pytest]``
table), ``tox.ini`` (``[pytest]``), ``setup.cfg`` (``[tool:pytest]``) in the folder or one above it. GPU- and
pytest-free.

Hand-written, not pytest's own finder (``_pytest.config.findpaths``): it is private, with no promise between pytest
releases, so these lines follow its documented rules.
"""

from __future__ import annotations

import configparser
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from pytest_jetmem.history.location import DEFAULT_PATH

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

__all__ = ["StoreChoice", "choose_store", "find_rootdir"]

#: The ini key pytest reads the store from (plugin/options.py registers it).
INI_KEY = "jetmem_store"


@dataclass(frozen=True)
class StoreChoice:
    """The store to read: its text (a path or URL), where it came from (for messages) and the folder a relative
    path is relative to."""

    text: str
    source: str
    base: Path


def _ini_value(path: Path) -> tuple[bool, str | None]:
    """(whether ``path`` is a pytest configuration file, the value of ``jetmem_store`` in it)."""
    name = path.name
    try:
        if name == "pyproject.toml":
            tool = tomllib.loads(path.read_text(encoding="utf-8")).get("tool", {})
            table = tool.get("pytest", {})
            opts = table.get("ini_options", table) if isinstance(table, dict) else {}
            if not table:
                return False, None
            value = opts.get(INI_KEY)
            return True, None if value is None else str(value)
        parser = configparser.ConfigParser(interpolation=None)
        parser.read(path, encoding="utf-8")
    except (OSError, ValueError, configparser.Error):
        return False, None
    section = {"pytest.ini": "pytest", ".pytest.ini": "pytest", "tox.ini": "pytest", "setup.cfg": "tool:pytest"}[name]
    if not parser.has_section(section):
        return name in ("pytest.ini", ".pytest.ini"), None  # pytest.ini counts even without [pytest]
    return True, parser.get(section, INI_KEY, fallback=None)


def find_rootdir(start: Path) -> tuple[Path, Path | None, str | None]:
    """(rootdir, its configuration file or None, the ``jetmem_store`` value in it or None), from ``start`` up."""
    start = start.resolve()
    for folder in (start, *start.parents):
        for name in ("pytest.ini", ".pytest.ini", "pyproject.toml", "tox.ini", "setup.cfg"):
            path = folder / name
            if path.is_file():
                found, value = _ini_value(path)
                if found:
                    return folder, path, value
    return start, None, None


def choose_store(given: str | None, cwd: Path, environ: Mapping[str, str] | None = None) -> StoreChoice:
    """The store the command reads: ``--store`` (relative to the current folder, as typed), else ``$JETMEM_STORE``,
    else the rootdir's ini key, else the default path under the rootdir (both relative to the rootdir, as pytest)."""
    env = os.environ if environ is None else environ
    if given is not None:
        return StoreChoice(given, "--store", cwd)
    value = env.get("JETMEM_STORE", "").strip()
    rootdir, inifile, ini = find_rootdir(cwd)
    if value:
        return StoreChoice(value, "JETMEM_STORE", rootdir)
    if ini is not None and ini.strip():
        return StoreChoice(ini.strip(), f"{INI_KEY} in {inifile}", rootdir)
    return StoreChoice(DEFAULT_PATH, f"the default under the rootdir {rootdir}", rootdir)
