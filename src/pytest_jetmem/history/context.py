"""Where a session's code came from: the commit, branch, commit time, parents, a dirty-tree flag and the CI run.

:func:`read_context` asks git (``git -C ROOT ...``) and the CI's environment variables. What cannot be known is
recorded as unknown (None) with a note that says why, never guessed: outside a git repository the commit is
unknown (a CI's own variable, such as ``GITHUB_SHA``, is used where set); in a shallow clone the parents are
unknown. The branch: ``JETMEM_BRANCH`` where set, else git's, else the CI's variables, else (a detached HEAD) the
local branch that contains the commit; where none does, no branch, with a note. GPU-free and pytest-free.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

__all__ = ["BRANCH_VAR", "SessionContext", "ci_branch", "ci_url", "git_output", "read_context", "utc_iso"]

#: The environment variable that names the branch a session is stored under, before git and the CI's variables.
BRANCH_VAR = "JETMEM_BRANCH"

#: CI variables that name the commit built, where git cannot say (checked in this order).
_COMMIT_VARS = ("GITHUB_SHA", "CI_COMMIT_SHA", "BUILDKITE_COMMIT", "GIT_COMMIT", "CIRCLE_SHA1")
#: CI variables that name the branch built (a detached checkout, as CI makes, has no branch in git).
_BRANCH_VARS = ("GITHUB_HEAD_REF", "GITHUB_REF_NAME", "CI_COMMIT_REF_NAME", "BUILDKITE_BRANCH", "BRANCH_NAME",
                "CIRCLE_BRANCH", "GIT_BRANCH")
#: CI variables that hold the URL of the running job, for the CIs that give one directly.
_URL_VARS = ("CI_JOB_URL", "BUILDKITE_BUILD_URL", "CIRCLE_BUILD_URL", "BUILD_URL")


def utc_iso(moment: datetime | None = None) -> str:
    """``moment`` (default now) as ISO 8601 in UTC, to the second: ``2026-11-26T13:20:00Z``."""
    moment = moment or datetime.now(timezone.utc)
    return moment.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True)
class SessionContext:
    """The code a session measured. None: unknown (``notes`` say why)."""

    commit: str | None = None
    branch: str | None = None
    commit_time: str | None = None  # ISO 8601, UTC (the committer's time)
    parents: tuple[str, ...] | None = None  # None: unknown (no git, shallow clone); (): a root commit
    dirty: bool | None = None  # uncommitted changes to tracked files
    ci_url: str | None = None
    notes: tuple[str, ...] = field(default=(), compare=False)

    def to_dict(self) -> dict[str, object]:
        """JSON-ready (notes left out: they are said, not stored)."""
        return {
            "commit": self.commit,
            "branch": self.branch,
            "commit_time": self.commit_time,
            "parents": list(self.parents) if self.parents is not None else None,
            "dirty": self.dirty,
            "ci_url": self.ci_url,
        }


def ci_url(environ: Mapping[str, str]) -> str | None:
    """The URL of the CI run, where the environment says it (GitHub Actions, GitLab, Buildkite, CircleCI,
    Jenkins); None elsewhere."""
    server, repo, run = (environ.get(k, "") for k in ("GITHUB_SERVER_URL", "GITHUB_REPOSITORY", "GITHUB_RUN_ID"))
    if server and repo and run:
        attempt = environ.get("GITHUB_RUN_ATTEMPT", "")
        return f"{server}/{repo}/actions/runs/{run}" + (f"/attempts/{attempt}" if attempt else "")
    return next((environ[k] for k in _URL_VARS if environ.get(k)), None)


def ci_branch(environ: Mapping[str, str]) -> str | None:
    """The branch the CI says it builds (GitHub's ``GITHUB_HEAD_REF`` for a pull request, else its ref name...)."""
    return next((environ[k] for k in _BRANCH_VARS if environ.get(k)), None)


def git_output(root: Path, *args: str) -> str | None:
    """``git -C root args`` stdout stripped; None where git is missing or fails."""
    try:
        done = subprocess.run(
            ["git", "-C", str(root), *args], capture_output=True, text=True, timeout=30, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def _commit_time(text: str) -> str | None:
    try:
        return utc_iso(datetime.fromisoformat(text.replace("Z", "+00:00")))
    except ValueError:
        return None


def _ci_context(root: Path, env: Mapping[str, str], url: str | None) -> SessionContext:
    """The context where git knows no commit (no repository, or no commit yet): the CI's commit and branch, where
    its variables say them, with a note saying why git could not."""
    from_ci = next((env[k] for k in _COMMIT_VARS if env.get(k)), None)
    inside = git_output(root, "rev-parse", "--is-inside-work-tree") == "true"
    why = "no commit yet" if inside else "not in a git repository"
    note = f"{why}: the commit is unknown" if from_ci is None else f"{why}: the commit is the CI's ({from_ci})"
    return SessionContext(commit=from_ci, branch=env.get(BRANCH_VAR) or ci_branch(env), ci_url=url, notes=(note,))


def _parents(root: Path, parent_line: str) -> tuple[tuple[str, ...] | None, tuple[str, ...]]:
    """HEAD's parents (from ``git show``'s ``%P`` line) and the notes: None, with a note, in a shallow clone."""
    if git_output(root, "rev-parse", "--is-shallow-repository") == "true":
        return None, ("a shallow clone: the commit's parents are unknown (fetch with --depth=0 or fetch-depth: 0)",)
    return tuple(parent_line.split()), ()


_NO_BRANCH = (f"a detached HEAD and no CI branch variable: the session is stored under no branch (set {BRANCH_VAR} "
              "or check out a branch)")


def _containing_branch(root: Path) -> str | None:
    """For a detached HEAD: the local branch that contains it: the default one (``origin/HEAD``'s, ``main``,
    ``master``) where it is among them, else the only one, else the nearest (``git name-rev``); None where no local
    branch contains it."""
    listed = git_output(root, "for-each-ref", "--contains", "HEAD", "--format=%(refname:short)", "refs/heads")
    names = listed.splitlines() if listed else []
    if len(names) <= 1:
        return names[0] if names else None
    remote_default = git_output(root, "symbolic-ref", "-q", "--short", "refs/remotes/origin/HEAD") or ""
    for default in (remote_default.partition("/")[2], "main", "master"):
        if default in names:
            return default
    nearest = git_output(root, "name-rev", "--name-only", "--no-undefined", "--refs=refs/heads/*", "HEAD") or ""
    nearest = re.split(r"[~^]", nearest, maxsplit=1)[0]
    return nearest if nearest in names else sorted(names)[0]


def _git_context(root: Path, env: Mapping[str, str], commit: str, url: str | None) -> SessionContext:
    """The context of ``commit``, git's HEAD in ``root``: its branch (``JETMEM_BRANCH``, else git's, else the CI's,
    else a branch that contains the commit), commit time, parents and dirty flag (None where git cannot say)."""
    branch = (env.get(BRANCH_VAR) or git_output(root, "symbolic-ref", "-q", "--short", "HEAD") or ci_branch(env)
              or _containing_branch(root))
    shown = git_output(root, "show", "-s", "--format=%cI%n%P", "HEAD") or ""
    time_line, _, parent_line = shown.partition("\n")
    parents, notes = _parents(root, parent_line)
    if branch is None:
        notes += (_NO_BRANCH,)
    status = git_output(root, "status", "--porcelain", "--untracked-files=no")
    return SessionContext(
        commit=commit,
        branch=branch,
        commit_time=_commit_time(time_line) if time_line else None,
        parents=parents,
        dirty=None if status is None else bool(status),
        ci_url=url,
        notes=notes,
    )


def read_context(root: str | os.PathLike[str], environ: Mapping[str, str] | None = None) -> SessionContext:
    """The context of the code in ``root``: git's answers, the CI's variables where git has none."""
    env = os.environ if environ is None else environ
    root = Path(root)
    url = ci_url(env)
    commit = git_output(root, "rev-parse", "--verify", "-q", "HEAD^{commit}")
    if commit is None:
        return _ci_context(root, env, url)
    return _git_context(root, env, commit, url)
