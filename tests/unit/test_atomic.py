"""write_atomic: the one way pytest-jetmem writes a file that someone may be reading."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from pytest_jetmem import atomic
from pytest_jetmem.atomic import write_atomic


def test_writes_bytes_and_utf8_text_readable_by_all(tmp_path: Path) -> None:
    write_atomic(tmp_path / "a.bin", b"\x00\x01")
    write_atomic(tmp_path / "b.txt", "Jetson Orin \u2013 30 W")
    assert (tmp_path / "a.bin").read_bytes() == b"\x00\x01"
    assert (tmp_path / "b.txt").read_bytes() == "Jetson Orin \u2013 30 W".encode()
    assert stat.S_IMODE(os.stat(tmp_path / "b.txt").st_mode) == 0o644  # not mkstemp's 0600
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.bin", "b.txt"]  # no temporary file left


def test_a_failed_replace_keeps_the_old_file_and_leaves_no_temporary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "baseline.json"
    target.write_text("old")

    def boom(*args: object) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(atomic.os, "replace", boom)
    with pytest.raises(OSError, match="disk full"):
        write_atomic(target, "new", sync_dir=True)
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["baseline.json"]


def test_a_missing_folder_is_an_error_not_a_silent_skip(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        write_atomic(tmp_path / "absent" / "x.json", "{}")
