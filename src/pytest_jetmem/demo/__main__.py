"""``python -m pytest_jetmem.demo``: the same as the ``pytest-jetmem-demo`` command."""

from pytest_jetmem.demo import main

raise SystemExit(main())
