"""How the ``jetmem`` fixture builds a handle, and what it keeps for the runners.

Everything a handle needs is given to its constructor (:class:`pytest_jetmem.handle.Jetmem`): the workspace it
holds (built here with the observers of ``--jetmem-tegra-strict`` and of the no-GPU check), the session's stopping
rule, the channel of ``--jetmem-against``, and a sink for its measure calls. The fixture records that recipe, the
workspace and the calls in the item's stash, so the runners (:mod:`pytest_jetmem.plugin.rerun`, the coherence
half, teardown) build further handles the same way, sample the calls again and reach the workspace from here,
never through the handle, whose public members are the documented ones alone.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:  # imported where used: loading the plugin imports neither the handle nor numpy
    from pytest_jetmem.cuda.session import CudaSession
    from pytest_jetmem.cuda.workspace import WorkObserver, Workspace
    from pytest_jetmem.handle import Jetmem
    from pytest_jetmem.measure.duet import Duet
    from pytest_jetmem.measure.energy import EnergySetup
    from pytest_jetmem.measure.stats import StoppingRule
    from pytest_jetmem.measure.timing import MeasureCall, Measurement


@dataclass(frozen=True)
class HandleRecipe:
    """What every ``jetmem`` handle of one item is built from (the first, reruns, reference runs)."""

    session: CudaSession
    stopping_rule: StoppingRule | None = None
    duet: Duet | None = None
    energy: EnergySetup | None = None

    def open(self, mode: str, nodeid: str, observers: Sequence[WorkObserver] = ()) -> OpenHandle:
        """A new workspace in ``mode`` and the handle that holds it; its measure calls are collected in the
        result (the caller closes it: :meth:`OpenHandle.close`)."""
        from pytest_jetmem.cuda.workspace import Workspace
        from pytest_jetmem.handle import Jetmem

        workspace = Workspace(self.session, mode, nodeid, observers=observers)
        opened = OpenHandle(self, workspace)
        opened.handle = Jetmem(
            workspace, stopping_rule=self.stopping_rule, duet=self.duet, energy=self.energy, on_measure=opened.sink
        )
        return opened


@dataclass(eq=False)
class OpenHandle:
    """A handle, the workspace it holds (what the runners and teardown use: its buffers, its closing, its
    device's state) and the measure calls it made, in call order."""

    recipe: HandleRecipe
    workspace: Workspace
    handle: Jetmem = field(init=False)
    calls: list[MeasureCall] = field(default_factory=list)

    def sink(self, measurement: Measurement, call: MeasureCall) -> None:
        self.calls.append(call)

    def close(self) -> list[str]:
        """Free every live buffer of the handle; the problems met (empty: none)."""
        return self.workspace.close()


_OPENED = pytest.StashKey[OpenHandle]()


def remember(item: pytest.Item, opened: OpenHandle) -> None:
    """The fixture's handle of ``item`` (for :func:`opened_of`)."""
    item.stash[_OPENED] = opened


def opened_of(item: pytest.Item) -> OpenHandle | None:
    """The handle the ``jetmem`` fixture built for ``item``, with its recipe and calls (None: there is none)."""
    return item.stash.get(_OPENED, None)


@dataclass
class HandleExtras:
    """What other halves give every ``jetmem`` handle of the session, registered in their ``pytest_configure``
    (the halves import none of each other): ``--jetmem-against``'s channel, ``--jetmem-tegra-strict``'s tracker."""

    duet: Callable[[], Duet | None] | None = None
    observer_factories: list[Callable[[Any, str], list[WorkObserver]]] = field(default_factory=list)

    def current_duet(self) -> Duet | None:
        return self.duet() if self.duet is not None else None

    def observers(self, stream: Any, nodeid: str) -> list[WorkObserver]:
        """The observers a handle on ``stream`` for test ``nodeid`` is built with."""
        return [o for factory in self.observer_factories for o in factory(stream, nodeid)]


_EXTRAS = pytest.StashKey[HandleExtras]()


def extras(config: pytest.Config) -> HandleExtras:
    """The session's :class:`HandleExtras` (made on first use)."""
    found = config.stash.get(_EXTRAS, None)
    if found is None:
        found = config.stash[_EXTRAS] = HandleExtras()
    return found
