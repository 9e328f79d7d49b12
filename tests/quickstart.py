"""The quickstart's test file, as docs/quickstart.md shows it ("3. Write a test"): the one home of that text.

The plain-install check (tests/unit/test_plain_install.py) and the GPU suite's user-style test
(tests/gpu/test_user_style_gpu.py) both run it, so what a user copies from the quickstart is what is tested.
"""

from __future__ import annotations

import re
from pathlib import Path

QUICKSTART_MD = Path(__file__).resolve().parents[1] / "docs" / "quickstart.md"
SECTION = "## 3. Write a test"


def quickstart_test_file() -> str:
    """The one ``python`` code block of the quickstart's "Write a test" section (an AssertionError says what is
    missing where the page no longer has exactly one there)."""
    text = QUICKSTART_MD.read_text(encoding="utf-8")
    if f"\n{SECTION}\n" not in text:
        raise AssertionError(f"{QUICKSTART_MD}: no section {SECTION!r}")
    section = text.split(f"\n{SECTION}\n", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"^```python\n(.*?)^```$", section, flags=re.S | re.M)
    if len(blocks) != 1:
        raise AssertionError(f"{QUICKSTART_MD}: expected one python block under {SECTION!r}, found {len(blocks)}")
    return str(blocks[0])
