"""``GuardedPolicy`` accepts every well-typed answer a host may give and nothing else; ``DefaultPolicy``
refuses a malformed setting when it is built, not on every call."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta, timezone
from types import SimpleNamespace
from typing import Any, Final, cast

import attrs
import pytest

from engram_memory import DefaultPolicy, ErrorCode, ManualClock, connect
from engram_memory.errors import EngramError
from engram_memory.policy_guard import GuardedPolicy
from engram_memory.ports import AdmissionDecision, AdmissionRequest, CaptureConstraints, Policy
from engram_memory.testing import PolicyOverride, make_binding
from engram_memory.testing.fakes import CAPTURE, capture_args, fail, make_key
from engram_memory.wire import CaptureArgs, parse_args

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
        {"policy_id": "ref-\udcff"},
        {"policy_version": b"2026.1-\xff".decode("utf-8", "surrogateescape")},
    ],
)
def test_default_policy_refuses_a_malformed_setting_when_built(setting: dict[str, Any]) -> None:
    with pytest.raises((TypeError, ValueError)):
        DefaultPolicy(**setting)


# --------------------------------------------------------------------------- every answer is checked


class _Answering:
    """``BASE``, except for the answers given by name (``policy_id`` and ``policy_version`` as values)."""

    def __init__(self, **answers: object) -> None:
        self._answers = answers

    def __getattr__(self, name: str) -> Any:
        if name not in self._answers:
            return getattr(BASE, name)
        answer = self._answers[name]
        if name in {"policy_id", "policy_version"}:
            return answer
        if isinstance(answer, BaseException):

            def raising(*_args: object) -> object:
                raise answer

            return raising
        return lambda *_args: answer


def _guarded(**answers: object) -> GuardedPolicy:
    return GuardedPolicy(cast("Policy", _Answering(**answers)))


def _ask(guarded: GuardedPolicy, method: str) -> object:
    calls: dict[str, Callable[[], object]] = {
        "policy_id": lambda: guarded.policy_id,
        "policy_version": lambda: guarded.policy_version,
        "decide": lambda: guarded.decide(REQUEST, NOW),
        "capture_constraints": lambda: guarded.capture_constraints(A),
        "allows_network": lambda: guarded.allows_network(A),
        "redaction_allowlist": lambda: guarded.redaction_allowlist(A),
        "trust_class": lambda: guarded.trust_class(A),
    }
    return calls[method]()


DECIDED: Final = BASE.decide(REQUEST, NOW)
NOT_STR: Final = "the answer is not a non-empty str"
MALFORMED: Final[dict[str, tuple[str, object, str]]] = {
    "empty policy id": ("policy_id", "", NOT_STR),
    "policy id None": ("policy_id", None, NOT_STR),
    "empty policy version": ("policy_version", "", NOT_STR),
    "policy id with a lone surrogate": ("policy_id", "ref-\udcff", "the answer has a lone surrogate"),
    "policy version with a lone surrogate": ("policy_version", "2026.1-\udcff", "the answer has a lone surrogate"),
    "decision with a lone surrogate in its version": (
        "decide",
        attrs.evolve(DECIDED, policy_version="2026.1-\udcff"),
        "policy_version has a lone surrogate",
    ),
    "decision without a version": (
        "decide",
        attrs.evolve(DECIDED, policy_version=""),
        "policy_version is not a non-empty str",
    ),
    "decision with a None version": (
        "decide",
        attrs.evolve(DECIDED, policy_version=None),  # type: ignore[arg-type]
        "policy_version is not a non-empty str",
    ),
    "decision without a policy id": ("decide", attrs.evolve(DECIDED, policy_id=""), "policy_id is not a non-empty str"),
    "decision without a record digest": (
        "decide",
        attrs.evolve(DECIDED, record_digest=""),
        "record_digest is not a non-empty str",
    ),
    "decision outside the three": (
        "decide",
        attrs.evolve(DECIDED, decision="maybe"),  # type: ignore[arg-type]
        "decision is not one of accept, adjudication_required, reject",
    ),
    "decision issued at a naive time": (
        "decide",
        attrs.evolve(DECIDED, issued_at=NOW.replace(tzinfo=None)),
        "issued_at is not a datetime with a time zone",
    ),
    "decision as a dict": ("decide", attrs.asdict(DECIDED), "the answer is not an AdmissionDecision"),
    "decision as a look-alike object": (
        "decide",
        SimpleNamespace(**attrs.asdict(DECIDED, recurse=False)),
        "the answer is not an AdmissionDecision",
    ),
    "decision None": ("decide", None, "the answer is not an AdmissionDecision"),
    "families of ints": (
        "capture_constraints",
        CaptureConstraints(family_refs=frozenset({1})),  # type: ignore[arg-type]
        "family_refs is not a set of str",
    ),
    "retention cap in seconds": (
        "capture_constraints",
        CaptureConstraints(max_retention=3600),  # type: ignore[arg-type]
        "max_retention is neither a timedelta nor None",
    ),
    "allow_retain 1": (
        "capture_constraints",
        CaptureConstraints(allow_retain=1),  # type: ignore[arg-type]
        "allow_retain is not a bool",
    ),
    "allow_retain None": (
        "capture_constraints",
        CaptureConstraints(allow_retain=None),  # type: ignore[arg-type]
        "allow_retain is not a bool",
    ),
    "constraints as a dict": (
        "capture_constraints",
        {"allow_retain": False},
        "the answer is not a CaptureConstraints",
    ),
    "network 1": ("allows_network", 1, "the answer is not a bool"),
    "network None": ("allows_network", None, "the answer is not a bool"),
    "network 'yes'": ("allows_network", "yes", "the answer is not a bool"),
    "allowlist as a lone string": ("redaction_allowlist", "/record_id", "the answer is not an iterable of str"),
    "allowlist of ints": ("redaction_allowlist", [1], "an item is not a str"),
    "trust outside the three": ("trust_class", "root", "the answer is not one of asserted, earned, signed"),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_every_malformed_answer_is_policy_unavailable(case: str) -> None:
    """... and its note names the method and what is wrong, for the host's logs (never the envelope)."""
    method, answer, fault = MALFORMED[case]
    with pytest.raises(EngramError) as info:
        _ask(_guarded(**{method: answer}), method)
    assert (info.value.code, info.value.retriable) == (ErrorCode.POLICY_UNAVAILABLE, True)
    assert info.value.__notes__ == [f"policy.{method} answered a malformed value: {fault}"]


@pytest.mark.parametrize(
    ("method", "answer", "expected"),
    [
        ("allows_network", True, True),
        ("allows_network", False, False),
        ("redaction_allowlist", None, None),
        ("redaction_allowlist", ["/record_id", "/payload"], ("/record_id", "/payload")),
        ("policy_id", "host-policy", "host-policy"),
        ("policy_version", "7", "7"),
    ],
)
def test_well_formed_answers_pass_through(method: str, answer: object, expected: object) -> None:
    assert _ask(_guarded(**{method: answer}), method) == expected


@pytest.mark.parametrize("code", [ErrorCode.POLICY_STALE, ErrorCode.INVALID_SCHEMA])
def test_an_engram_error_raised_by_the_policy_keeps_its_code(code: ErrorCode) -> None:
    for method in ("decide", "capture_constraints", "allows_network", "trust_class"):
        with pytest.raises(EngramError) as info:
            _ask(_guarded(**{method: EngramError(code)}), method)
        assert info.value.code is code, method


def test_any_other_exception_raised_by_the_policy_is_policy_unavailable() -> None:
    with pytest.raises(EngramError) as info:
        _ask(_guarded(decide=LookupError("policy engine down")), "decide")
    assert (info.value.code, info.value.retriable) == (ErrorCode.POLICY_UNAVAILABLE, True)


# --------------------------------------------------------------------------- DefaultPolicy's own answers


def test_default_policy_confirmation_table() -> None:
    tools = (
        "engram_memory_capture",
        "engram_memory_request_admission",
        "engram_memory_withdraw",
        "engram_memory_forget",
    )
    table = {
        (capture, admission): [
            DefaultPolicy(confirm_capture=capture, confirm_admission=admission).requires_confirmation(tool, A)
            for tool in tools
        ]
        for capture in (False, True)
        for admission in (False, True)
    }
    assert table == {
        (False, False): [False, False, True, True],
        (False, True): [False, True, True, True],
        (True, False): [True, False, True, True],
        (True, True): [True, True, True, True],
    }
    assert DefaultPolicy().requires_confirmation("engram_memory_search", A) is False
    assert DefaultPolicy().requires_confirmation("engram_memory_get", A) is False


def test_default_policy_grants_only_what_both_it_and_the_binding_grant() -> None:
    narrow = make_binding("tenant-a", "workspace-1", tools=["engram_memory_search", "engram_memory_get"])
    assert DefaultPolicy().granted_tools(narrow) == {"engram_memory_search", "engram_memory_get"}
    policy = DefaultPolicy(tools=["engram_memory_get", "engram_memory_capture"])
    assert policy.granted_tools(narrow) == {"engram_memory_get"}
    assert policy.granted_tools(A) == {"engram_memory_get", "engram_memory_capture"}


@pytest.mark.parametrize("tools", ["engram_memory_search", b"engram_memory_search", [b"engram_memory_get"], [1]])
def test_a_single_string_or_a_non_string_name_is_not_a_tool_grant(tools: Any) -> None:
    """A bare string would grant its characters (nothing): the binding and the policy refuse it."""
    with pytest.raises(TypeError, match=r"tool names|single string"):
        make_binding("tenant-a", "workspace-1", tools=tools)
    with pytest.raises(TypeError, match=r"tool names|single string"):
        DefaultPolicy(tools=tools)


def test_an_unknown_tool_name_is_refused_where_it_is_granted() -> None:
    """A misspelt tool in a grant is a ``ValueError`` naming it, not a tool silently left out."""
    with pytest.raises(ValueError, match=r"unknown tool names: \['engram_memory_serch'\]"):
        make_binding("tenant-a", "workspace-1", tools=["engram_memory_get", "engram_memory_serch"])
    with pytest.raises(ValueError, match="engram_memory_serch"):
        DefaultPolicy(tools=["engram_memory_serch"])
    assert make_binding("tenant-a", "workspace-1", tools=[]).tools == frozenset()


def test_family_refs_refuse_a_single_string() -> None:
    with pytest.raises(TypeError, match="single string"):
        DefaultPolicy(family_refs="family:deploys")
    assert DefaultPolicy(family_refs=["family:deploys"]).family_refs == {"family:deploys"}


def test_default_policy_redaction_is_a_set_of_pointers() -> None:
    policy = DefaultPolicy(redaction=["/payload", "/evidence", "/payload"])
    assert policy.redaction_allowlist(A) == ("/evidence", "/payload")
    assert policy == DefaultPolicy(redaction=("/evidence", "/payload"))
    assert DefaultPolicy().redaction_allowlist(A) is None


def test_a_version_without_a_utf8_form_is_policy_unavailable_with_nothing_written() -> None:
    """Receipts digest the version: one with a lone surrogate refuses the capture, typed and via ``call_tool``."""
    version = b"2026.1-\xff".decode("utf-8", "surrogateescape")  # as read from a file with surrogateescape
    service = connect("memory:", policy=PolicyOverride(DefaultPolicy(), policy_version=version), clock=ManualClock())
    binding = make_binding()
    envelope = service.call_tool(CAPTURE, capture_args(make_key("surrogate-version")), binding)
    fail(envelope, ErrorCode.POLICY_UNAVAILABLE, retriable=True)
    with pytest.raises(EngramError) as refused:
        service.capture(binding, parse_args(CaptureArgs, capture_args(make_key("surrogate-version"))))
    assert refused.value.code is ErrorCode.POLICY_UNAVAILABLE
    assert service.store.scopes() == []
