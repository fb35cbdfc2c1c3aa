"""Database files are created owner-only (SQLite gives its -wal and -shm files the same mode)."""

from __future__ import annotations

import contextlib
import os

__all__ = ["create_private"]


def create_private(path: str) -> None:
    """Create an empty file with mode 0600 if ``path`` does not exist yet (never touches an existing file).

    A symbolic link is followed, as SQLite follows it: a link to a file that does not exist yet gets
    that file created owner-only (``O_EXCL`` alone would refuse the link and leave SQLite to create
    the file with the umask's mode).
    """
    with contextlib.suppress(OSError):  # exists already, or sqlite3 reports the real problem at open
        os.close(os.open(os.path.realpath(path), os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
