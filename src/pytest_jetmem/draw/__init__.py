"""How pytest-jetmem draws, for the session report (:mod:`pytest_jetmem.report`) and the history site
(:mod:`pytest_jetmem.history.site`) alike: one SVG module (:mod:`~.svg`: scales, ticks, labels placed without
overlap, accessibility) and one page frame with one escaping rule (:mod:`~.page`). Needs neither pytest nor a GPU;
the styles of the memory modes are the registry's (:mod:`pytest_jetmem.cuda.mode_styles`)."""
