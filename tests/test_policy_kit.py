"""``PolicyConformance``: the reference policy passes it, and the mistakes a host policy makes fail it.

Each wrong policy is run as an integrator would run the kit (``pytester``), and its failure must
name what is wrong, so that a host learns it before its users meet ``POLICY_UNAVAILABLE``.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import attrs
import pytest

from engram_memory import DefaultPolicy, connect
from engram_memory.ports import AdmissionDecision, AdmissionRequest, Policy
from engram_memory.testing import PolicyConformance, PolicyOverride, capture_args, make_binding, make_key
from engram_memory.testing.policy import admission_request


class TestDefaultPolicy(PolicyConformance):
    @pytest.fixture
    def policy(self) -> Policy:
        return DefaultPolicy()


class TestAnAcceptingPolicyWithRedaction(PolicyConformance):
    @pytest.fixture
    def policy(self) -> Policy:
        return DefaultPolicy(
            admission="accept",
            redaction=("/components", "/valid_time/t", "/trust/class", ""),
            confirm_capture=True,
            max_retention=timedelta(days=30),
            policy_version="7",
        )


_WRONG_POLICIES = """
from datetime import datetime, timedelta

import attrs
import pytest

from engram_memory import DefaultPolicy, EngramError, ErrorCode
from engram_memory.testing import PolicyConformance

BASE = DefaultPolicy(admission="accept")


class NaiveClock(DefaultPolicy):
    def decide(self, request, now):
        return attrs.evolve(super().decide(request, now), issued_at=datetime.now())


class OldVersion(DefaultPolicy):
    def decide(self, request, now):
        return attrs.evolve(super().decide(request, now), policy_version="0")


class Escaped(DefaultPolicy):  # a version read with errors="surrogateescape"
    def decide(self, request, now):
        return attrs.evolve(super().decide(request, now), policy_version=b"1-\\xff".decode("utf-8", "surrogateescape"))


class Yesterday(DefaultPolicy):
    def decide(self, request, now):
        return attrs.evolve(super().decide(request, now), issued_at=now - timedelta(days=1))


class Typo(DefaultPolicy):
    def redaction_allowlist(self, binding):
        return ("/components", "/text", "components/0")


class Busy(DefaultPolicy):
    def decide(self, request, now):
        raise EngramError(ErrorCode.RATE_LIMITED)


class Confused(DefaultPolicy):
    def requires_confirmation(self, tool, binding):
        return None if tool == "engram_memory_capture" else True


class ReadsContent(DefaultPolicy):  # correct: it decides on what the capture says and on who captured it

    def decide(self, request, now):
        decided = super().decide(request, now)
        if request.payload["primary_event"]["type_ref"] == "" or request.evidence["citation_ids"] == []:
            raise AssertionError("unreachable")
        if request.candidate_id.startswith("candidate_") and request.capturer is not None:
            return decided
        return attrs.evolve(decided, decision="adjudication_required")


class TestNaiveClock(PolicyConformance):
    @pytest.fixture
    def policy(self):
        return NaiveClock(admission="accept")


class TestOldVersion(PolicyConformance):
    @pytest.fixture
    def policy(self):
        return OldVersion(admission="accept")


class TestEscaped(PolicyConformance):
    @pytest.fixture
    def policy(self):
        return Escaped(admission="accept")


class TestYesterday(PolicyConformance):
    @pytest.fixture
    def policy(self):
        return Yesterday(admission="accept")


class TestTypo(PolicyConformance):
    @pytest.fixture
    def policy(self):
        return Typo()


class TestBusy(PolicyConformance):
    @pytest.fixture
    def policy(self):
        return Busy()


class TestConfused(PolicyConformance):
    @pytest.fixture
    def policy(self):
        return Confused()


class TestReadsContent(PolicyConformance):
    @pytest.fixture
    def policy(self):
        return ReadsContent(admission="accept")


class TestWithoutAPolicy(PolicyConformance):
    pass
"""


def test_each_wrong_policy_fails_naming_its_mistake(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_policies=_WRONG_POLICIES)
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", "-rfE")
    output = result.stdout.str()
    failed = {
        name: sum(line.startswith(f"FAILED test_policies.py::Test{name}::") for line in output.splitlines())
        for name in ("NaiveClock", "OldVersion", "Escaped", "Yesterday", "Typo", "Busy", "Confused", "ReadsContent")
    }
    expected = {"NaiveClock": 3, "OldVersion": 3, "Escaped": 3, "Yesterday": 3, "Typo": 1, "Confused": 1}
    expected |= {"Busy": 0, "ReadsContent": 0}  # a refusal with its own code; a policy reading the content
    assert failed == expected, output
    assert result.parseoutcomes().get("errors") == 10, output  # TestWithoutAPolicy: every test needs the fixture
    result.stdout.fnmatch_lines_random(
        [
            (
                "*Failed: the service would answer POLICY_UNAVAILABLE: policy.decide answered a malformed value: "
                "issued_at is not a datetime with a time zone"
            ),
            "*the decision names policy 'engram-memory:default-policy' version '0', not the policy's own*",
            "*policy.decide answered a malformed value: policy_version has a lone surrogate",
            "*issued_at * is not between 300 s before the call's now *",
            "*redaction_allowlist pointer '/text' names no record field*",
            "*policy.requires_confirmation answered a malformed value: the answer is not a bool",
            "*NotImplementedError: policy test classes must override the policy fixture",
        ]
    )


def test_the_kit_asks_decide_about_the_request_the_service_builds() -> None:
    """Payload, payload digest, evidence and candidate id as the service hands them to ``decide``."""
    seen: list[AdmissionRequest] = []

    def decide(request: AdmissionRequest, now: datetime) -> AdmissionDecision:
        seen.append(request)
        return DefaultPolicy(admission="accept").decide(request, now)

    service = connect("memory:", policy=PolicyOverride(DefaultPolicy(admission="accept"), decide=decide))
    binding = make_binding()
    arguments = capture_args(make_key("policy-kit-real"), attestation="signed")
    captured = service.call_tool("engram_memory_capture", arguments, binding)["output"]["value"]
    admission = {"candidate_id": captured["candidate_id"], "idempotency_key": make_key("policy-kit-real-admit")}
    assert service.call_tool("engram_memory_request_admission", admission, binding)["ok"] is True
    (real,) = seen
    built = admission_request(binding, arguments, capturer=real.capturer)
    assert attrs.evolve(built, record_digest=real.record_digest) == real
