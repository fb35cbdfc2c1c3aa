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


def _shaped(value: _T, *, well_formed: bool) -> _T:
    if not well_formed:
        raise EngramError(ErrorCode.POLICY_UNAVAILABLE, detail="policy answered a malformed value")
    return value


def _is_str(value: object) -> bool:
    return isinstance(value, str) and value != ""


def _is_one_of(value: object, allowed: frozenset[str]) -> bool:
    return isinstance(value, str) and value in allowed


def _is_bool(value: object) -> bool:
    return isinstance(value, bool)


def _is_aware(value: object) -> bool:
    return isinstance(value, datetime) and value.utcoffset() is not None


def _is_constraints(value: object) -> bool:
    if not isinstance(value, CaptureConstraints):
        return False
    allow: object = value.allow_retain  # typed, but built by host code
    cap: object = value.max_retention
    families: object = value.family_refs
    return (
        isinstance(allow, bool)
        and (cap is None or isinstance(cap, timedelta))
        and isinstance(families, AbstractSet)
        and all(isinstance(ref, str) for ref in families)
    )


def _is_decision(value: object) -> bool:
    return (
        isinstance(value, AdmissionDecision)
        and _is_one_of(value.decision, DECISIONS)
        and all(_is_str(text) for text in (value.record_digest, value.policy_id, value.policy_version))
        and _is_aware(value.issued_at)
    )


def _strings(value: object) -> tuple[str, ...]:
    """``value`` as a tuple of strings, if it is an iterable of them (a lone string is not)."""
    if isinstance(value, str | bytes) or not isinstance(value, Iterable):
        return _shaped((), well_formed=False)
    items: tuple[object, ...] = tuple(value)
    return cast("tuple[str, ...]", _shaped(items, well_formed=all(isinstance(item, str) for item in items)))


def _checked(answer: Callable[[], _T], well_formed: Callable[[_T], bool]) -> _T:
    """The policy's answer if it is well formed; every failure, the check's too, is ``POLICY_UNAVAILABLE``."""

    def checked() -> _T:
        value = answer()
        return _shaped(value, well_formed=well_formed(value))

    return _guarded(checked)


class GuardedPolicy:
    """Delegates to ``policy``; a raise (other than ``EngramError``) or a malformed answer is ``POLICY_UNAVAILABLE``."""

    def __init__(self, policy: Policy) -> None:
        self.inner = policy

    @property
    def policy_id(self) -> str:
        """The wrapped policy's id."""
        return _checked(lambda: self.inner.policy_id, _is_str)

    @property
    def policy_version(self) -> str:
        """The wrapped policy's version."""
        return _checked(lambda: self.inner.policy_version, _is_str)

    def granted_tools(self, binding: HostBinding) -> frozenset[str]:
        """See :meth:`Policy.granted_tools`."""
        return frozenset(_guarded(lambda: _strings(self.inner.granted_tools(binding))))

    def capture_constraints(self, binding: HostBinding) -> CaptureConstraints:
        """See :meth:`Policy.capture_constraints`."""
        return _checked(lambda: self.inner.capture_constraints(binding), _is_constraints)

    def requires_confirmation(self, tool: str, binding: HostBinding) -> bool:
        """See :meth:`Policy.requires_confirmation`."""
        return _checked(lambda: self.inner.requires_confirmation(tool, binding), _is_bool)

    def redaction_allowlist(self, binding: HostBinding) -> tuple[str, ...] | None:
        """See :meth:`Policy.redaction_allowlist`."""

        def allowlist() -> tuple[str, ...] | None:
            answer = self.inner.redaction_allowlist(binding)
            return None if answer is None else _strings(answer)

        return _guarded(allowlist)

    def trust_class(self, binding: HostBinding) -> Literal["asserted", "earned", "signed"]:
        """See :meth:`Policy.trust_class`."""
        return _checked(lambda: self.inner.trust_class(binding), lambda trust: _is_one_of(trust, TRUST_CLASSES))

    def allows_network(self, binding: HostBinding) -> bool:
        """See :meth:`Policy.allows_network`."""
        return _checked(lambda: self.inner.allows_network(binding), _is_bool)

    def decide(self, request: AdmissionRequest, now: datetime) -> AdmissionDecision:
        """See :meth:`Policy.decide`."""
        return _checked(lambda: self.inner.decide(request, now), _is_decision)
