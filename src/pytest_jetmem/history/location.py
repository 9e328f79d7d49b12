"""Where a results store is, from what ``--jetmem-store``, ``JETMEM_STORE``, the ini key or ``--store`` says, and
how it is shown: every password in it masked, in every form a URL or a libpq keyword string can hold one.

:func:`parse_location` reads a path, ``sqlite:///relative/path`` / ``sqlite:////absolute/path`` (SQLAlchemy's
spelling) or ``postgresql://`` (``postgres://``); a known scheme without its ``://`` and a libpq keyword string are
refused (BAD_URL), so a typo never becomes a new SQLite file. GPU-free and pytest-free.

Hand-written, not psycopg's ``conninfo`` parser nor SQLAlchemy's ``make_url``: psycopg is the optional ``postgres``
extra, and a password must be masked in text that no parser accepts (the malformed URL an error message names).
"""

from __future__ import annotations

import os
import re
import urllib.parse
from dataclasses import dataclass
from pathlib import Path

from pytest_jetmem.errors import StoreError, StoreErrorKind

__all__ = ["DEFAULT_PATH", "Location", "hidden", "masked", "parse_location"]

#: Where ``--jetmem-store`` given bare keeps its SQLite database (under the rootdir); the one place it is written.
DEFAULT_PATH = ".jetmem/history.sqlite"

_LIBPQ_KEYWORDS = (
    "host", "hostaddr", "port", "dbname", "user", "password", "passfile", "require_auth", "channel_binding",
    "connect_timeout", "client_encoding", "options", "application_name", "fallback_application_name", "keepalives",
    "keepalives_idle", "keepalives_interval", "keepalives_count", "tcp_user_timeout", "replication", "gssencmode",
    "sslmode", "sslnegotiation", "sslcompression", "sslcert", "sslkey", "sslpassword", "sslcertmode", "sslrootcert",
    "sslcrl", "sslcrldir", "sslsni", "requirepeer", "ssl_min_protocol_version", "ssl_max_protocol_version",
    "krbsrvname", "gsslib", "gssdelegation", "service", "target_session_attrs", "load_balance_hosts",
)  # fmt: skip
#: A URL's scheme and separator, also a malformed one (``postgres//``, ``postgresql:/``): a password may follow.
_URL_HEAD = re.compile(r"\s*[A-Za-z][A-Za-z0-9+.-]*(?::/*|//+)")
#: What a URL without userinfo has before its query: hosts with numeric ports (IPv6 in brackets), then the database.
_HOSTS = re.compile(r"(?:\[[^\]]*\]|[^@/:?\[]*)(?::\d*)?(?:,(?:\[[^\]]*\]|[^@/:?\[]*)(?::\d*)?)*(?:/[^@]*)?")
_QUERY_START = re.compile(r"\?(?:" + "|".join(_LIBPQ_KEYWORDS) + r")=")
_QUERY_SECRET = re.compile(r"[?&](?:ssl)?password=(?P<value>[^&]*)", re.IGNORECASE)
_KEYWORD_SECRET = re.compile(r"(?:^|\s)(?:ssl)?password\s*=\s*(?P<value>(?:'(?:[^'\\]|\\.)*'?)?\S*)", re.IGNORECASE)
_KEYWORD_DSN = re.compile(r"\s*(?:host|hostaddr|port|dbname|user|password|service)\s*=", re.IGNORECASE)
#: A known scheme not followed by ``://``: ``postgres//host/db``, ``postgresql:/host/db``, ``sqlite:/x``.
_MALFORMED = re.compile(r"(postgresql|postgres|sqlite)(?::(?!//)|//)", re.IGNORECASE)

@dataclass(frozen=True)
class Location:
    """Where a store is: ``kind`` "sqlite" (``path``) or "postgresql" (``dsn``); ``shown`` is what messages say."""

    kind: str
    shown: str
    path: Path | None = None
    dsn: str | None = None


def _secret_spans(url: str) -> list[tuple[int, int]]:
    """Where the passwords in ``url`` are, as (start, end): a URL's userinfo password (from the first ``:`` after
    ``://`` to the last ``@`` before the host, so raw ``/``, ``@`` and ``:`` in it are inside), its ``password=``
    and ``sslpassword=`` query parameters; in a libpq keyword string, its ``password=`` values."""
    head = _URL_HEAD.match(url)
    if head is None:
        return [m.span("value") for m in _KEYWORD_SECRET.finditer(url)]
    start = head.end()
    rest = url[start:]
    query = _QUERY_START.search(rest)
    main = rest[: query.start()] if query else rest
    at = main.rfind("@")
    if at < 0 and not _HOSTS.fullmatch(main):  # what looked like a query is in the password ("u:p?port=1@host")
        at = rest.rfind("@")
    spans = []
    colon = rest.find(":", 0, at) if at > 0 else -1
    if colon >= 0:
        spans.append((start + colon + 1, start + at))
    after = start + max(at + 1, 0)
    spans.extend((after + m.start("value"), after + m.end("value")) for m in _QUERY_SECRET.finditer(url[after:]))
    return spans


def masked(url: str) -> str:
    """``url`` with every password in it (:func:`_secret_spans`) replaced by ``***``."""
    for begin, end in sorted(_secret_spans(url), reverse=True):
        url = url[:begin] + "***" + url[end:]
    return url


def hidden(text: str, url: str) -> str:
    """``text`` (a driver's message about ``url``) with the passwords of ``url``, as written and decoded, as ``***``."""
    secrets = {url[b:e] for b, e in _secret_spans(url)}
    secrets |= {urllib.parse.unquote(s) for s in secrets}
    for secret in sorted(secrets - {""}, key=len, reverse=True):
        text = text.replace(secret, "***")
    return text


def parse_location(text: str, base: str | os.PathLike[str] = ".") -> Location:
    """Where ``text`` says the store is; a relative path is relative to ``base``. StoreError (BAD_URL) for an empty
    value, a scheme other than sqlite and postgresql, a known scheme without its ``://`` (``postgres//host/db``,
    ``postgresql:/host/db``) and a libpq keyword string; a password in ``text`` is never in a message."""
    value = text.strip()
    if not value:
        raise StoreError(repr(text), "expected a path, sqlite:///PATH or postgresql://...", StoreErrorKind.BAD_URL)
    malformed = _MALFORMED.match(value)
    if malformed:
        name = malformed.group(1).lower()
        expected = ("sqlite:///relative/path or sqlite:////absolute/path" if name == "sqlite"
                    else "postgresql://USER@HOST/DB")
        name = "sqlite" if name == "sqlite" else "postgresql"
        raise StoreError(masked(value), f"looks like a {name} URL with a missing ':' or '/': expected {expected}",
                         StoreErrorKind.BAD_URL)
    if "://" not in value and _KEYWORD_DSN.match(value):
        raise StoreError(masked(value), "looks like a libpq keyword string: expected a URL, "
                         "postgresql://USER@HOST/DB", StoreErrorKind.BAD_URL)
    scheme = value.split("://", 1)[0].lower() if "://" in value else ""
    if scheme in ("postgresql", "postgres"):
        return Location("postgresql", masked(value), dsn=value)
    if scheme == "sqlite":
        rest = value[len("sqlite://"):]
        if not rest.startswith("/") or rest == "/":
            raise StoreError(value, "expected sqlite:///relative/path or sqlite:////absolute/path",
                             StoreErrorKind.BAD_URL)
        value = rest[1:]
    elif scheme:
        raise StoreError(masked(value), f"unknown store scheme {scheme!r}: expected a path, sqlite:///PATH or "
                         "postgresql://USER@HOST/DB", StoreErrorKind.BAD_URL)
    path = Path(value).expanduser()
    if not path.is_absolute():
        path = Path(base) / path
    return Location("sqlite", str(path), path=path)
