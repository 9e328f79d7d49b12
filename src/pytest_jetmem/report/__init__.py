"""The HTML report (``--jetmem-report``): a session's measurement rows in, one self-contained page and its JSON
twin out. GPU-free and pytest-free; the pytest glue is :mod:`pytest_jetmem.plugin.report`.

- :mod:`~pytest_jetmem.report.rows`: the data: rows grouped per test, trends across saved baselines
  (:func:`load_trends`), the JSON twin's document (:func:`report_document`).
- :mod:`~pytest_jetmem.report.charts`: a chart per test, matplotlib PNG where it is installed, else plain SVG.
- :mod:`~pytest_jetmem.report.html`: the page (:func:`render_html`) and writing it with its twin
  (:func:`write_report`).
"""

from __future__ import annotations

from pytest_jetmem.report.charts import matplotlib_available
from pytest_jetmem.report.html import json_path_for, render_html, write_report
from pytest_jetmem.report.rows import Group, TrendPoint, Trends, group_rows, load_trends, report_document

__all__ = [
    "Group",
    "TrendPoint",
    "Trends",
    "group_rows",
    "json_path_for",
    "load_trends",
    "matplotlib_available",
    "render_html",
    "report_document",
    "write_report",
]
