"""No stray ``.benchmarks``: pytest-benchmark (installed with pytest-jetmem, for ``--jetmem-benchmark-json``) makes
its storage folder when it is configured, in every run, whether or not anything is saved; this plugin removes the
folders that this run made for it where they are still empty at the end of the run.

A folder that existed before the run, or that holds saved benchmarks (``--benchmark-autosave``,
``--benchmark-save``), stays as it is; storage that is not a folder (``--benchmark-storage=elasticsearch+...``) is
not touched.
"""

from __future__ import annotations

from pathlib import Path

import pytest

#: pytest-benchmark's ``--benchmark-storage`` (its ``dest``); its default is ``file://./.benchmarks``.
STORAGE_OPTION = "benchmark_storage"
FILE_SCHEME = "file://"

_MADE_HERE = pytest.StashKey[tuple[Path, ...]]()


def storage_folder(config: pytest.Config) -> Path | None:
    """The absolute folder of pytest-benchmark's file storage in this run; None where pytest-benchmark is not
    installed or stores elsewhere (a URL of another scheme)."""
    value = config.getoption(STORAGE_OPTION, None)
    if not isinstance(value, str):
        return None
    if value.startswith(FILE_SCHEME):
        value = value[len(FILE_SCHEME) :]
    elif "://" in value:
        return None
    return Path(value).absolute()  # relative to the current directory, as pytest-benchmark reads it


def missing_folders(folder: Path | None) -> tuple[Path, ...]:
    """``folder`` and its parents that do not exist yet, innermost first (empty where ``folder`` exists)."""
    missing: list[Path] = []
    while folder is not None and not folder.exists() and folder != folder.parent:
        missing.append(folder)
        folder = folder.parent
    return tuple(missing)


def note_folders(config: pytest.Config) -> None:
    """Before pytest-benchmark makes its folder (the core's ``pytest_configure``, tried first): note the folders it
    will make."""
    config.stash[_MADE_HERE] = missing_folders(storage_folder(config))


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    """Remove the folders this run made, innermost first, while they are empty (rmdir removes no file)."""
    for folder in config.stash.get(_MADE_HERE, ()):
        try:
            folder.rmdir()
        except OSError:
            return
