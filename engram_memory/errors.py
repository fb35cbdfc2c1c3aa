"""Error codes, the retriable table, and the exception trees.

Three families, deliberately separate:

* :class:`EngramError` — a memory-level answer. It becomes the ``error`` of a failure envelope:
  ``{code, message, retriable}``. The code's retriable flag comes from :data:`RETRIABLE` (one
  table, never decided at a raise site) and the message is a constant public sentence; details go
  to ``__notes__`` (PEP 678) and to ``pointer``, never to the envelope. ``call_tool`` logs the
  code and pointer at DEBUG, never the notes (they may quote an argument).
* :class:`ProtocolError` — not a memory answer at all (JSON-RPC ``-32603`` untrusted or missing host
  context, ``-32602`` unknown or ungranted tool). It is *not* an ``EngramError`` so it can never
  end up inside an envelope.
* Port errors (:class:`PortError` and subclasses) — raised by Store / KeyVault / Policy / Ranker
  adapters after translating their driver's exceptions; the service maps them to codes.

``EngramError`` and ``ProtocolError`` both answer ``public_message``: the constant text that may
leave the process (the envelope's ``error.message``, or the JSON-RPC error's ``message``), equal to
``str(error)``. ``ProtocolError.message`` is the same text under its JSON-RPC name.
"""

from __future__ import annotations

import enum
from typing import ClassVar, Final

__all__ = [
    "PUBLIC_MESSAGES",
    "RETRIABLE",
    "EngramError",
    "ErrorCode",
    "JsonRpcCode",
    "KeyUnavailableError",
    "MissingFileError",
    "PortError",
    "ProtocolError",
    "SealIntegrityError",
    "StoreConflictError",
    "StoreCorruptError",
    "StoreOutcomeUnknownError",
    "StoreUnavailableError",
]


class ErrorCode(enum.StrEnum):
    """Every error code of the founding contract, spelled exactly as on the wire."""

    INVALID_SCHEMA = "INVALID_SCHEMA"
    INVALID_DIGEST = "INVALID_DIGEST"
    UNAUTHORIZED = "UNAUTHORIZED"
    AUTHORIZATION_EXPIRED = "AUTHORIZATION_EXPIRED"
    AUTHORIZATION_REVOKED = "AUTHORIZATION_REVOKED"
    NOT_FOUND = "NOT_FOUND"
    DIGEST_CONFLICT = "DIGEST_CONFLICT"
    ILLEGAL_TRANSITION = "ILLEGAL_TRANSITION"
    ALREADY_TERMINAL = "ALREADY_TERMINAL"
    MUTATION_OUTCOME_UNKNOWN = "MUTATION_OUTCOME_UNKNOWN"
    GATE_FAILED = "gate_failed"
    STALE_PAGE = "STALE_PAGE"
    RESULT_TOO_LARGE = "RESULT_TOO_LARGE"
    PROJECTION_OVERSIZED = "PROJECTION_OVERSIZED"
    RATE_LIMITED = "RATE_LIMITED"
    DEADLINE_EXCEEDED = "DEADLINE_EXCEEDED"
    CANCELLED = "CANCELLED"
    STORE_UNAVAILABLE = "STORE_UNAVAILABLE"
    FENCE_LOST = "FENCE_LOST"
    CURSOR_GAP = "CURSOR_GAP"
    POLICY_UNAVAILABLE = "POLICY_UNAVAILABLE"
    POLICY_STALE = "POLICY_STALE"
    PROJECTION_STALE = "PROJECTION_STALE"
    RANKING_UNAVAILABLE = "RANKING_UNAVAILABLE"
    CAPABILITY_UNAVAILABLE = "CAPABILITY_UNAVAILABLE"
    JOURNAL_CORRUPT = "JOURNAL_CORRUPT"
    BLOB_MISSING = "BLOB_MISSING"
    REGISTRY_VERSION_UNAVAILABLE = "REGISTRY_VERSION_UNAVAILABLE"
    BACKUP_INVALID = "BACKUP_INVALID"
    RESTORE_REFUSED = "RESTORE_REFUSED"
    MIGRATION_LEDGER_INVALID = "MIGRATION_LEDGER_INVALID"


RETRIABLE: Final[dict[ErrorCode, bool]] = {
    ErrorCode.INVALID_SCHEMA: False,
    ErrorCode.INVALID_DIGEST: False,
    ErrorCode.UNAUTHORIZED: False,
    ErrorCode.AUTHORIZATION_EXPIRED: False,
    ErrorCode.AUTHORIZATION_REVOKED: False,
    ErrorCode.NOT_FOUND: False,
    ErrorCode.DIGEST_CONFLICT: False,
    ErrorCode.ILLEGAL_TRANSITION: False,
    ErrorCode.ALREADY_TERMINAL: False,
    # it may have committed: the caller retries with the same key until a clear outcome
    ErrorCode.MUTATION_OUTCOME_UNKNOWN: True,
    ErrorCode.GATE_FAILED: False,
    # the caller starts a new search: the same request would fail again
    ErrorCode.STALE_PAGE: False,
    ErrorCode.RESULT_TOO_LARGE: False,
    ErrorCode.PROJECTION_OVERSIZED: False,
    ErrorCode.RATE_LIMITED: True,
    ErrorCode.DEADLINE_EXCEEDED: True,
    ErrorCode.CANCELLED: True,
    ErrorCode.STORE_UNAVAILABLE: True,
    ErrorCode.FENCE_LOST: True,
    ErrorCode.CURSOR_GAP: True,
    ErrorCode.POLICY_UNAVAILABLE: True,
    ErrorCode.POLICY_STALE: True,
    ErrorCode.PROJECTION_STALE: True,
    ErrorCode.RANKING_UNAVAILABLE: True,
    ErrorCode.CAPABILITY_UNAVAILABLE: False,
    ErrorCode.JOURNAL_CORRUPT: False,
    ErrorCode.BLOB_MISSING: False,
    ErrorCode.REGISTRY_VERSION_UNAVAILABLE: False,
    ErrorCode.BACKUP_INVALID: False,
    ErrorCode.RESTORE_REFUSED: False,
    ErrorCode.MIGRATION_LEDGER_INVALID: False,
}
"""Whether a caller may retry (mutations with the same idempotency key): the contract's table."""

PUBLIC_MESSAGES: Final[dict[ErrorCode, str]] = {
    ErrorCode.INVALID_SCHEMA: "arguments do not match the closed schema",
    ErrorCode.INVALID_DIGEST: "a digest is malformed or does not match",
    ErrorCode.UNAUTHORIZED: "the operation is not permitted",
    ErrorCode.AUTHORIZATION_EXPIRED: "the authorization has expired",
    ErrorCode.AUTHORIZATION_REVOKED: "the authorization has been revoked",
    ErrorCode.NOT_FOUND: "memory target not found",
    ErrorCode.DIGEST_CONFLICT: "the idempotency key is bound to a different operation",
    ErrorCode.ILLEGAL_TRANSITION: "the lifecycle state forbids this operation",
    ErrorCode.ALREADY_TERMINAL: "the target is already in a terminal state",
    ErrorCode.MUTATION_OUTCOME_UNKNOWN: "the outcome of the mutation is unknown",
    ErrorCode.GATE_FAILED: "a confirmation or policy gate was not met",
    ErrorCode.STALE_PAGE: "the page cursor is no longer valid",
    ErrorCode.RESULT_TOO_LARGE: "the result exceeds the transport size limit",
    ErrorCode.PROJECTION_OVERSIZED: "a record exceeds the packet byte budget",
    ErrorCode.RATE_LIMITED: "too many requests",
    ErrorCode.DEADLINE_EXCEEDED: "the deadline was exceeded",
    ErrorCode.CANCELLED: "the operation was cancelled",
    ErrorCode.STORE_UNAVAILABLE: "the memory store is unavailable",
    ErrorCode.FENCE_LOST: "the store writer fence was lost",
    ErrorCode.CURSOR_GAP: "the journal has a cursor gap",
    ErrorCode.POLICY_UNAVAILABLE: "the host policy is unavailable",
    ErrorCode.POLICY_STALE: "the policy decision is stale",
    ErrorCode.PROJECTION_STALE: "a projection is stale",
    ErrorCode.RANKING_UNAVAILABLE: "a required ranking channel is unavailable",
    ErrorCode.CAPABILITY_UNAVAILABLE: "a required capability is unavailable",
    ErrorCode.JOURNAL_CORRUPT: "the journal failed verification",
    ErrorCode.BLOB_MISSING: "a stored body is missing",
    ErrorCode.REGISTRY_VERSION_UNAVAILABLE: "the registry version is unavailable",
    ErrorCode.BACKUP_INVALID: "the backup is invalid",
    ErrorCode.RESTORE_REFUSED: "the restore was refused",
    ErrorCode.MIGRATION_LEDGER_INVALID: "the migration ledger is invalid",
}
"""The constant, sanitised ``message`` of each code. Callers act on code and retriable only."""


class EngramError(Exception):
    """A memory-level failure; safe to put in an envelope.

    ``code`` decides ``retriable`` (through :data:`RETRIABLE`) and ``public_message``, the
    envelope's ``error.message`` (through :data:`PUBLIC_MESSAGES`). ``pointer`` optionally names
    the offending argument as an RFC 6901 JSON pointer; it is for logs and tests, never for the wire.
    """

    code: ErrorCode

    def __init__(self, code: ErrorCode, *, pointer: str | None = None, detail: str = "") -> None:
        self.code = code
        self.pointer = pointer
        super().__init__(PUBLIC_MESSAGES[code])
        if pointer is not None:
            self.add_note(f"at {pointer or '/'}")
        if detail:
            self.add_note(detail)

    @property
    def retriable(self) -> bool:
        """Whether the caller may retry, decided by the code alone."""
        return RETRIABLE[self.code]

    @property
    def public_message(self) -> str:
        """The constant sanitised message that goes on the wire."""
        return PUBLIC_MESSAGES[self.code]

    def __repr__(self) -> str:
        return f"EngramError({self.code.value!r}, pointer={self.pointer!r})"


class JsonRpcCode(enum.IntEnum):
    """The two JSON-RPC error codes a memory tool call can end with instead of an envelope."""

    INVALID_PARAMS = -32602
    """Unknown or ungranted tool."""
    INTERNAL_ERROR = -32603
    """Trusted call context unavailable: missing host context, purpose mismatch, no confirmation."""


class ProtocolError(Exception):
    """Not a memory answer: the transport should send a JSON-RPC error and the agent should stop.

    Deliberately not an :class:`EngramError`, so it can never become an envelope. ``message`` and
    ``public_message`` are the same constant text (:attr:`MESSAGES` of the code): ``message`` is
    the JSON-RPC name, ``public_message`` the one :class:`EngramError` answers too. The detail goes
    to ``__notes__``, never to either.
    """

    MESSAGES: ClassVar[dict[JsonRpcCode, str]] = {
        JsonRpcCode.INVALID_PARAMS: "Unknown tool",
        JsonRpcCode.INTERNAL_ERROR: "trusted call context unavailable",
    }

    def __init__(self, code: JsonRpcCode, *, detail: str = "") -> None:
        self.code = code
        super().__init__(self.MESSAGES[code])
        if detail:
            self.add_note(detail)

    @property
    def message(self) -> str:
        """The constant JSON-RPC error message."""
        return self.MESSAGES[self.code]

    @property
    def public_message(self) -> str:
        """The same constant text as :attr:`message`, under the name :class:`EngramError` uses."""
        return self.MESSAGES[self.code]

    @classmethod
    def unknown_tool(cls, detail: str = "") -> ProtocolError:
        """-32602: the tool does not exist or is not granted to this binding."""
        return cls(JsonRpcCode.INVALID_PARAMS, detail=detail)

    @classmethod
    def untrusted_context(cls, detail: str = "") -> ProtocolError:
        """-32603: the host context is missing, untrusted or does not match the call."""
        return cls(JsonRpcCode.INTERNAL_ERROR, detail=detail)


class PortError(Exception):
    """Base of errors raised by port adapters (Store, KeyVault, Policy, Ranker)."""


class StoreUnavailableError(PortError):
    """The store cannot serve the call now (lock timeout, I/O error); retriable."""


class StoreOutcomeUnknownError(PortError):
    """The commit may or may not have happened (connection lost during COMMIT)."""


class StoreConflictError(PortError):
    """A concurrent writer committed first; the unit of work was rolled back and can be re-run."""


class StoreCorruptError(PortError):
    """Stored data failed an integrity check (a tampered row, a missing body)."""

    def __init__(self, code: ErrorCode, detail: str = "") -> None:
        self.code = code
        super().__init__(PUBLIC_MESSAGES[code])
        if detail:
            self.add_note(detail)


class KeyUnavailableError(PortError):
    """The data key is unknown or destroyed: the sealed content is gone for good."""


class MissingFileError(PortError):
    """One file of a SQLite memory is missing while the other holds data.

    A store without its key vault, or a key vault without its store: a partial restore, an
    unmounted volume, a mistyped path. Raised before anything is created; not retriable as is.
    """


class SealIntegrityError(PortError):
    """A sealed envelope failed authentication (tampered ciphertext or wrong context)."""
