"""What ``pytest-jetmem history publish`` costs (issue "See the history"): the time to publish the site of a store of
1000 commits x 200 measurements, and the site's size (target: 30 s and 20 MB on the 2-core development machine).

The store is made as ``benchmarks/history_cost.py`` makes it (:func:`history_cost.make_session`: 50 tests in 4
memory modes, 0.5% session offsets, a 5% step in a tenth of the series at commit 700), and the change points of
half the stepped series are acknowledged, so that both kinds are drawn. :func:`pytest_jetmem.history.site.publish`
is timed in this process (``prepare_s``: reading the store, the change points and the fleet matrix, until the
first page is written; ``publish_s``: all of it, the swap into place included), three times (the median counts).

    python benchmarks/history_publish_cost.py --out benchmarks/results/2026-11-26-history-cost
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import sys
import time
import zlib
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from history_cost import make_session

from pytest_jetmem.history.analysis import analysed, changes
from pytest_jetmem.history.site import publish
from pytest_jetmem.history.store import Store, open_store
from pytest_jetmem.history.timeline import read_history


def build(path: Path, commits: int, series: int) -> None:
    """The store: ``commits`` sessions of ``series`` measurements, and acknowledgements of half the steps."""
    path.unlink(missing_ok=True)
    with open_store(str(path)) as store:
        for c in range(commits):
            store.add(make_session(c, series, 1))
        for ch in changes(read_history(store, "main")):
            if ch.after.uid.endswith("-700") and zlib.crc32(ch.series.nodeid.encode()) % 2 == 0:
                store.ack(ch.series, ch.device, ch.after.uid, ch.after.context.commit, "accepted: tiling change",
                          "bench")


def timed_publish(store: Store, out: Path) -> dict[str, float | int]:
    """One publish into ``out`` (replaced): its time, the time to its first page and the pages written."""
    marks: list[float] = []
    t = time.perf_counter()
    pages = publish(store, *analysed(read_history(store, "main")), out, repo_url="https://github.com/example/project",
                    progress=lambda done, total: marks.append(time.perf_counter() - t))
    return {"publish_s": time.perf_counter() - t, "prepare_s": marks[0], "files": len(pages)}


def site_size(out: Path) -> dict[str, float | int]:
    sizes = sorted(p.stat().st_size for p in out.iterdir() if p.is_file())
    return {"site_bytes": sum(sizes), "site_mb": sum(sizes) / 1e6, "largest_file_bytes": sizes[-1],
            "median_file_bytes": int(statistics.median(sizes))}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--commits", type=int, default=1000)
    ap.add_argument("--series", type=int, default=200)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--store", type=Path, default=Path("/tmp/jetmem-publish-cost.sqlite"),
                    help="where the store is made (kept: a second run reuses it; peak_rss_mb is then publish's)")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.store
    built = not path.exists()
    if built:
        t = time.perf_counter()
        build(path, args.commits, args.series)
        print(f"built the store in {time.perf_counter() - t:.0f} s", file=sys.stderr)
    site = path.with_name(path.stem + "-site")
    shutil.rmtree(site, ignore_errors=True)
    with open_store(str(path), create=False) as store:
        runs = [timed_publish(store, site) for _ in range(args.repeat)]
        sessions, n_series, _ = store.counts()
        found = changes(read_history(store, "main"))
    result = {
        "commits": sessions,
        "series": n_series,
        "change_points": len(found),
        "acknowledged": sum(1 for c in found if c.ack is not None),
        "cpus": os.cpu_count(),
        "python": sys.version.split()[0],
        "publish_s": {"median": statistics.median(r["publish_s"] for r in runs),
                      "runs": [round(r["publish_s"], 3) for r in runs]},
        "prepare_s": statistics.median(r["prepare_s"] for r in runs),
        "files": runs[0]["files"],
        **site_size(site),
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "peak_rss_includes_build": built,
        "targets": {"publish_s": 30, "site_mb": 20},
    }
    shutil.rmtree(site)
    (args.out / "publish.json").write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
