"""Host-bound call context: who calls, in which scope, for what purpose, with which approval.

Nothing here ever comes from tool arguments. The host builds a :class:`HostBinding` per call.
"""

from __future__ import annotations

import functools
import unicodedata
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Final

import attrs

from engram_memory.canonical import Domain, digest, has_utf8_form
from engram_memory.errors import EngramError, ErrorCode
from engram_memory.wire.limits import OPAQUE_BYTES

if TYPE_CHECKING:
    from engram_memory.ports import Clock

__all__ = [
    "ADMISSION",
    "ALL_TOOLS",
    "CAPTURE",
    "FORGET",
    "GET",
    "SEARCH",
    "WITHDRAW",
    "Confirmation",
    "HostBinding",
    "now_within_deadline",
    "scope_key",
    "string_set",
    "tool_set",
    "utf8_text",
]

SEARCH: Final = "engram_memory_search"
GET: Final = "engram_memory_get"
CAPTURE: Final = "engram_memory_capture"
ADMISSION: Final = "engram_memory_request_admission"
WITHDRAW: Final = "engram_memory_withdraw"
FORGET: Final = "engram_memory_forget"
ALL_TOOLS: Final = frozenset({SEARCH, GET, CAPTURE, ADMISSION, WITHDRAW, FORGET})


def string_set(items: Iterable[str], what: str) -> frozenset[str]:
    """``items`` as a frozen set of strings; ``what`` names them in the error.

    Raises:
        TypeError: ``items`` is a single ``str`` or ``bytes`` (an iterable of characters), or holds
            something other than a ``str``.
    """
    if isinstance(items, str | bytes):
        raise TypeError(f"{what} must be a collection, not a single string")
    names = frozenset(items)
    if not all(isinstance(name, str) for name in names):
        raise TypeError(f"{what} must be strings")
    return names


def tool_set(tools: Iterable[str]) -> frozenset[str]:
    """``tools`` as a set of tool names; a lone string, or a name not in :data:`ALL_TOOLS`, is refused.

    A bare ``"engram_memory_search"`` is an iterable of characters: taken as it is, it would grant
    nothing and every call would be an unknown tool, far from the real mistake.

    Raises:
        TypeError: ``tools`` is a ``str`` or ``bytes``, or holds something other than a ``str``.
        ValueError: a name is not one of the six tools.
    """
    names = string_set(tools, "tool names")
    if not names <= ALL_TOOLS:
        raise ValueError(f"unknown tool names: {sorted(names - ALL_TOOLS)}; the tools are {sorted(ALL_TOOLS)}")
    return names


_UTC_MAX: Final = datetime.max.replace(tzinfo=UTC)
_UTC_MIN: Final = datetime.min.replace(tzinfo=UTC)


def _in_utc(value: datetime) -> datetime:
    """An aware ``value`` in UTC (anything else unchanged, for :func:`_aware` to refuse).

    Stored in UTC so that the service's subtractions count elapsed time: two datetimes sharing
    one ``tzinfo`` object subtract by their wall-clock fields, across a DST change too. An
    instant beyond UTC's range (``datetime.max`` west of Greenwich, a "never" deadline) becomes
    the largest (or smallest) UTC datetime.
    """
    given: object = value  # typed callers pass a datetime; at run time it can be anything
    if isinstance(given, datetime) and given.utcoffset() is not None:
        try:
            return given.astimezone(UTC)
        except OverflowError:
            return _UTC_MAX if given.year == _UTC_MAX.year else _UTC_MIN
    return value


def _aware(_inst: object, attribute: attrs.Attribute[datetime], value: datetime) -> None:
    if not isinstance(value, datetime):
        raise TypeError(f"{attribute.name} must be a datetime")
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError(f"{attribute.name} must be a timezone-aware datetime")


def _as_text(name: str, value: object) -> str:
    """``value`` if it is a ``str`` with a UTF-8 form (the store keeps it, digests hash its bytes)."""
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str")
    if not has_utf8_form(value):
        raise ValueError(f"{name} must be valid Unicode text (no lone surrogate)")
    return value


def utf8_text(_inst: object, attribute: attrs.Attribute[str], value: object) -> None:
    """An attrs validator: a ``str`` with a UTF-8 form, else ``TypeError`` / ``ValueError``."""
    _as_text(attribute.name, value)


def _confirmation_id(_inst: object, attribute: attrs.Attribute[str], value: object) -> None:
    """Text, non-empty, at most 512 UTF-8 bytes (as an opaque ref) and in Unicode NFC.

    The id is consumed by value: two spellings of one id must not be two approvals, and every
    store must keep exactly the id it was given.
    """
    text = _as_text(attribute.name, value)
    if not text:
        raise ValueError(f"{attribute.name} must not be empty")
    if len(text.encode("utf-8")) > OPAQUE_BYTES[1]:
        raise ValueError(f"{attribute.name} must be at most {OPAQUE_BYTES[1]} UTF-8 bytes")
    if not unicodedata.is_normalized("NFC", text):
        raise ValueError(f"{attribute.name} must be in Unicode NFC")


@attrs.frozen(kw_only=True)
class Confirmation:
    """A human approval the host obtained for one operation.

    Valid for a call iff ``tool``, ``target`` and ``operation_digest`` match the call
    (see :meth:`engram_memory.MemoryService.operation_digest`), ``approved_at − requested_at`` is
    within 0..300 s, the call runs within 30 s after ``approved_at``, and ``id`` was never used
    (it is consumed in the same unit of work as the mutation).
    :meth:`engram_memory.MemoryService.confirmation` builds the one of a given call.

    Checked when built (and by ``attrs.evolve``): ``id``, ``tool``, ``target`` and
    ``operation_digest`` must be ``str`` (else ``TypeError``) with no lone surrogate (else
    ``ValueError``); ``id`` must also be non-empty, at most 512 UTF-8 bytes and in Unicode NFC
    (else ``ValueError``); both times must be ``datetime`` (else ``TypeError``) and timezone-aware
    (else ``ValueError``); they are kept in UTC. The id is stored in clear in the scope (to
    refuse its reuse): keep personal data, such as an approver's name or e-mail, out of it.
    """

    id: str = attrs.field(validator=_confirmation_id)
    tool: str = attrs.field(validator=utf8_text)
    target: str = attrs.field(validator=utf8_text)
    operation_digest: str = attrs.field(validator=utf8_text)
    requested_at: datetime = attrs.field(converter=_in_utc, validator=_aware)
    approved_at: datetime = attrs.field(converter=_in_utc, validator=_aware)


@attrs.frozen(kw_only=True)
class HostBinding:
    """Everything the host owns about one tool call.

    ``tools`` are the tools this binding grants, named explicitly: there is no default, and a
    tool left out is absent (``-32602``). A single string or an unknown name is refused
    (``TypeError`` / ``ValueError``, see :func:`tool_set`). Pass :data:`ALL_TOOLS` to grant all six; the Policy may
    narrow them further. ``deadline`` is an aware datetime (kept in UTC) after which the call fails with
    ``DEADLINE_EXCEEDED``. The six ids and ``audit_id`` are not checked when built: a tenant,
    workspace, principal, agent id, session or purpose that is not a ``str``, is empty, is not
    valid Unicode text (a lone surrogate) or is not in Unicode NFC, or an ``audit_id`` that is
    neither ``None`` nor valid Unicode text, makes every service call a protocol error (-32603), and
    :class:`~engram_memory.MemoryAdmin` refuses such a tenant or workspace with ``TypeError`` /
    ``ValueError``. Receipts and scope keys digest NFC text, so two spellings of one id must never
    both be in use. ``confirmation`` is a
    :class:`Confirmation` or ``None`` (anything else is a ``TypeError`` here, and ``-32603`` if
    it reaches a call anyway).
    """

    tenant_id: str
    workspace_id: str
    principal: str
    agent_id: str
    session: str
    purpose_ref: str
    tools: frozenset[str] = attrs.field(converter=tool_set)
    audit_id: str | None = None
    deadline: datetime | None = attrs.field(
        default=None, converter=attrs.converters.optional(_in_utc), validator=attrs.validators.optional(_aware)
    )
    confirmation: Confirmation | None = attrs.field(
        default=None, validator=attrs.validators.optional(attrs.validators.instance_of(Confirmation))
    )

    @property
    def scope(self) -> str:
        """The opaque scope key of (tenant, workspace); every store access is partitioned by it."""
        return scope_key(self.tenant_id, self.workspace_id)


def now_within_deadline(clock: Clock, binding: HostBinding) -> datetime:
    """The clock's instant, or ``DEADLINE_EXCEEDED`` when the binding's deadline has passed."""
    now = clock.now()
    if binding.deadline is not None and now >= binding.deadline:
        raise EngramError(ErrorCode.DEADLINE_EXCEEDED)
    return now


@functools.lru_cache(maxsize=4096)
def scope_key(tenant_id: str, workspace_id: str) -> str:
    """Derive the opaque scope key of a (tenant, workspace) pair (a digest; reveals neither).

    Raises:
        ValueError: an id is not in Unicode NFC. Digests normalise strings to NFC, so two
            spellings of one id would share a scope; host ids must therefore be NFC already.
    """
    if not (unicodedata.is_normalized("NFC", tenant_id) and unicodedata.is_normalized("NFC", workspace_id)):
        raise ValueError("tenant and workspace ids must be in Unicode NFC")
    return digest(Domain.SCOPE_KEY, {"tenant_id": tenant_id, "workspace_id": workspace_id})
