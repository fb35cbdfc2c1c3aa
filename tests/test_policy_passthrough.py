"""An ``EngramError`` a host policy raises reaches the agent with its own code; anything else is
``POLICY_UNAVAILABLE``. End to end, through ``call_tool`` and the typed API, with nothing written.

(``tests/test_policy_guard.py`` pins the same rule on ``GuardedPolicy`` alone.)
"""

from __future__ import annotations

from datetime import datetime
from typing import Final

import pytest

from engram_memory import DefaultPolicy, ErrorCode
from engram_memory.context import ADMISSION, HostBinding
from engram_memory.errors import EngramError
from engram_memory.ports import AdmissionDecision, AdmissionRequest
from engram_memory.testing import PolicyOverride
from engram_memory.wire import RequestAdmissionArgs, parse_args
from tests.read_fixtures import DocSpec, ReadHarness, fail, idempotency_key, make_binding, ok

BASE: Final = DefaultPolicy(admission="accept")


def _raising(error: Exception) -> PolicyOverride:
    def decide(_request: AdmissionRequest, _now: datetime) -> AdmissionDecision:
        raise error

    return PolicyOverride(BASE, decide=decide)


@pytest.mark.parametrize(
    ("error", "code", "retriable"),
    [
        (EngramError(ErrorCode.RATE_LIMITED), ErrorCode.RATE_LIMITED, True),
        (EngramError(ErrorCode.AUTHORIZATION_EXPIRED), ErrorCode.AUTHORIZATION_EXPIRED, False),
        (LookupError("policy engine down"), ErrorCode.POLICY_UNAVAILABLE, True),
    ],
    ids=["RATE_LIMITED", "AUTHORIZATION_EXPIRED", "another exception"],
)
def test_a_decision_that_raises_answers_its_code_and_writes_nothing(
    error: Exception, code: ErrorCode, retriable: bool
) -> None:
    harness = ReadHarness(policy=BASE)
    binding = make_binding()
    candidate_id, record_id = harness.pending(binding, DocSpec(key="policy-raises-1", primary="orbit"))
    args = {"candidate_id": candidate_id, "idempotency_key": idempotency_key("policy-raises-1:admit")}
    state = harness.state(binding)

    harness.use(_raising(error))
    envelope_error = fail(harness.call(ADMISSION, args, binding), code)
    assert envelope_error["retriable"] is retriable
    with pytest.raises(EngramError) as info:
        harness.service.request_admission(binding, parse_args(RequestAdmissionArgs, args))
    assert info.value.code is code
    assert harness.state(binding) == state  # nothing written, the key not bound

    harness.use(BASE)  # the same key and arguments, once the policy answers
    value = ok(harness.call(ADMISSION, args, binding))
    assert (value["outcome"]["status"], value["outcome"]["record_id"]) == ("accepted", record_id)


def test_a_grant_that_raises_answers_its_code_for_every_tool() -> None:
    def granted_tools(_binding: HostBinding) -> frozenset[str]:
        raise EngramError(ErrorCode.RATE_LIMITED)

    harness = ReadHarness(policy=BASE)
    binding = make_binding()
    harness.use(PolicyOverride(BASE, granted_tools=granted_tools))
    error = fail(harness.search(binding, "orbit"), ErrorCode.RATE_LIMITED)
    assert error["retriable"] is True
    for ask in (harness.service.list_tools, harness.service.granted_tools):
        with pytest.raises(EngramError) as info:
            ask(binding)
        assert info.value.code is ErrorCode.RATE_LIMITED
