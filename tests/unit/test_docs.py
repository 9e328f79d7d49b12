"""The documentation site builds with mkdocs in strict mode (broken links and pages missing from the nav fail)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_mkdocs_strict_build(tmp_path: Path) -> None:
    exe = shutil.which("mkdocs") or str(Path(sys.executable).with_name("mkdocs"))
    if not Path(exe).exists():
        pytest.skip("mkdocs is not installed (pip install -e '.[dev]')")
    proc = subprocess.run(
        [exe, "build", "--strict", "--site-dir", str(tmp_path / "site")], cwd=ROOT, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    built = {p.relative_to(tmp_path / "site").as_posix() for p in (tmp_path / "site").rglob("index.html")}
    for page in ("quickstart", "reference", "memory-modes", "jetson-ci", "performance", "coherence", "concurrency"):
        assert f"{page}/index.html" in built, sorted(built)
