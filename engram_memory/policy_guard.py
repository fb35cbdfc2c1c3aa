"""``GuardedPolicy``: any failure of a host policy becomes ``POLICY_UNAVAILABLE``.

The service wraps the host's :class:`~engram_memory.ports.Policy` once, so no call site has to
remember that a policy is foreign code that may raise.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Literal, TypeVar

from engram_memory.context import HostBinding
from engram_memory.errors import EngramError, ErrorCode
from engram_memory.ports import AdmissionDecision, AdmissionRequest, CaptureConstraints, Policy

__all__ = ["GuardedPolicy"]

_T = TypeVar("_T")


def _guarded(call: Callable[[], _T]) -> _T:
    try:
        return call()
    except EngramError:
        raise
    except Exception as exc:
        raise EngramError(ErrorCode.POLICY_UNAVAILABLE, detail=type(exc).__name__) from exc


class GuardedPolicy:
    """Delegates to ``policy``; an exception other than an ``EngramError`` is ``POLICY_UNAVAILABLE``."""

    def __init__(self, policy: Policy) -> None:
        self.inner = policy

    @property
    def policy_id(self) -> str:
        """The wrapped policy's id."""
        return _guarded(lambda: self.inner.policy_id)

    @property
    def policy_version(self) -> str:
        """The wrapped policy's version."""
        return _guarded(lambda: self.inner.policy_version)

    def granted_tools(self, binding: HostBinding) -> frozenset[str]:
        """See :meth:`Policy.granted_tools`."""
        return _guarded(lambda: frozenset(self.inner.granted_tools(binding)))

    def capture_constraints(self, binding: HostBinding) -> CaptureConstraints:
        """See :meth:`Policy.capture_constraints`."""
        return _guarded(lambda: self.inner.capture_constraints(binding))

    def requires_confirmation(self, tool: str, binding: HostBinding) -> bool:
        """See :meth:`Policy.requires_confirmation`."""
        return _guarded(lambda: bool(self.inner.requires_confirmation(tool, binding)))

    def redaction_allowlist(self, binding: HostBinding) -> tuple[str, ...] | None:
        """See :meth:`Policy.redaction_allowlist`."""
        return _guarded(lambda: self.inner.redaction_allowlist(binding))

    def trust_class(self, binding: HostBinding) -> Literal["asserted", "earned", "signed"]:
        """See :meth:`Policy.trust_class`."""
        return _guarded(lambda: self.inner.trust_class(binding))

    def allows_network(self, binding: HostBinding) -> bool:
        """See :meth:`Policy.allows_network`."""
        return _guarded(lambda: self.inner.allows_network(binding) is True)

    def decide(self, request: AdmissionRequest, now: datetime) -> AdmissionDecision:
        """See :meth:`Policy.decide`."""
        return _guarded(lambda: self.inner.decide(request, now))
