"""``DefaultPolicy``: the reference host policy, configured by keyword arguments."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Literal

import attrs

from engram_memory.context import (
    ADMISSION,
    ALL_TOOLS,
    CAPTURE,
    FORGET,
    WITHDRAW,
    HostBinding,
    string_set,
    tool_set,
    utf8_text,
)
from engram_memory.ports import TRUST_CLASSES, AdmissionDecision, AdmissionRequest, CaptureConstraints

__all__ = ["DefaultPolicy"]

_DECISIONS: dict[str, Literal["accept", "reject", "adjudication_required"]] = {
    "accept": "accept",
    "reject": "reject",
    "adjudicate": "adjudication_required",
}


def _family_refs(items: Iterable[str]) -> frozenset[str]:
    return string_set(items, "family refs")


_BOOL = attrs.validators.instance_of(bool)
_NON_EMPTY_TEXT = attrs.validators.and_(utf8_text, attrs.validators.min_len(1))
"""The id and version: receipts digest them, so a non-empty ``str`` with a UTF-8 form."""


def _own_capture(request: AdmissionRequest) -> bool:
    """Whether the requester is the principal that captured the candidate (``False`` when unknown)."""
    return request.capturer is not None and request.capturer.principal == request.principal


def _sorted_pointers(pointers: Iterable[str] | None) -> tuple[str, ...] | None:
    return None if pointers is None else tuple(sorted(set(pointers)))


@attrs.frozen(kw_only=True)
class DefaultPolicy:
    """A fixed policy for every binding.

    Args:
        admission: ``"adjudicate"`` (default: every candidate waits for a host decision through
            :meth:`engram_memory.MemoryAdmin.adjudicate`), ``"accept"`` or ``"reject"``.
        accept_any_requester: with ``admission="accept"``, also accept a candidate whose
            admission another principal requests than the one that captured it. Off by default:
            such a request is held for the host (``adjudication_required``), as is one for a
            candidate whose capturer is unknown (sealed by a pre-release), so that no principal
            gets another's draft admitted, and readable, on its own.
        confirm_capture: captures need a host confirmation.
        confirm_admission: admission requests need a host confirmation.
        allow_retain: ``retention.derivative_rule: "retain"`` is allowed.
        max_retention: the cap on ``retention.expires_at`` after capture time: 365 days by
            default (``None``: no cap). A later expiry is refused (``UNAUTHORIZED``); a capture
            without an expiry is not capped and is kept until withdrawn or forgotten.
        family_refs: reconciliation families the host consents to.
        redaction: JSON pointers of the record fields a reader may see (``None``: the whole
            record; see :meth:`engram_memory.ports.Policy.redaction_allowlist`); ``/record_id``
            is always kept.
        tools: the tools this policy grants (all six by default: the policy only narrows what
            each ``HostBinding.tools`` grants explicitly, so this default opens nothing).
        trust: the trust class assigned to captures.
        network: searches may run a ranker that uses the network (when their
            ``capability_policy`` also allows it); off by default.
        policy_id: an opaque ref naming the policy.
        policy_version: bump it to make decisions on older candidates ``POLICY_STALE``.

    Raises:
        TypeError, ValueError: at construction, for a flag that is not a ``bool``, a trust class
            outside the three, an id or version that is empty, not a ``str`` or holds a lone
            surrogate (a policy answering them would make every call ``POLICY_UNAVAILABLE``).
    """

    admission: Literal["adjudicate", "accept", "reject"] = attrs.field(
        default="adjudicate", validator=attrs.validators.in_(tuple(_DECISIONS))
    )
    accept_any_requester: bool = attrs.field(default=False, validator=_BOOL)
    confirm_capture: bool = attrs.field(default=False, validator=_BOOL)
    confirm_admission: bool = attrs.field(default=False, validator=_BOOL)
    allow_retain: bool = attrs.field(default=False, validator=_BOOL)
    max_retention: timedelta | None = attrs.field(
        default=timedelta(days=365), validator=attrs.validators.instance_of((timedelta, type(None)))
    )
    family_refs: frozenset[str] = attrs.field(default=frozenset(), converter=_family_refs)
    redaction: tuple[str, ...] | None = attrs.field(default=None, converter=_sorted_pointers)
    tools: frozenset[str] = attrs.field(default=ALL_TOOLS, converter=tool_set)
    trust: Literal["asserted", "earned", "signed"] = attrs.field(
        default="asserted", validator=attrs.validators.in_(TRUST_CLASSES)
    )
    network: bool = attrs.field(default=False, validator=_BOOL)
    policy_id: str = attrs.field(default="engram-memory:default-policy", validator=_NON_EMPTY_TEXT)
    policy_version: str = attrs.field(default="1", validator=_NON_EMPTY_TEXT)

    def granted_tools(self, binding: HostBinding) -> frozenset[str]:
        """The configured tools, intersected with the binding's."""
        return self.tools & binding.tools

    def capture_constraints(self, binding: HostBinding) -> CaptureConstraints:  # noqa: ARG002
        """The configured retention and reconciliation limits."""
        return CaptureConstraints(
            allow_retain=self.allow_retain,
            max_retention=self.max_retention,
            family_refs=self.family_refs,
        )

    def requires_confirmation(self, tool: str, binding: HostBinding) -> bool:  # noqa: ARG002
        """Capture and request_admission as configured; withdraw and forget always."""
        if tool == CAPTURE:
            return self.confirm_capture
        if tool == ADMISSION:
            return self.confirm_admission
        return tool in {WITHDRAW, FORGET}

    def redaction_allowlist(self, binding: HostBinding) -> tuple[str, ...] | None:  # noqa: ARG002
        """The configured allowlist."""
        return self.redaction

    def trust_class(self, binding: HostBinding) -> Literal["asserted", "earned", "signed"]:  # noqa: ARG002
        """The configured trust class."""
        return self.trust

    def allows_network(self, binding: HostBinding) -> bool:  # noqa: ARG002
        """The configured ``network`` flag."""
        return self.network

    def decide(self, request: AdmissionRequest, now: datetime) -> AdmissionDecision:
        """The configured decision, issued now for the request's record digest.

        An ``accept`` for a request by another principal than the capturer (or of an unknown
        capturer) is ``adjudication_required`` unless ``accept_any_requester`` is set.
        """
        decision = _DECISIONS[self.admission]
        if decision == "accept" and not self.accept_any_requester and not _own_capture(request):
            decision = "adjudication_required"
        return AdmissionDecision(
            decision=decision,
            record_digest=request.record_digest,
            issued_at=now,
            policy_id=self.policy_id,
            policy_version=self.policy_version,
        )
