"""Typed arguments of the six tools (``<Verb>Args``), validated on construction.

Each class mirrors its closed JSON Schema in :mod:`engram_memory.wire.schemas`. Constructing one
directly (the typed API) runs the same validators as parsing JSON through
:func:`engram_memory.wire.parse_args`; every violation is an
:class:`~engram_memory.errors.EngramError` (``INVALID_SCHEMA``, or ``INVALID_DIGEST`` for a
malformed digest) whose ``pointer`` names the field. The one exception is the 1,048,576-byte
bound on the whole argument object, which needs its serialised form:
:meth:`engram_memory.MemoryService.capture` checks it (no other tool's arguments can reach it).
"""

from __future__ import annotations

from typing import Any, Literal

import attrs

from engram_memory.errors import EngramError, ErrorCode
from engram_memory.wire import limits as lim

__all__ = [
    "CaptureArgs",
    "Citation",
    "Component",
    "Evidence",
    "ForgetArgs",
    "GetArgs",
    "Locator",
    "Payload",
    "PrimaryEvent",
    "Reconciliation",
    "RequestAdmissionArgs",
    "Retention",
    "SearchArgs",
    "SearchCapabilityPolicy",
    "ValidTime",
    "WithdrawArgs",
]


def _ref() -> Any:
    return attrs.field(validator=lim.opaque_ref)


def _refs(low: int, high: int) -> Any:
    return attrs.field(
        converter=lim.as_items,
        validator=[lim.items_of(), lim.each(lim.opaque_ref), lim.item_count, lim.unique_items],
        metadata=lim.item_bounds(low, high),
    )


def _packet_bytes() -> Any:
    return attrs.field(default=lim.PACKET_BYTES_DEFAULT, validator=lim.int_range(*lim.PACKET_BYTES_RANGE))


def _bad(pointer: str, detail: str) -> EngramError:
    return EngramError(ErrorCode.INVALID_SCHEMA, pointer=pointer, detail=detail)


# The constants of each enum/const field, named once: the annotation (what the converter parses)
# and the field's validator (what direct construction checks) both read them.
ChannelFloor = Literal["lexical", "lexical_and_semantic"]
NetworkRule = Literal["forbid", "allow"]
ComponentKind = Literal["context", "decision", "evidence"]
DerivativeRule = Literal["retain", "make-ineligible"]
PayloadVersion = Literal[2]


# --------------------------------------------------------------------------- search / get


@attrs.frozen(kw_only=True)
class SearchCapabilityPolicy:
    """Which ranking channels a search requires; ``network: "allow"`` grants nothing by itself."""

    minimum_channels: ChannelFloor = attrs.field(default="lexical", validator=lim.one_of(ChannelFloor))
    network: NetworkRule = attrs.field(default="forbid", validator=lim.one_of(NetworkRule))


@attrs.frozen(kw_only=True)
class SearchArgs:
    """Arguments of ``engram_memory_search``."""

    query: str = attrs.field(converter=lim.nfc_text, validator=lim.free_text(*lim.QUERY_BYTES))
    purpose_ref: str = _ref()
    limit: int = attrs.field(default=lim.LIMIT_DEFAULT, validator=lim.int_range(*lim.LIMIT_RANGE))
    max_packet_bytes: int = _packet_bytes()
    capability_policy: SearchCapabilityPolicy = attrs.field(
        factory=SearchCapabilityPolicy, validator=lim.instance(SearchCapabilityPolicy)
    )
    page_cursor: str | None = attrs.field(default=None, validator=lim.verbatim_ref)


@attrs.frozen(kw_only=True)
class GetArgs:
    """Arguments of ``engram_memory_get``."""

    record_id: str = attrs.field(validator=lim.record_id)
    purpose_ref: str = _ref()
    max_packet_bytes: int = _packet_bytes()


# --------------------------------------------------------------------------- capture


@attrs.frozen(kw_only=True)
class ValidTime:
    """Closed valid-time interval ``[t, t_end]`` in epoch milliseconds; no ``t_end`` = open."""

    t: int = attrs.field(validator=lim.safe_int)
    t_end: int | None = attrs.field(default=None, validator=attrs.validators.optional(lim.safe_int))

    def __attrs_post_init__(self) -> None:
        if self.t_end is not None and self.t_end < self.t:
            raise _bad("/t_end", "t_end is before t")


@attrs.frozen(kw_only=True)
class Component:
    """One cited component of a payload."""

    component_id: str = _ref()
    kind: ComponentKind = attrs.field(validator=lim.one_of(ComponentKind))
    text: str = attrs.field(converter=lim.nfc_text, validator=lim.free_text(*lim.TEXT_BYTES))
    citation_ids: tuple[str, ...] = _refs(1, lim.LIST_MAX)


@attrs.frozen(kw_only=True)
class PrimaryEvent:
    """The event the payload is primarily about."""

    at: int = attrs.field(validator=lim.safe_int)
    type_ref: str = _ref()
    citation_id: str = _ref()


@attrs.frozen(kw_only=True)
class Locator:
    """Where inside the source the cited content sits."""

    scheme: str = _ref()
    value: str = _ref()


@attrs.frozen(kw_only=True)
class Citation:
    """A cited source with the digest of the cited content."""

    citation_id: str = _ref()
    source_ref: str = _ref()
    locator: Locator = attrs.field(validator=lim.instance(Locator))
    content_digest: str = attrs.field(validator=lim.digest_field)
    observed_at: str | None = attrs.field(default=None, validator=lim.instant)


@attrs.frozen(kw_only=True)
class Retention:
    """What happens to derivatives, and an optional expiry (after capture, within the host cap)."""

    derivative_rule: DerivativeRule = attrs.field(validator=lim.one_of(DerivativeRule))
    expires_at: str | None = attrs.field(default=None, validator=lim.instant)


@attrs.frozen(kw_only=True)
class Reconciliation:
    """Reconciliation families: strictly ascending, unique, at most 64."""

    family_refs: tuple[str, ...] = attrs.field(
        converter=lim.as_items,
        validator=[lim.items_of(), lim.each(lim.opaque_ref), lim.item_count, lim.sorted_unique],
        metadata=lim.item_bounds(0, lim.FAMILY_REFS_MAX),
    )


@attrs.frozen(kw_only=True)
class Payload:
    """The knowledge payload of a capture (``schema_version`` 2), with its cross-references."""

    schema_version: PayloadVersion = attrs.field(validator=lim.one_of(PayloadVersion))
    purpose_ref: str = _ref()
    valid_time: ValidTime = attrs.field(validator=lim.instance(ValidTime))
    components: tuple[Component, ...] = attrs.field(
        converter=lim.as_items,
        validator=[lim.items_of(Component), lim.item_count],
        metadata=lim.item_bounds(1, lim.COMPONENTS_MAX),
    )
    primary_component_id: str = _ref()
    primary_event: PrimaryEvent = attrs.field(validator=lim.instance(PrimaryEvent))
    citations: tuple[Citation, ...] = attrs.field(
        converter=lim.as_items,
        validator=[lim.items_of(Citation), lim.item_count],
        metadata=lim.item_bounds(1, lim.LIST_MAX),
    )
    retention: Retention | None = attrs.field(default=None, validator=lim.instance(Retention, optional=True))
    reconciliation: Reconciliation | None = attrs.field(
        default=None, validator=lim.instance(Reconciliation, optional=True)
    )

    def __attrs_post_init__(self) -> None:
        citation_ids = [c.citation_id for c in self.citations]
        for index, cid in enumerate(citation_ids):
            if cid in citation_ids[:index]:
                raise _bad(f"/citations/{index}/citation_id", "duplicate citation_id")
        known = set(citation_ids)
        component_ids: list[str] = []
        for index, component in enumerate(self.components):
            if component.component_id in component_ids:
                raise _bad(f"/components/{index}/component_id", "duplicate component_id")
            component_ids.append(component.component_id)
            for position, cid in enumerate(component.citation_ids):
                if cid not in known:
                    raise _bad(f"/components/{index}/citation_ids/{position}", "unresolved citation")
        if self.primary_component_id not in component_ids:
            raise _bad("/primary_component_id", "unresolved primary component")
        primary = self.components[component_ids.index(self.primary_component_id)]
        if self.primary_event.citation_id not in known:
            raise _bad("/primary_event/citation_id", "unresolved citation")
        if self.primary_event.citation_id not in primary.citation_ids:
            raise _bad("/primary_event/citation_id", "citation not cited by the primary component")


@attrs.frozen(kw_only=True)
class Evidence:
    """The evidence bundle of a capture; its citations resolve in the payload."""

    evidence_ref: str = _ref()
    evidence_digest: str = attrs.field(validator=lim.digest_field)
    citation_ids: tuple[str, ...] = _refs(1, lim.LIST_MAX)
    attestation: str | None = attrs.field(
        default=None, converter=lim.nfc_text, validator=lim.free_text(0, lim.ATTESTATION_MAX_BYTES)
    )


@attrs.frozen(kw_only=True)
class CaptureArgs:
    """Arguments of ``engram_memory_capture``."""

    idempotency_key: str = attrs.field(validator=lim.idempotency_key)
    payload: Payload = attrs.field(validator=lim.instance(Payload))
    evidence: Evidence = attrs.field(validator=lim.instance(Evidence))

    def __attrs_post_init__(self) -> None:
        known = {c.citation_id for c in self.payload.citations}
        for position, cid in enumerate(self.evidence.citation_ids):
            if cid not in known:
                raise _bad(f"/evidence/citation_ids/{position}", "unresolved evidence citation")


# --------------------------------------------------------------------------- transitions


@attrs.frozen(kw_only=True)
class RequestAdmissionArgs:
    """Arguments of ``engram_memory_request_admission``."""

    candidate_id: str = attrs.field(validator=lim.verbatim_ref)
    idempotency_key: str = attrs.field(validator=lim.idempotency_key)


@attrs.frozen(kw_only=True)
class WithdrawArgs:
    """Arguments of ``engram_memory_withdraw``."""

    candidate_id: str = attrs.field(validator=lim.verbatim_ref)
    idempotency_key: str = attrs.field(validator=lim.idempotency_key)
    reason_ref: str = _ref()


@attrs.frozen(kw_only=True)
class ForgetArgs:
    """Arguments of ``engram_memory_forget``."""

    record_id: str = attrs.field(validator=lim.record_id)
    idempotency_key: str = attrs.field(validator=lim.idempotency_key)
    reason_ref: str = _ref()
