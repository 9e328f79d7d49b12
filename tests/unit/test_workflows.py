"""The GitHub workflow and Dependabot files: valid against their published schemas, and shaped as documented."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
WORKFLOWS = sorted((ROOT / ".github" / "workflows").glob("*.yml"))
yaml = pytest.importorskip("yaml", reason="PyYAML comes with check-jsonschema (the dev extra)")


def _checker() -> list[str]:
    exe = shutil.which("check-jsonschema") or str(Path(sys.executable).with_name("check-jsonschema"))
    if not Path(exe).exists():
        pytest.skip("check-jsonschema is not installed (pip install -e '.[dev]')")
    return [exe]


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: p.name)
def test_workflow_matches_the_github_schema(path: Path) -> None:
    proc = subprocess.run(
        [*_checker(), "--builtin-schema", "vendor.github-workflows", str(path)], capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_dependabot_matches_its_schema() -> None:
    path = ROOT / ".github" / "dependabot.yml"
    proc = subprocess.run(
        [*_checker(), "--builtin-schema", "vendor.dependabot", str(path)], capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    ecosystems = {u["package-ecosystem"] for u in yaml.safe_load(path.read_text())["updates"]}
    assert {"pip", "github-actions"} <= ecosystems


def test_ci_has_cpu_docs_and_jetson_jobs() -> None:
    jobs = yaml.safe_load((ROOT / ".github" / "workflows" / "ci.yml").read_text())["jobs"]
    assert {"cpu", "docs", "jetson"} <= set(jobs)
    runs_on = jobs["jetson"]["runs-on"]
    assert "self-hosted" in runs_on and "jetson" in runs_on
    steps = " ".join(str(s.get("run", "")) for s in jobs["cpu"]["steps"])
    assert "pytest" in steps and "ruff" in steps
    assert "mkdocs build --strict" in " ".join(str(s.get("run", "")) for s in jobs["docs"]["steps"])


def test_release_builds_wheel_and_sdist() -> None:
    doc = yaml.safe_load((ROOT / ".github" / "workflows" / "release.yml").read_text())
    runs = " ".join(str(s.get("run", "")) for job in doc["jobs"].values() for s in job["steps"])
    assert "python -m build" in runs  # both the sdist and the wheel
    assert "pytest-jetmem-demo" in runs
