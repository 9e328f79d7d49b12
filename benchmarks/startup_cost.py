"""What loading the plugin costs a test run that does not use it (issue 17 item 6).

In a fresh temporary directory with no conftest and one trivial test file, runs ``pytest`` alternately with the
plugin (as installed, through its ``jetmem`` entry point) and without it (``-p no:jetmem``), ``--runs`` times
each, and prints both medians and the median of the paired differences. Then runs the interpreter with
``-X importtime`` under the plugin and lists the slowest imports that pytest_jetmem set off (its own modules and
what they import: numpy, cuda.bindings, ...), cumulative milliseconds, largest first. Needs no GPU::

    python benchmarks/startup_cost.py [--runs 9] [--top 15]

It measures the pytest_jetmem that the interpreter imports: to measure another tree (a revision exported with
``git archive``), put its ``src`` first on ``PYTHONPATH``. Where other work shares the machine, the CPU time is the
steadier figure. With ``PYTHONDONTWRITEBYTECODE`` set (as in ``.ci/run``) every run compiles the plugin's modules
from source, which a user's runs (with ``__pycache__``) do not.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TRIVIAL_TEST = "def test_nothing():\n    assert 1 + 1 == 2\n"


def pytest_command(*extra: str) -> list[str]:
    # no -q: pytest shows its header only at the default verbosity, and the header is where the plugin once
    # opened the device
    return [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *extra, "test_trivial.py"]


def timed(command: list[str], cwd: Path, env: dict[str, str]) -> tuple[float, float]:
    """(wall seconds, CPU seconds: user + system) of one run of ``command``.

    The CPU time is the steadier figure on a machine that other work shares: it leaves out the time the run
    waited for a core.
    """
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    run = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, check=False)
    elapsed = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if run.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed ({run.returncode}):\n{run.stdout}{run.stderr}")
    return elapsed, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def paired_runs(
    cwd: Path, env: dict[str, str], runs: int
) -> tuple[list[tuple[float, float]], list[tuple[float, float]]]:
    """``runs`` pairs of (wall, CPU) seconds, alternating which of the two goes first, after an untimed warm-up of
    each (which also writes the bytecode caches)."""
    with_plugin, without_plugin = pytest_command(), pytest_command("-p", "no:jetmem")
    timed(with_plugin, cwd, env)
    timed(without_plugin, cwd, env)
    loaded, unloaded = [], []
    for i in range(runs):
        if i % 2 == 0:
            loaded.append(timed(with_plugin, cwd, env))
            unloaded.append(timed(without_plugin, cwd, env))
        else:
            unloaded.append(timed(without_plugin, cwd, env))
            loaded.append(timed(with_plugin, cwd, env))
    return loaded, unloaded


def jetmem_imports(cwd: Path, env: dict[str, str], top: int) -> list[tuple[int, str]]:
    """(cumulative us, module) of the imports under pytest_jetmem's, from ``-X importtime``, largest first.

    Listed: pytest_jetmem's own modules and the modules one of them imports directly (``numpy``, not numpy's
    submodules); a module already imported by someone else costs nothing here and is not listed.
    """
    run = subprocess.run(
        [sys.executable, "-X", "importtime", *pytest_command()[1:]],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    rows: list[tuple[int, int, str]] = []  # (depth, cumulative us, module), in the order printed
    for line in run.stderr.splitlines():
        if not line.startswith("import time:") or "cumulative" in line:
            continue
        _, cumulative, name = line[len("import time:") :].split("|", 2)
        stripped = name.strip()
        depth = (len(name.rstrip()) - len(stripped) - 1) // 2  # one space after the bar, then two per level
        rows.append((depth, int(cumulative), stripped))
    found: dict[str, int] = {}
    # A module is printed after everything it imported: walked backwards, each row's importer is the nearest
    # row above it on the stack. Counted: pytest_jetmem's modules, and what one of them imports directly
    # (numpy, not numpy's own submodules).
    stack: list[tuple[int, str]] = []
    for depth, cumulative, name in reversed(rows):
        while stack and stack[-1][0] >= depth:
            stack.pop()
        importer = stack[-1][1] if stack else ""
        if name.startswith("pytest_jetmem") or importer.startswith("pytest_jetmem"):
            found[name] = max(cumulative, found.get(name, 0))
        stack.append((depth, name))
    return sorted(((us, name) for name, us in found.items()), reverse=True)[:top]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=9, help="timed runs with, and as many without, the plugin")
    parser.add_argument("--top", type=int, default=15, help="how many of the imports to list")
    args = parser.parse_args(argv)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTEST_ADDOPTS", "PYTEST_PLUGINS")}
    with tempfile.TemporaryDirectory(prefix="jetmem-startup-") as tmp:
        cwd = Path(tmp)
        (cwd / "test_trivial.py").write_text(TRIVIAL_TEST)
        loaded, unloaded = paired_runs(cwd, env, args.runs)
        print(f"pytest on one trivial test, {args.runs} paired runs ({sys.executable}), medians:")
        for what, i in (("wall", 0), ("CPU", 1)):
            with_it = statistics.median(r[i] for r in loaded)
            without = statistics.median(r[i] for r in unloaded)
            cost = statistics.median(a[i] - b[i] for a, b in zip(loaded, unloaded, strict=True))
            print(f"  {what:4} with the plugin {with_it:8.3f}   with -p no:jetmem {without:8.3f}   cost {cost:+.3f}")
        print("  (cost: the median of the paired differences)")
        if env.get("PYTHONDONTWRITEBYTECODE"):
            print(
                "  bytecode caches off (PYTHONDONTWRITEBYTECODE): every run compiles the plugin's modules from source"
            )
        else:
            print("  bytecode caches on: the plugin's modules (assert-rewritten by pytest) load from __pycache__")
        print(f"\nslowest imports under pytest_jetmem's (python -X importtime, cumulative), top {args.top}:")
        for us, name in jetmem_imports(cwd, env, args.top):
            print(f"  {us / 1000:8.1f} ms  {name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
