"""``GuardedPolicy`` accepts every well-typed answer a host may give and nothing else; ``DefaultPolicy``
refuses a malformed setting when it is built, not on every call."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import attrs
import pytest

from engram_memory import DefaultPolicy, ErrorCode
from engram_memory.errors import EngramError
from engram_memory.policy_guard import GuardedPolicy
from engram_memory.ports import AdmissionDecision, AdmissionRequest, CaptureConstraints
from engram_memory.testing import PolicyOverride, make_binding

A = make_binding("tenant-a", "workspace-1", "principal-1")
BASE = DefaultPolicy(admission="accept")
NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
REQUEST = AdmissionRequest(
    candidate_id="candidate_x",
    scope=A.scope,
    record_digest="sha256:" + "0" * 64,
    payload_digest="sha256:" + "1" * 64,
    payload={},
    evidence={},
    principal=A.principal,
    agent_id=A.agent_id,
    session=A.session,
)


class _Loose(frozenset[str]):
    """A frozenset subclass, as a host's own type might be."""


def test_well_typed_answers_in_other_containers_are_accepted() -> None:
    tools = sorted(A.tools)
    cases: list[tuple[dict[str, Any], Any]] = [
        ({"granted_tools": lambda _b: dict.fromkeys(tools, True).keys()}, set(tools)),
        ({"granted_tools": lambda _b: (tool for tool in tools)}, set(tools)),
        ({"granted_tools": lambda _b: _Loose(tools)}, set(tools)),
        ({"granted_tools": lambda _b: list(tools)}, set(tools)),
    ]
    for override, expected in cases:
        assert GuardedPolicy(PolicyOverride(BASE, **override)).granted_tools(A) == expected
    constraints = CaptureConstraints(allow_retain=True, max_retention=None, family_refs={"family:a"})  # type: ignore[arg-type]
    guarded = GuardedPolicy(PolicyOverride(BASE, capture_constraints=lambda _b: constraints))
    assert guarded.capture_constraints(A).family_refs == {"family:a"}
    india = timezone(timedelta(hours=5, minutes=30))

    def decide(request: AdmissionRequest, now: datetime) -> AdmissionDecision:
        return attrs.evolve(BASE.decide(request, now), issued_at=now.astimezone(india))

    decided = GuardedPolicy(PolicyOverride(BASE, decide=decide)).decide(REQUEST, NOW)
    assert decided.issued_at == NOW


@pytest.mark.parametrize(
    "override",
    [
        {"granted_tools": lambda _b: "engram_memory_search"},
        {"granted_tools": lambda _b: [b"engram_memory_search"]},
        {"granted_tools": lambda _b: None},
        {"trust_class": lambda _b: ["asserted"]},
        {"trust_class": lambda _b: None},
        {"requires_confirmation": lambda _t, _b: 1},
        {"capture_constraints": lambda _b: CaptureConstraints(family_refs=["family:a"])},  # type: ignore[arg-type]
    ],
    ids=["a lone string", "bytes", "None", "a list", "None trust", "an int", "a list of families"],
)
def test_a_malformed_answer_is_policy_unavailable(override: dict[str, Any]) -> None:
    guarded = GuardedPolicy(PolicyOverride(BASE, **override))
    calls: dict[str, Callable[[], object]] = {
        "granted_tools": lambda: guarded.granted_tools(A),
        "trust_class": lambda: guarded.trust_class(A),
        "requires_confirmation": lambda: guarded.requires_confirmation("engram_memory_capture", A),
        "capture_constraints": lambda: guarded.capture_constraints(A),
    }
    (method,) = override
    with pytest.raises(EngramError) as info:
        calls[method]()
    assert info.value.code is ErrorCode.POLICY_UNAVAILABLE


@pytest.mark.parametrize(
    "setting",
    [
        {"confirm_capture": 0},
        {"confirm_admission": "yes"},
        {"allow_retain": 1},
        {"network": None},
        {"max_retention": 3600},
        {"trust": "root"},
        {"policy_id": ""},
        {"policy_version": 2},
    ],
)
def test_default_policy_refuses_a_malformed_setting_when_built(setting: dict[str, Any]) -> None:
    with pytest.raises((TypeError, ValueError)):
        DefaultPolicy(**setting)
