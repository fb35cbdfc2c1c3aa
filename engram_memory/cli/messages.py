"""What the ``engram-memory`` command writes: its output lines, and how failures and ids are shown.

A line of output is written at once (:func:`_say`), so that a closed pipe or a full disk fails
there; a failure's reason is its message and notes, with what the SQLite error behind it means
for the operator; an id is shown as is when plain, else escaped and cut short. Never content.
"""

from __future__ import annotations

import re
import sqlite3
import sys
from collections.abc import Iterator
from typing import Final

from engram_memory.connect import OPENING_STORE_NOTE
from engram_memory.errors import EngramError, StoreCorruptError

_AS_OWNER = "run the command as the user that owns the files"
_SHOWN_MAX: Final = 80
"""How many characters of an id a message shows."""
_PLAIN_ID: Final = re.compile(r"[A-Za-z0-9._:@+=/-]+")
"""An id a message may show as is; any other is shown escaped, as ``repr()`` does."""
_SQLITE_HINTS: Final = {
    "SQLITE_BUSY": "another process holds the lock; run the command again",
    "SQLITE_LOCKED": "another process holds the lock; run the command again",
    "SQLITE_READONLY": f"the files are read-only here; {_AS_OWNER}, on a writable file system",
    "SQLITE_CANTOPEN": f"a file cannot be opened; {_AS_OWNER}",
    "SQLITE_FULL": "the disk is full",
    "SQLITE_IOERR": "an I/O error",
    "SQLITE_CORRUPT": "a file is damaged; run verify",
    "SQLITE_NOTADB": "a file is damaged; run verify",
}
"""What an operator can do about a failure, by SQLite's primary error name."""


class _Terminated(Exception):  # noqa: N818 - a stop, not an error
    """A SIGTERM stopped the command once it had cleaned up (``main`` reports it: status 143)."""


class _OutputError(Exception):
    """Writing the command's output failed (a closed pipe, a full disk); ``__cause__`` is the OSError."""


def _say(line: str) -> None:
    """Print ``line`` now, so that a write that fails does so here, not at exit."""
    if sys.stdout is None:  # standard output was closed before the command started
        raise _OutputError
    try:
        print(line, flush=True)
    except OSError as exc:
        raise _OutputError from exc


def _reason(exc: BaseException) -> str:
    """An error's message followed by its notes; never content.

    The message is left out when it is only the constant text of an error code and notes say
    more (their detail). The notes name an action and SQLite's error name, a schema refusal, or
    the file being opened; the note naming the store file is left out, since every message that
    shows a reason names the file itself.
    """
    notes = [note for note in getattr(exc, "__notes__", []) if not note.startswith(OPENING_STORE_NOTE)]
    generic = isinstance(exc, (EngramError, StoreCorruptError)) and bool(notes)
    message = "" if generic else str(exc)
    return "; ".join([message, *notes] if message else notes)


def _chain(exc: BaseException) -> Iterator[BaseException]:
    """``exc`` and the exceptions it was raised from or while handling, nearest first."""
    seen: set[int] = set()
    link: BaseException | None = exc
    while link is not None and id(link) not in seen:
        seen.add(id(link))
        yield link
        link = link.__cause__ or link.__context__


def _cause_hint(exc: BaseException) -> str | None:
    """What the SQLite error behind ``exc`` means for the operator (``None`` without one); never content."""
    for link in _chain(exc):
        if isinstance(link, sqlite3.Error):
            name = getattr(link, "sqlite_errorname", None) or type(link).__name__
            return _SQLITE_HINTS.get("_".join(name.split("_")[:2]), f"sqlite error {name}")
    return None


def _shown(value: str) -> str:
    """``value`` as a message shows an id: as is if plain, else escaped (``repr()``); a long one cut short."""
    cut = value[:_SHOWN_MAX]
    shown = cut if _PLAIN_ID.fullmatch(cut) else repr(cut)
    return shown if len(value) <= _SHOWN_MAX else f"{shown}... ({len(value)} characters)"
