"""The results store and what is read from it: every session remembered, change points with their cause.

Modules: :mod:`~.context` (the code a session measured), :mod:`~.model` (what a store holds), :mod:`~.schema`
(its tables and migrations), :mod:`~.codec` (samples and records, compactly), :mod:`~.store` (SQLite and
PostgreSQL), :mod:`~.timeline` (a branch's history, read once), :mod:`~.analysis` (its change points, through
:mod:`~.detections` and :mod:`~.detection_cache`), :mod:`~.site`, :mod:`~.fleet` and :mod:`~.exports` (what is
made of it). Docs: docs/history.md; the map: docs/architecture.md.
"""
