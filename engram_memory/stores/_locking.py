"""How long a SQLite connection waits for a lock: the bound every opener checks (no driver imported).

``connect()`` checks it before any file is created; the SQLite store and key vault check it too,
for callers that build them directly.
"""

from __future__ import annotations

from typing import Final

__all__ = ["MAX_BUSY_TIMEOUT_MS", "check_busy_timeout"]

MAX_BUSY_TIMEOUT_MS: Final = 2**31 - 1
"""The longest busy timeout SQLite holds (``PRAGMA busy_timeout`` is a C ``int``; a larger one reads back as 0)."""


def check_busy_timeout(busy_timeout_ms: object) -> None:
    """Refuse a busy timeout SQLite cannot hold.

    Raises:
        ValueError: ``busy_timeout_ms`` is not an ``int`` (``bool`` excluded) from 0 to
            :data:`MAX_BUSY_TIMEOUT_MS`.
    """
    if type(busy_timeout_ms) is not int or not 0 <= busy_timeout_ms <= MAX_BUSY_TIMEOUT_MS:
        raise ValueError(f"busy_timeout_ms must be an int from 0 to {MAX_BUSY_TIMEOUT_MS}")
