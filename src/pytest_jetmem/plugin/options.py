"""The plugin's options and ini keys: one table, one ``--help`` group, one resolver ("the option, else the ini key").

Every setting ``<name>`` is a row of :data:`SETTINGS`: the option ``--jetmem-<name>`` (dest ``jetmem_<name>``)
where it has one, the ini key ``jetmem_<name>`` where it has one (the option wins when given), its type,
default and help, and whether a child session gets it (:attr:`Setting.child`; a child never saves, compares
for ``--jetmem-against``, or writes the parent's outputs). Each half registers its rows with :func:`add` from
its ``pytest_addoption``; the child argv (:mod:`pytest_jetmem.plugin.children`) leaves out the rows a child
must not get. A bad value is a ``pytest.UsageError`` that names the option or ini key, the value and what was
expected.
"""

from __future__ import annotations

import argparse
import math
import os
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from pytest_jetmem.history.location import DEFAULT_PATH
from pytest_jetmem.measure.defaults import DEFAULT_FAIL_PCT, WINDOW_SESSIONS

GROUP = "jetmem"
GROUP_DESCRIPTION = "memory-mode testing of CUDA code (pytest-jetmem)"
AMBIGUOUS_POLICIES = ("pass", "warn", "fail")
ADVICE_CHOICES = ("on", "off")
COUNTERS_POLICIES = ("auto", "off")
#: ``--jetmem-energy``: ``auto`` measures where a power source works, ``on`` requires one, ``off`` never measures.
ENERGY_POLICIES = ("auto", "on", "off")


@dataclass(frozen=True)
class Setting:
    """One setting: its option (``--jetmem-<name>``), its ini key (``jetmem_<name>``), and whether children get it.

    ``takes`` is what the option takes: ``"value"`` (``--opt X``), ``"optional"`` (``--opt`` alone means
    ``const``) or ``"flag"`` (store_true). ``ini_help`` None: no ini key; ``option`` False: an ini key only.
    ``choices`` are matched in any case, by the option and the ini key alike (:func:`choice_text`).
    """

    name: str
    help: str
    takes: str = "value"
    type: type | None = None
    metavar: str | None = None
    choices: tuple[str, ...] | None = None
    const: str | None = None
    default: Any = None
    ini_help: str | None = None
    ini_type: str | None = None  # pytest's addini type ("bool", "paths"); None: a string
    ini_default: Any = ""
    child: bool = True
    option: bool = True
    repeats: str = "last"  # an option given more than once: "last" (argparse's store) or "union" (see merge_union)

    @property
    def flag(self) -> str:
        """``--jetmem-<name>``."""
        return option_name(self.name)

    @property
    def dest(self) -> str:
        return f"jetmem_{self.name}"


#: Every setting of the plugin, in ``--help`` order within each half.
SETTINGS: tuple[Setting, ...] = (
    # the memmode half
    Setting(
        "modes",
        "run memmode tests only in these memory modes (comma or space separated: {modes}; a bare memmode marker "
        "adds them to its default modes), or 'all': every mode the device supports. Given more than once: the "
        "union of the values ('all' beside others: all)",
        metavar="MODES",
        ini_help="memory modes to run memmode tests in, or 'all' (default: the marker's modes)",
        repeats="union",
    ),
    Setting(
        "cache_dir",
        "NVRTC kernel cache directory (default $JETMEM_CACHE_DIR, else $XDG_CACHE_HOME/pytest-jetmem/kernels, "
        "else ~/.cache/pytest-jetmem/kernels)",
        metavar="DIR",
        ini_help="NVRTC kernel cache directory",
    ),
    # the runtime half
    Setting(
        "save",
        "save this run's timings as baseline NAME (default name: default)",
        takes="optional",
        const="default",
        metavar="NAME",
        child=False,  # the parent saves what its children measured
    ),
    Setting(
        "compare",
        "compare timings against baseline NAME and fail memmode_runtime tests that regressed",
        takes="optional",
        const="default",
        metavar="NAME",
        ini_help="baseline to compare against by default",
    ),
    Setting(
        "store",
        "store this session's measurements in the results store URL: a path or sqlite:///PATH (SQLite; given "
        f"bare: {DEFAULT_PATH} under the rootdir) or postgresql://USER@HOST/DB (the postgres extra); "
        "default $JETMEM_STORE. With it, --jetmem-compare=BRANCH compares with that branch's newest "
        "--jetmem-window sessions on this machine class in the store",
        takes="optional",
        const=DEFAULT_PATH,
        metavar="URL",
        ini_help="the results store to keep every session in (a path, sqlite:///PATH or postgresql://...)",
        # children and xdist workers read it (--jetmem-compare); only the parent writes (plugin.history)
    ),
    Setting(
        "fail",
        f"regression threshold in percent of the baseline median (default {DEFAULT_FAIL_PCT:g})",
        type=float,
        metavar="PCT",
        ini_help="regression threshold in percent",
        ini_default=f"{DEFAULT_FAIL_PCT:g}",
    ),
    Setting(
        "baseline_dir",
        "where baselines live (default .jetmem/baselines under the rootdir)",
        metavar="DIR",
        ini_help="baseline directory",
    ),
    Setting(
        "strict_machine",
        "fail instead of warn when the baseline comes from another machine fingerprint",
        takes="flag",
        ini_help="fail on a baseline from another machine",
        ini_type="bool",
        ini_default=False,
    ),
    Setting(
        "overwrite",
        "let --jetmem-save replace a baseline of earlier sessions (kept as NAME.json.prev) instead of "
        "appending this session to it",
        takes="flag",
        default=False,
        child=False,
    ),
    Setting(
        "ambiguous",
        "what an ambiguous comparison does (a change past the threshold that is not clear of the noise, "
        "or a baseline with too few sessions to know its noise): pass, warn (default) or fail",
        choices=AMBIGUOUS_POLICIES,
        ini_help="what an ambiguous comparison does: pass, warn or fail",
        ini_default="warn",
    ),
    Setting(
        "window",
        f"sessions a baseline keeps when --jetmem-save appends (default {WINDOW_SESSIONS}, the newest)",
        type=int,
        metavar="N",
        ini_help="sessions a baseline keeps when sessions are appended",
        ini_default=str(WINDOW_SESSIONS),
    ),
    Setting(
        "runs",
        "run each measured test body N times with fresh allocations (default 1); the spread between "
        "runs enters the regression test",
        type=int,
        metavar="N",
        ini_help="runs (fresh allocations) per measured test",
        ini_default="1",
    ),
    Setting(
        "benchmark_json",
        "also write the timings in pytest-benchmark's JSON format",
        metavar="PATH",
        child=False,
    ),
    Setting(
        "max_time",
        "time cap per measurement in seconds (default 1.0)",
        type=float,
        metavar="S",
        ini_help="time cap per measurement in seconds",
        ini_default="1.0",
    ),
    Setting(
        "noise",
        "stop sampling when the median's relative standard error is below this (default 0.01)",
        type=float,
        metavar="FRACTION",
        ini_help="target relative noise of the median",
        ini_default="0.01",
    ),
    Setting(
        "counters",
        "unified-memory counters (CUPTI: bytes migrated, page faults) for measurements in modes that migrate "
        "pages, counted on a cold call replayed after the samples (the pages put back on the host first) and on "
        "3 steady calls after it: auto (default: where CUPTI can give them) or off, in any case",
        choices=COUNTERS_POLICIES,
        ini_help="unified-memory counters: auto or off",
        ini_default="auto",
    ),
    Setting(
        "energy",
        "energy per call of every measurement (joules, with a 99 percent interval, and the power drawn), read from "
        "NVML's energy counter on a discrete GPU or a Jetson's power-monitor rails, the work repeated in windows with "
        "the idle power between them taken out (about 1.5-2 s per measurement): auto (default: where a power source "
        "works), on (a measurement without one fails, saying why) or off",
        choices=ENERGY_POLICIES,
        ini_help="energy per call: auto, on or off",
        ini_default="auto",
    ),
    Setting(
        "energy_fail",
        "also judge every measurement's energy per call against the baseline (--jetmem-compare): an energy regression "
        "past PCT percent of the baseline's fails the test as a time's does, an ambiguous one as --jetmem-ambiguous "
        "says (default: the energy comparison is reported, not judged)",
        type=float,
        metavar="PCT",
        ini_help="energy regression threshold in percent (unset: energy comparisons are reported, not judged)",
    ),
    # the concurrency half
    Setting(
        "tegra_strict",
        "enforce Jetson's managed-memory rule on any device: host access to managed memory while "
        "jetmem work may be in flight raises TegraStrictError",
        takes="flag",
        ini_help="enforce Jetson's managed-memory rule on any device (like --jetmem-tegra-strict)",
        ini_type="bool",
        ini_default=False,
    ),
    # the report half
    Setting(
        "report",
        "write a self-contained HTML report of the timings (table and charts) to PATH, and the rows as "
        "JSON next to it (PATH with the suffix .json)",
        metavar="PATH",
        ini_help="write the HTML timing report to this path (relative to the rootdir), like --jetmem-report",
        child=False,  # a child's rows travel to its parent, which writes the report
    ),
    # the summary half
    Setting(
        "summary",
        "append a Markdown summary of the measurements (regressed first) to PATH at the end of the session; "
        "default $GITHUB_STEP_SUMMARY, the job summary file GitHub Actions sets",
        metavar="PATH",
        ini_help="append the Markdown summary of the measurements to this path (relative to the rootdir), "
        "like --jetmem-summary",
        child=False,  # the parent writes the one section, with its children's records
    ),
    # the advice half
    Setting(
        "advice",
        "the 'jetmem advice' section at the end of the run (which memory mode to pick for each test measured in "
        "two or more modes, and why): on (default) or off",
        choices=ADVICE_CHOICES,
        ini_help="the 'jetmem advice' section: on or off",
        ini_default="on",
    ),
    # the against half
    Setting(
        "against",
        "measure the base REF (a git revision of the repository under test, or the path of a prepared "
        "checkout) and this tree in turns on the same GPU, and judge every measured test on the paired data",
        metavar="REF",
        ini_help="like --jetmem-against: the base to measure this tree against",
        child=False,
    ),
    # the no-GPU half
    Setting(
        "arch",
        "without a GPU: compile every kernel for these architectures (comma or space separated, e.g. "
        "sm_87,sm_110; "
        "default: the Jetson architectures the installed NVRTC supports; 'none': skip jetmem tests at once)",
        metavar="ARCHS",
        ini_help="without a GPU: architectures to compile kernels for (or 'none')",
    ),
    Setting(
        "include_dirs",
        "",
        ini_help="include directories searched by every kernel compile, after compile()'s include_dirs",
        ini_type="paths",
        ini_default=[],
        option=False,
    ),
)

_BY_NAME = {s.name: s for s in SETTINGS}


def setting(name: str) -> Setting:
    """The row of :data:`SETTINGS` named ``name``."""
    return _BY_NAME[name]


def option_group(parser: pytest.Parser) -> pytest.OptionGroup:
    """The one ``--help`` group every half of the plugin adds its options to."""
    return parser.getgroup(GROUP, GROUP_DESCRIPTION)


def choice_text(value: object) -> str:
    """A choice as it is compared with the setting's ``choices``: stripped, lower case (option and ini key alike)."""
    return str(value).strip().lower()


def merge_union(previous: str | None, value: str) -> str:
    """A repeated list option's value: the names of both, each once, in the order given; ``all`` beside others is
    ``all`` (every mode). A value's own faults (a name twice, ``all`` beside names) stay for the parser to refuse."""
    if previous is None:
        return value
    from pytest_jetmem.cuda.modes import EVERY_MODE  # only a repeated --jetmem-modes gets here

    old, new = previous.replace(",", " ").split(), value.replace(",", " ").split()
    alone = [names for names in (old, new) if EVERY_MODE in names]
    if alone and all(names == [EVERY_MODE] for names in alone):
        return EVERY_MODE
    return ",".join([*old, *(name for name in new if name not in old)])


def option_action(fields: Mapping[str, Callable[[], str]], repeats: str = "last") -> type[argparse.Action]:
    """argparse's ``store`` action (``repeats="union"``: :func:`merge_union` with the value given before) with a
    help text whose ``{...}`` fields are filled each time it is shown.

    ``pytest_addoption`` runs before a ``conftest.py`` can register a memory mode; ``--help`` is shown after
    it has. argparse reads an action's ``help`` when it formats the help (its documented ``%(...)s`` expansion
    happens then too), so the text asks ``fields`` (``modes``: the registry's names) at that time. A custom
    action class is what ``parser.addoption`` documents (``add_argument``'s arguments); no pytest internals.
    The union is idempotent, so pytest parsing the command line more than once into one namespace changes nothing.
    """

    class StoreWithLiveHelp(argparse.Action):
        def __call__(
            self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any, option: Any = None
        ) -> None:
            if repeats == "union":
                values = merge_union(getattr(namespace, self.dest, None), str(values))
            setattr(namespace, self.dest, values)

        @property
        def help(self) -> str | None:
            template = self.__dict__.get("help_template")
            return template.format(**{k: fill() for k, fill in fields.items()}) if template else template

        @help.setter
        def help(self, template: str | None) -> None:
            self.__dict__["help_template"] = template

    return StoreWithLiveHelp


def live_help(fields: Mapping[str, Callable[[], str]]) -> type[argparse.Action]:
    """:func:`option_action` storing the last value given."""
    return option_action(fields)


def add(parser: pytest.Parser, *names: str, **help_fields: Callable[[], str]) -> None:
    """Register the options and ini keys of the settings ``names`` (a half's ``pytest_addoption`` calls this).

    ``help_fields`` fill the ``{...}`` fields of a help text when ``--help`` shows it (``modes=``: a function that
    returns the registered memory modes, so a mode a ``conftest.py`` registers is listed; see :func:`live_help`).
    """
    group = option_group(parser)
    for name in names:
        s = _BY_NAME[name]
        if s.option:
            kwargs: dict[str, Any] = {"dest": s.dest, "default": s.default, "help": s.help}
            if s.takes == "flag":
                kwargs["action"] = "store_true"
            else:
                kwargs.update(_value_kwargs(s, help_fields))
            group.addoption(s.flag, **kwargs)
        if s.ini_help is not None:
            ini: dict[str, Any] = {"default": s.ini_default}
            if s.ini_type is not None:
                ini["type"] = s.ini_type
            parser.addini(s.dest, s.ini_help, **ini)


def _value_kwargs(s: Setting, help_fields: Mapping[str, Callable[[], str]]) -> dict[str, Any]:
    """``addoption``'s arguments for an option that takes a value: action, nargs, type, metavar, choices."""
    kwargs: dict[str, Any] = {}
    if "{" in s.help or s.repeats != "last":
        kwargs["action"] = option_action(help_fields, s.repeats)
    if s.takes == "optional":
        kwargs.update(nargs="?", const=s.const)
    if s.choices is not None:
        kwargs.update(choices=s.choices, type=choice_text)  # argparse converts, then checks the choice
    for key in ("type", "metavar"):
        if getattr(s, key) is not None:
            kwargs[key] = getattr(s, key)
    return kwargs


def parent_only() -> Iterator[Setting]:
    """The settings a child session must not get (it never saves, never writes the parent's outputs)."""
    return (s for s in SETTINGS if not s.child)


def reset_parent_only(config: pytest.Config) -> None:
    """In a child: the parent-only options back to their defaults, wherever they came from (``addopts`` too)."""
    for s in parent_only():
        if s.option:
            setattr(config.option, s.dest, s.default)


def option_name(name: str) -> str:
    """``fail`` -> ``--jetmem-fail``."""
    return f"--jetmem-{name.replace('_', '-')}"


def ini_name(name: str) -> str:
    """``fail`` -> ``ini option jetmem_fail`` (as messages say it)."""
    return f"ini option jetmem_{name}"


def _ini(config: pytest.Config, name: str) -> Any:
    try:
        return config.getini(f"jetmem_{name}")
    except (ValueError, pytest.UsageError) as exc:  # a bool key pytest could not read ("invalid truth value 'maybe'")
        raise pytest.UsageError(f"{ini_name(name)}: expected true or false, got {exc}") from None


def _has_ini(name: str, ini: bool | None) -> bool:
    """Whether setting ``name`` is read from its ini key too: ``ini`` if given, else where the table has one."""
    if ini is not None:
        return ini
    row = _BY_NAME.get(name)
    return row is None or row.ini_help is not None


def raw(config: pytest.Config, name: str, *, ini: bool | None = None) -> tuple[Any, str]:
    """(value, where it came from): the option if given, else the ini key (where the setting has one, or ``ini``)."""
    value = config.getoption(f"jetmem_{name}", None)
    if value is not None or not _has_ini(name, ini):
        return value, option_name(name)
    return _ini(config, name), ini_name(name)


def get_str(config: pytest.Config, name: str, *, ini: bool | None = None) -> str | None:
    """A text setting; an empty ini value is None."""
    value, _ = raw(config, name, ini=ini)
    if value is None:
        return None
    text = str(value).strip()
    return text or None


def get_bool(config: pytest.Config, name: str) -> bool:
    """A flag: the option if given (store_true with default None), else the ini key (type bool)."""
    value, _ = raw(config, name)
    return bool(value)


def get_choice(config: pytest.Config, name: str) -> str:
    """One of the setting's ``choices`` (case and spaces ignored), else a UsageError naming where it came from."""
    value, source = raw(config, name)
    choices = _BY_NAME[name].choices or ()
    text = choice_text(value)
    if text not in choices:
        raise pytest.UsageError(f"{source}: expected one of {', '.join(choices)}, got {value!r}")
    return text


def get_float(config: pytest.Config, name: str, *, minimum: float, what: str) -> float:
    """A finite number >= ``minimum``; ``what`` describes it for the error ("a percentage >= 0")."""
    value, source = raw(config, name)
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise pytest.UsageError(f"{source}: expected {what}, got {value!r}") from None
    if not math.isfinite(number) or number < minimum:  # the value as given (an ini key's text: "-1e9")
        raise pytest.UsageError(f"{source}: expected {what}, got {value!r}")
    return number


def get_optional_float(config: pytest.Config, name: str, *, minimum: float, what: str) -> float | None:
    """:func:`get_float`, or None where neither the option nor the ini key is set (an empty ini value is unset)."""
    value, _ = raw(config, name)
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    return get_float(config, name, minimum=minimum, what=what)


def energy_threshold(config: pytest.Config, energy_policy: str) -> float | None:
    """``--jetmem-energy-fail`` (None: unset); a usage error naming both settings where ``--jetmem-energy`` is off
    (a threshold on energies never measured would judge nothing, silently)."""
    threshold = get_optional_float(config, "energy_fail", minimum=0.0, what="a percentage >= 0")
    if threshold is not None and energy_policy == "off":
        fail_from, off_from = raw(config, "energy_fail")[1], raw(config, "energy")[1]
        raise pytest.UsageError(
            f"{fail_from}={threshold:g} judges the energy per call, but {off_from}=off measures none: expected "
            "auto or on with it"
        )
    return threshold


def get_int(config: pytest.Config, name: str, *, minimum: int, what: str) -> int:
    """An integer >= ``minimum``."""
    value, source = raw(config, name)
    try:
        number = int(str(value).strip()) if isinstance(value, str) else value
    except ValueError:
        raise pytest.UsageError(f"{source}: expected {what}, got {value!r}") from None
    if isinstance(number, bool) or not isinstance(number, int) or number < minimum:
        raise pytest.UsageError(f"{source}: expected {what}, got {value!r}")
    return number


def baseline_name(config: pytest.Config, name: str, *, ini: bool | None = None) -> str | None:
    """The baseline name setting ``name`` (``save``, ``compare``), checked before the session starts.

    None where it is not set (an empty ini value is not set); a name given empty (``--jetmem-save=``) or
    breaking the naming rules (:meth:`BaselineStore.check_name`) is a UsageError naming the setting.
    """
    value, source = raw(config, name, ini=ini)
    if value is None:
        return None
    text = str(value).strip()
    if not text:
        if source.startswith("--"):
            raise pytest.UsageError(f"{source}: expected a baseline name, got {value!r}")
        return None
    from pytest_jetmem.measure.baseline import BaselineStore  # here: only a baseline option loads measure

    try:
        return BaselineStore.check_name(text)
    except ValueError as exc:
        raise pytest.UsageError(f"{source}={text}: {exc}") from None


def check_output_path(path: str | os.PathLike[str], source: str) -> Path:
    """``path`` as a Path if a file can be written there at the end of the session, else a UsageError.

    Refused: an existing directory, a path below a file, a folder this process may not write in. The
    folder is not created here (writing does that), only the nearest existing one checked.
    """
    target = Path(path)
    if target.is_dir():
        raise pytest.UsageError(f"{source}={path}: is a directory; expected a file path")
    parent = target.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        raise pytest.UsageError(f"{source}={path}: {parent} is not a directory, so nothing can be written there")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise pytest.UsageError(f"{source}={path}: cannot write in {parent} (permission denied)")
    return target


def store_url(config: pytest.Config) -> tuple[str, str] | None:
    """The results store asked for and where that came from: ``--jetmem-store``, else ``$JETMEM_STORE``, else the ini
    key ``jetmem_store``; None: no store (an empty value is none, except on the command line: a UsageError)."""
    value, source = raw(config, "store", ini=False)
    if value is not None:
        if not str(value).strip():
            raise pytest.UsageError(f"{source}: expected a path, sqlite:///PATH or postgresql://..., got {value!r}")
        return str(value).strip(), source
    env = os.environ.get("JETMEM_STORE", "").strip()
    if env:
        return env, "JETMEM_STORE"
    ini = str(_ini(config, "store") or "").strip()
    return (ini, ini_name("store")) if ini else None


def cache_dir(config: pytest.Config) -> str | None:
    """The NVRTC kernel cache directory set (``--jetmem-cache-dir``, else the ini key; None: the default), checked
    with ``$JETMEM_CACHE_DIR``: a path that is a file, or lies below one, is a UsageError naming the setting."""
    chosen = get_str(config, "cache_dir")
    _, source = raw(config, "cache_dir")
    path = chosen
    if path is None:
        path, source = os.environ.get("JETMEM_CACHE_DIR", "").strip() or None, "JETMEM_CACHE_DIR"
    if path is not None:
        target = Path(path).expanduser()
        if target.exists() and not target.is_dir():
            raise pytest.UsageError(f"{source}={path}: is a file; expected a directory for the NVRTC kernel cache")
        parent = target.parent
        while not parent.exists() and parent != parent.parent:
            parent = parent.parent
        if not parent.is_dir():
            raise pytest.UsageError(
                f"{source}={path}: {parent} is a file, so the NVRTC kernel cache cannot be made there"
            )
    return chosen
