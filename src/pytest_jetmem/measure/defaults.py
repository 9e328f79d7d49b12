"""The measurement layer's defaults, each written once: the plugin's options, their help texts and the functions
that take them as arguments read them here.

Imports nothing, so that a module which must stay light can read a default without loading numpy (once the
``measure`` package itself is imported lazily; until then the plugin's options keep stand-ins that a test
compares with these).
"""

from __future__ import annotations

__all__ = ["DEFAULT_FAIL_PCT", "WINDOW_SESSIONS"]

#: The regression threshold, in percent of the baseline's median: a change is called only past it
#: (``--jetmem-fail``, ini ``jetmem_fail``; ``--jetmem-against`` without the runtime half).
DEFAULT_FAIL_PCT = 5.0

#: Sessions a baseline keeps by default when sessions are appended (the newest; a rolling window:
#: ``--jetmem-window``, ini ``jetmem_window``).
WINDOW_SESSIONS = 10
