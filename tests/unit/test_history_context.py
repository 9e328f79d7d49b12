"""history.context: the code a session measured, from git and the CI's variables; unknown where it cannot be known
(no git, a shallow clone), never guessed."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from pytest_jetmem.history.context import ci_branch, ci_url, read_context

ENV = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@e", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@e",
       "GIT_COMMITTER_DATE": "2026-11-20T10:00:00+02:00", "GIT_AUTHOR_DATE": "2026-11-20T10:00:00+02:00"}


def git(root: Path, *args: str) -> str:
    done = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, check=True,
                          env={**os.environ, **ENV})
    return done.stdout.strip()


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    root.mkdir()
    git(root, "init", "-q", "-b", "main")
    (root / "a.txt").write_text("1")
    git(root, "add", "-A")
    git(root, "commit", "-qm", "one")
    (root / "a.txt").write_text("2")
    git(root, "commit", "-qam", "two")
    return root


def test_a_clean_checkout(repo: Path) -> None:
    ctx = read_context(repo, {})
    assert ctx.commit == git(repo, "rev-parse", "HEAD")
    assert ctx.parents == (git(repo, "rev-parse", "HEAD~1"),)
    assert ctx.branch == "main" and ctx.dirty is False and ctx.ci_url is None and not ctx.notes
    assert ctx.commit_time == "2026-11-20T08:00:00Z"  # the committer's time, in UTC


def test_a_dirty_detached_checkout_in_ci(repo: Path) -> None:
    git(repo, "checkout", "-q", "--detach", "HEAD~1")
    (repo / "a.txt").write_text("changed")
    env = {"GITHUB_SERVER_URL": "https://github.com", "GITHUB_REPOSITORY": "o/r", "GITHUB_RUN_ID": "42",
           "GITHUB_RUN_ATTEMPT": "2", "GITHUB_REF_NAME": "feature/x"}
    ctx = read_context(repo, env)
    assert ctx.dirty is True and ctx.parents == ()  # the root commit
    assert ctx.branch == "feature/x"  # detached: the CI's branch
    assert ctx.ci_url == "https://github.com/o/r/actions/runs/42/attempts/2"


def test_a_shallow_clone_has_unknown_parents(repo: Path, tmp_path: Path) -> None:
    clone = tmp_path / "shallow"
    git(tmp_path, "clone", "-q", "--depth=1", f"file://{repo}", str(clone))
    ctx = read_context(clone, {})
    assert ctx.commit == git(repo, "rev-parse", "HEAD") and ctx.parents is None
    assert ctx.notes == ("a shallow clone: the commit's parents are unknown (fetch with --depth=0 or fetch-depth: 0)",)


def test_outside_git_the_ci_commit_or_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))
    plain = tmp_path / "plain"
    plain.mkdir()
    ctx = read_context(plain, {})
    assert (ctx.commit, ctx.branch, ctx.parents, ctx.dirty) == (None, None, None, None)
    assert ctx.notes == ("not in a git repository: the commit is unknown",)
    ctx = read_context(plain, {"CI_COMMIT_SHA": "f00d", "CI_COMMIT_REF_NAME": "main", "CI_JOB_URL": "https://gl/j/1"})
    assert (ctx.commit, ctx.branch, ctx.ci_url) == ("f00d", "main", "https://gl/j/1")
    assert ctx.notes == ("not in a git repository: the commit is the CI's (f00d)",)


@pytest.mark.parametrize(
    ("env", "url"),
    [
        ({"BUILDKITE_BUILD_URL": "https://bk/1"}, "https://bk/1"),
        ({"BUILD_URL": "https://jenkins/job/2/"}, "https://jenkins/job/2/"),
        ({"GITHUB_RUN_ID": "1"}, None),  # not enough to make a URL
        ({}, None),
    ],
)
def test_ci_urls(env: dict[str, str], url: str | None) -> None:
    assert ci_url(env) == url


def test_a_pull_request_branch_is_its_head() -> None:
    assert ci_branch({"GITHUB_HEAD_REF": "fix", "GITHUB_REF_NAME": "12/merge"}) == "fix"


NO_BRANCH = ("a detached HEAD and no CI branch variable: the session is stored under no branch (set JETMEM_BRANCH or "
             "check out a branch)")


def test_a_detached_head_takes_the_branch_that_contains_it(repo: Path) -> None:
    """Without a CI variable: the default branch where it contains the commit, else the only branch that does."""
    git(repo, "checkout", "-q", "-b", "feature")
    git(repo, "commit", "-q", "--allow-empty", "-m", "three")
    git(repo, "checkout", "-q", "--detach", "main~1")  # in main and feature: main
    ctx = read_context(repo, {})
    assert ctx.branch == "main" and not ctx.notes
    git(repo, "checkout", "-q", "--detach", "feature")  # in feature only
    ctx = read_context(repo, {})
    assert ctx.branch == "feature" and not ctx.notes


def test_a_detached_head_no_branch_contains_is_stored_under_none_said_once(repo: Path) -> None:
    git(repo, "checkout", "-q", "--detach")
    git(repo, "commit", "-q", "--allow-empty", "-m", "on no branch")
    ctx = read_context(repo, {})
    assert ctx.branch is None and ctx.notes == (NO_BRANCH,)
    ctx = read_context(repo, {"CI_COMMIT_REF_NAME": "mr-7"})  # the CI says it: no note
    assert ctx.branch == "mr-7" and not ctx.notes


def test_jetmem_branch_names_the_branch_before_git_and_the_ci(repo: Path, tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    env = {"JETMEM_BRANCH": "release/2", "GITHUB_REF_NAME": "12/merge"}
    assert read_context(repo, env).branch == "release/2"  # on main
    git(repo, "checkout", "-q", "--detach")
    git(repo, "commit", "-q", "--allow-empty", "-m", "on no branch")
    ctx = read_context(repo, env)
    assert ctx.branch == "release/2" and not ctx.notes
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))
    plain = tmp_path / "plain"
    plain.mkdir()
    assert read_context(plain, env).branch == "release/2"  # outside git too
