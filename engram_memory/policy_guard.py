"""``GuardedPolicy``: a failure of a host policy becomes ``POLICY_UNAVAILABLE``.

The service wraps the host's :class:`~engram_memory.ports.Policy` once, so no call site has to
remember that a policy is foreign code that may raise, or answer a value of the wrong shape (a
decision without a time zone, a trust class outside the contract's three, ``None`` for a
boolean): both are ``POLICY_UNAVAILABLE``, before anything is written. An
:class:`~engram_memory.errors.EngramError` the policy raises is its answer and keeps its code
(``RATE_LIMITED``, ``AUTHORIZATION_EXPIRED``, ...).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from collections.abc import Set as AbstractSet
from datetime import datetime, timedelta
from typing import Literal, TypeVar, cast

from engram_memory.canonical import has_utf8_form
from engram_memory.context import HostBinding
from engram_memory.errors import EngramError, ErrorCode
from engram_memory.ports import (
    DECISIONS,
    TRUST_CLASSES,
    AdmissionDecision,
    AdmissionRequest,
    CaptureConstraints,
    Policy,
)

__all__ = ["GuardedPolicy"]

_T = TypeVar("_T")


def _guarded(call: Callable[[], _T]) -> _T:
    try:
        return call()
    except EngramError:
        raise
    except Exception as exc:
        raise EngramError(ErrorCode.POLICY_UNAVAILABLE, detail=type(exc).__name__) from exc


Fault = str | None
"""What is wrong with a policy's answer, in a few words for the logs; ``None``: nothing."""


def _shaped(value: _T, method: str, fault: Fault) -> _T:
    if fault is not None:
        raise EngramError(ErrorCode.POLICY_UNAVAILABLE, detail=f"policy.{method} answered a malformed value: {fault}")
    return value


def _str_fault(value: object, name: str = "the answer") -> Fault:
    if not isinstance(value, str) or value == "":
        return f"{name} is not a non-empty str"
    return None if has_utf8_form(value) else f"{name} has a lone surrogate"


def _one_of_fault(value: object, allowed: frozenset[str], name: str = "the answer") -> Fault:
    if isinstance(value, str) and value in allowed:
        return None
    return f"{name} is not one of {', '.join(sorted(allowed))}"


def _bool_fault(value: object) -> Fault:
    return None if isinstance(value, bool) else "the answer is not a bool"


def _constraints_fault(value: object) -> Fault:
    if not isinstance(value, CaptureConstraints):
        return "the answer is not a CaptureConstraints"
    allow: object = value.allow_retain  # typed, but built by host code
    cap: object = value.max_retention
    families: object = value.family_refs
    if not isinstance(allow, bool):
        return "allow_retain is not a bool"
    if cap is not None and not isinstance(cap, timedelta):
        return "max_retention is neither a timedelta nor None"
    if not isinstance(families, AbstractSet) or not all(isinstance(ref, str) for ref in families):
        return "family_refs is not a set of str"
    return None


def _decision_fault(value: object) -> Fault:
    if not isinstance(value, AdmissionDecision):
        return "the answer is not an AdmissionDecision"
    issued_at: object = value.issued_at
    if not isinstance(issued_at, datetime) or issued_at.utcoffset() is None:
        return "issued_at is not a datetime with a time zone"
    return (
        _one_of_fault(value.decision, DECISIONS, "decision")
        or _str_fault(value.record_digest, "record_digest")
        or _str_fault(value.policy_id, "policy_id")
        or _str_fault(value.policy_version, "policy_version")
    )


def _strings(value: object, method: str) -> tuple[str, ...]:
    """``value`` as a tuple of strings, if it is an iterable of them (a lone string is not)."""
    if isinstance(value, str | bytes) or not isinstance(value, Iterable):
        return _shaped((), method, "the answer is not an iterable of str")
    items: tuple[object, ...] = tuple(value)
    fault = None if all(isinstance(item, str) for item in items) else "an item is not a str"
    return cast("tuple[str, ...]", _shaped(items, method, fault))


def _checked(method: str, answer: Callable[[], _T], fault_of: Callable[[_T], Fault]) -> _T:
    """The policy's answer if it is well formed; every failure, the check's too, is ``POLICY_UNAVAILABLE``."""

    def checked() -> _T:
        value = answer()
        return _shaped(value, method, fault_of(value))

    return _guarded(checked)


class GuardedPolicy:
    """Delegates to ``policy``; a raise (other than ``EngramError``) or a malformed answer is ``POLICY_UNAVAILABLE``."""

    def __init__(self, policy: Policy) -> None:
        self.inner = policy

    @property
    def policy_id(self) -> str:
        """The wrapped policy's id."""
        return _checked("policy_id", lambda: self.inner.policy_id, _str_fault)

    @property
    def policy_version(self) -> str:
        """The wrapped policy's version."""
        return _checked("policy_version", lambda: self.inner.policy_version, _str_fault)

    def granted_tools(self, binding: HostBinding) -> frozenset[str]:
        """See :meth:`Policy.granted_tools`."""
        return frozenset(_guarded(lambda: _strings(self.inner.granted_tools(binding), "granted_tools")))

    def capture_constraints(self, binding: HostBinding) -> CaptureConstraints:
        """See :meth:`Policy.capture_constraints`."""
        return _checked("capture_constraints", lambda: self.inner.capture_constraints(binding), _constraints_fault)

    def requires_confirmation(self, tool: str, binding: HostBinding) -> bool:
        """See :meth:`Policy.requires_confirmation`."""
        return _checked("requires_confirmation", lambda: self.inner.requires_confirmation(tool, binding), _bool_fault)

    def redaction_allowlist(self, binding: HostBinding) -> tuple[str, ...] | None:
        """See :meth:`Policy.redaction_allowlist`."""

        def allowlist() -> tuple[str, ...] | None:
            answer = self.inner.redaction_allowlist(binding)
            return None if answer is None else _strings(answer, "redaction_allowlist")

        return _guarded(allowlist)

    def trust_class(self, binding: HostBinding) -> Literal["asserted", "earned", "signed"]:
        """See :meth:`Policy.trust_class`."""
        return _checked(
            "trust_class", lambda: self.inner.trust_class(binding), lambda trust: _one_of_fault(trust, TRUST_CLASSES)
        )

    def allows_network(self, binding: HostBinding) -> bool:
        """See :meth:`Policy.allows_network`."""
        return _checked("allows_network", lambda: self.inner.allows_network(binding), _bool_fault)

    def decide(self, request: AdmissionRequest, now: datetime) -> AdmissionDecision:
        """See :meth:`Policy.decide`."""
        return _checked("decide", lambda: self.inner.decide(request, now), _decision_fault)
