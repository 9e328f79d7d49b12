"""The results store and what is read from it: every session remembered, change points with their cause.

Modules: :mod:`~.context` (the code a session measured), :mod:`~.model` (what a store holds), :mod:`~.schema`
(its tables and migrations), :mod:`~.codec` (samples and records, compactly), :mod:`~.store` (SQLite and
PostgreSQL). Docs: docs/history.md.
"""
