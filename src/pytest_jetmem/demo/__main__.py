"""``python -m pytest_jetmem.demo``: the same as the ``pytest-jetmem-demo`` command."""

from . import main

raise SystemExit(main())
