"""Parity (DESIGN §1 rule 5): the in-memory and SQLite backends answer a random trace identically.

One Hypothesis example is a trace of 300+ operations over three scopes and two principals:
captures (contents decided by a content-based policy, with open, closed and expiring valid
times), admissions (also across scopes), withdraws and forgets with confirmations (valid, reused
and stale ones), host adjudications, exact and conflicting replays, searches (first pages and
follow-up pages through each backend's own ``next_page_cursor``), gets, clock advances, policy
switches (content-based, ``DefaultPolicy`` accept / reject-with-a-new-version / adjudicate with
confirmed captures) and restarts of the SQLite service from its files.

Both services share one :class:`ManualClock`, every binding carries the same host audit id, and
the in-memory store is given the SQLite store's secret, so **no field is stripped**: every
envelope (``auditId`` included, page cursors and ``response_digest`` included) must be equal.
After the trace, each scope's ``MemoryAdmin.state_digest``, journal events (bytes), candidate and
record rows (sealed envelopes reduced to their presence: nonces and keys are random per vault),
index statistics, indexed ids and postings of every word of the content pool are equal, and both
journals verify.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Final, Literal

import attrs
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from engram_memory import DefaultPolicy, ManualClock, MemoryAdmin, MemoryService
from engram_memory.canonical import format_instant
from engram_memory.connect import connect
from engram_memory.context import HostBinding
from engram_memory.errors import EngramError, ProtocolError
from engram_memory.keyvaults.memory import InMemoryKeyVault
from engram_memory.ports import AdmissionDecision, AdmissionRequest, Policy, Store
from engram_memory.stores.memory import InMemoryStore
from engram_memory.stores.sqlite import SQLiteStore
from engram_memory.testing import PolicyOverride, capture_args, confirm, distinctive_words, make_binding, with_policy
from engram_memory.testing.fakes import ADMISSION, CAPTURE, FORGET, GET, PURPOSE, SEARCH, VALID_FROM_MS, WITHDRAW

SCOPES: Final = (("tenant-a", "workspace-1"), ("tenant-a", "workspace-2"), ("tenant-b", "workspace-1"))
PRINCIPALS: Final = ("principal-1", "principal-2")
KEY_LABELS: Final = 40
"""Idempotency keys per tool; one draw in eight uses a small pool shared by every tool (conflicts)."""
VERDICTS: Final = ("accept", "accept", "reject", "adjudicate", "accept", "accept")
"""Verdict of the content-based policy for each content of the pool (``primary_event.type_ref``)."""
CONTENT_WORDS: Final = tuple(distinctive_words(f"parity-content-{index}") for index in range(len(VERDICTS)))
SHARED_WORD: Final = CONTENT_WORDS[0][0]
"""Content 5 repeats one word of content 0, so that word ranks two contents."""
QUERIES: Final = (
    *("convention",) * 4,  # in every content: long result lists, pagination
    *("behaviour testing",) * 2,
    SHARED_WORD,
    *(words[1] for words in CONTENT_WORDS),
    "zqnothingmatchesthis",
)
ADVANCES: Final = (1, 5, 20, 60, 301, 600, 3_600, 7_300, 86_400)
MIN_STEPS: Final = 300
TRACE_SETTINGS: Final = settings(
    max_examples=12,
    deadline=None,
    # no shrink phase: a trace cannot get shorter than MIN_STEPS, and shrinking 300-step traces takes
    # minutes; a failure names the step and both envelopes, and Hypothesis prints the whole trace
    phases=(Phase.explicit, Phase.reuse, Phase.generate),
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example],
)


# --------------------------------------------------------------------------- policies


def _content_decide(request: AdmissionRequest, now: datetime) -> AdmissionDecision:
    verdict = str(request.payload["primary_event"]["type_ref"]).removeprefix("verdict:")
    decisions: dict[str, Literal["accept", "reject", "adjudication_required"]] = {
        "accept": "accept",
        "reject": "reject",
        "adjudicate": "adjudication_required",
    }
    return AdmissionDecision(
        decision=decisions.get(verdict, "accept"),
        record_digest=request.record_digest,
        issued_at=now,
        policy_id="engram-memory:default-policy",
        policy_version="1",
    )


POLICIES: Final[tuple[Policy, ...]] = (
    PolicyOverride(DefaultPolicy(), decide=_content_decide),
    DefaultPolicy(admission="accept"),
    DefaultPolicy(admission="reject", policy_version="2"),
    DefaultPolicy(admission="adjudicate", confirm_capture=True),
)
"""0 decides by content; 1 accepts (same id and version); 2 rejects under version 2 (older candidates
become POLICY_STALE); 3 leaves everything to the host and wants captures confirmed."""


# --------------------------------------------------------------------------- the trace


def _key(tool: str, label: int) -> str:
    if label % 8 == 0:
        return f"idempotency-key:parity-any-{label % 3}"
    return f"idempotency-key:parity-{tool}-{label % KEY_LABELS}"


KINDS: Final = (
    *("capture",) * 8,
    *("admit",) * 8,
    *("withdraw",) * 2,
    "forget",
    *("replay",) * 3,
    "conflict",
    *("search",) * 4,
    *("next_page",) * 3,
    *("get",) * 3,
    "adjudicate",
    *("advance",) * 2,
    "policy",
    "restart",
)

Op = tuple[str, int, int, int, int, int]
operations = st.tuples(
    st.sampled_from(KINDS),
    st.integers(0, 255),
    st.integers(0, 255),
    st.integers(0, 255),
    st.integers(0, 255),
    st.integers(0, 255),
)


@attrs.define
class _Bound:
    scope: int
    principal: str
    tool: str
    arguments: dict[str, Any]


Outcome = tuple[str, Any]
"""``("envelope", dict)``, ``("protocol", code)``, ``("result", json)`` or ``("error", code)``."""


class _Backends:
    """The same calls on an in-memory and a SQLite service, compared after each step."""

    def __init__(self, directory: Path) -> None:
        self.url = "sqlite:///" + str(directory / "parity.db")
        self.clock = ManualClock()
        self.policy_index = 0
        self.sqlite = connect(self.url, policy=POLICIES[0], clock=self.clock, synchronous="NORMAL")
        assert isinstance(self.sqlite.store, SQLiteStore)
        memory_store = InMemoryStore(secret=self.sqlite.store.secret())
        self.memory = MemoryService(store=memory_store, vault=InMemoryKeyVault(), policy=POLICIES[0], clock=self.clock)
        self.candidates: list[tuple[int, str]] = []
        self.records: list[tuple[int, str]] = []
        self.history: list[_Bound] = []
        self.confirmation_ids: list[str] = []
        self.page_cursors: dict[tuple[int, str, int, int], tuple[str, str]] = {}
        self.step = 0
        self.counts: dict[str, int] = {}

    def close(self) -> None:
        self.sqlite.close()
        self.memory.close()

    # ------------------------------------------------------------------ plumbing

    def binding(self, scope: int, principal: str) -> HostBinding:
        tenant, workspace = SCOPES[scope]
        return make_binding(tenant, workspace, principal, audit_id=f"audit-parity-{self.step}")

    def both(self, run: Callable[[MemoryService], Outcome]) -> Outcome:
        expected = run(self.memory)
        actual = run(self.sqlite)
        assert actual == expected, (self.step, expected, actual)
        return expected

    def call(self, tool: str, arguments: dict[str, Any], binding: HostBinding) -> Outcome:
        def run(service: MemoryService) -> Outcome:
            try:
                return ("envelope", service.call_tool(tool, arguments, binding))
            except ProtocolError as error:
                return ("protocol", int(error.code))

        outcome = self.both(run)
        label = tool.removeprefix("engram_memory_")
        if outcome[0] == "envelope":
            label += ":ok" if outcome[1]["ok"] else ":" + outcome[1]["error"]["code"]
        else:
            label += ":protocol"
        self.counts[label] = self.counts.get(label, 0) + 1
        return outcome

    def mutate(self, scope: int, principal: str, tool: str, arguments: dict[str, Any], confirmation: int) -> Outcome:
        """A mutation; ``confirmation``: 0-5 fresh, 6 reused id, 7 stale approval, 8 none."""
        binding = self.binding(scope, principal)
        needs = tool in {WITHDRAW, FORGET} or (tool == CAPTURE and self.policy_index == 3)
        kind = confirmation % 9
        if needs and kind != 8:
            confirmation_id = f"confirmation-parity-{self.step}"
            if kind == 6 and self.confirmation_ids:
                confirmation_id = self.confirmation_ids[confirmation % len(self.confirmation_ids)]
            approved = self.clock.now() - timedelta(seconds=45 if kind == 7 else 2)
            binding = confirm(
                self.memory, tool, arguments, binding, self.clock, confirmation_id=confirmation_id, approved_at=approved
            )
            self.confirmation_ids.append(confirmation_id)
        outcome = self.call(tool, arguments, binding)
        if outcome[0] == "envelope" and outcome[1]["ok"]:
            value = outcome[1]["output"]["value"]
            fresh = value.get("status") != "duplicate_exact" and value.get("replayed") is not True
            if fresh or tool == ADMISSION:
                self.history.append(_Bound(scope=scope, principal=principal, tool=tool, arguments=arguments))
            if tool == CAPTURE and value["status"] == "committed_pending":
                self.candidates.append((scope, value["candidate_id"]))
            if tool == ADMISSION and value["outcome"]["status"] == "accepted" and not value["replayed"]:
                self.records.append((scope, value["outcome"]["record_id"]))
        return outcome

    def capture_arguments(self, label: int, content: int) -> dict[str, Any]:
        words = CONTENT_WORDS[content]
        if content == 5:
            words = (SHARED_WORD, *words[1:])
        valid_time = {"t": VALID_FROM_MS, "t_end": VALID_FROM_MS + 60_000} if content == 1 else None
        retention = None
        if content == 4:
            expires = self.clock.now() + timedelta(hours=2)
            retention = {"derivative_rule": "make-ineligible", "expires_at": format_instant(expires)}
        return capture_args(
            _key("capture", label),
            words=words,
            type_ref=f"verdict:{VERDICTS[content]}",
            valid_time=valid_time,
            retention=retention,
        )

    @staticmethod
    def pick(items: list[tuple[int, str]], index: int, cross: int) -> tuple[int, str] | None:
        if not items:
            return None
        # half of the picks go to the eight newest targets, the rest anywhere
        position = -1 - (index // 2) % min(len(items), 8) if index % 2 else index // 2 % len(items)
        scope, target = items[position]
        if cross % 6 == 0:
            scope = (scope + 1) % len(SCOPES)
        return scope, target

    # ------------------------------------------------------------------ operations

    def apply(self, op: Op) -> None:  # noqa: C901, PLR0912, PLR0915 - one branch per operation kind
        kind, a, b, c, d, e = op
        principal = PRINCIPALS[b % len(PRINCIPALS)]
        if kind == "capture":
            self.mutate(a % len(SCOPES), principal, CAPTURE, self.capture_arguments(c, d % len(VERDICTS)), e)
        elif kind == "admit":
            target = self.pick(self.candidates, a, e)
            if target is not None:
                arguments = {"candidate_id": target[1], "idempotency_key": _key("admit", c)}
                self.mutate(target[0], principal, ADMISSION, arguments, d)
        elif kind == "withdraw":
            target = self.pick(self.candidates, a, e)
            if target is not None:
                arguments = {
                    "candidate_id": target[1],
                    "idempotency_key": _key(kind, c),
                    "reason_ref": "reason:obsolete",
                }
                self.mutate(target[0], principal, WITHDRAW, arguments, d)
        elif kind == "forget":
            target = self.pick(self.records, a, e)
            if target is not None:
                arguments = {
                    "record_id": target[1],
                    "idempotency_key": _key(kind, c),
                    "reason_ref": "reason:erasure-request" if d % 2 else "reason:mistaken",
                }
                self.mutate(target[0], principal, FORGET, arguments, d)
        elif kind == "replay" and self.history:
            bound = self.history[a % len(self.history)]
            self.mutate(bound.scope, bound.principal, bound.tool, bound.arguments, c)
        elif kind == "conflict" and self.history:
            bound = self.history[a % len(self.history)]
            arguments = self.capture_arguments(0, c % len(VERDICTS))
            arguments["idempotency_key"] = bound.arguments["idempotency_key"]
            self.mutate(bound.scope, bound.principal, CAPTURE, arguments, d)
        elif kind == "search":
            # mostly where records were admitted, so that pages are not all empty
            where = self.pick(self.records, e, 1)
            scope = where[0] if where is not None and a % 3 else a % len(SCOPES)
            self.search(scope, principal, c % len(QUERIES), 1 + d % 2, None)
        elif kind == "next_page" and self.page_cursors:
            keys = sorted(self.page_cursors)
            scope, who, query, limit = keys[a % len(keys)]
            self.search(scope, who, query, limit, self.page_cursors.pop((scope, who, query, limit)))
        elif kind == "get":
            target = self.pick(self.records, a, e)
            if target is not None:
                arguments = {"record_id": target[1], "purpose_ref": PURPOSE}
                self.call(GET, arguments, self.binding(target[0], principal))
        elif kind == "adjudicate":
            target = self.pick(self.candidates, a, e)
            if target is not None:
                self.adjudicate(target, "accept" if c % 3 else "reject")
        elif kind == "advance":
            self.clock.advance(timedelta(seconds=ADVANCES[a % len(ADVANCES)]))
            self.counts[kind] = self.counts.get(kind, 0) + 1
        elif kind == "policy":
            self.switch_policy(a % len(POLICIES))
            self.counts[kind] = self.counts.get(kind, 0) + 1
        elif kind == "restart":
            self.counts[kind] = self.counts.get(kind, 0) + 1
            self.sqlite.close()  # a clean close destroys the keys accepts left doomed:
            MemoryAdmin(self.memory).reap_keys()  # the in-memory side, which cannot restart, does the same
            self.sqlite = connect(self.url, policy=POLICIES[self.policy_index], clock=self.clock, synchronous="NORMAL")

    def search(self, scope: int, principal: str, query: int, limit: int, cursors: tuple[str, str] | None) -> None:
        """A first page (``cursors`` None) or the next page, each backend from its own cursor."""
        binding = self.binding(scope, principal)
        envelopes = []
        for index, service in enumerate(self.services):
            arguments: dict[str, Any] = {"query": QUERIES[query], "purpose_ref": PURPOSE, "limit": limit}
            if cursors is not None:
                arguments["page_cursor"] = cursors[index]
            envelopes.append(service.call_tool(SEARCH, arguments, binding))
        memory, sqlite = envelopes
        assert sqlite == memory, (self.step, memory, sqlite)
        label = "next_page" if cursors is not None else "search"
        label += (":hits" if memory["output"]["value"]["records"] else ":empty") if memory["ok"] else ":"
        label += "" if memory["ok"] else memory["error"]["code"]
        self.counts[label] = self.counts.get(label, 0) + 1
        if memory["ok"] and memory["output"]["value"].get("next_page_cursor") is not None:
            following = (memory["output"]["value"]["next_page_cursor"], sqlite["output"]["value"]["next_page_cursor"])
            self.page_cursors[(scope, principal, query, limit)] = following

    def adjudicate(self, target: tuple[int, str], decision: Literal["accept", "reject"]) -> None:
        tenant, workspace = SCOPES[target[0]]

        def run(service: MemoryService) -> Outcome:
            try:
                result = MemoryAdmin(service).adjudicate(
                    tenant_id=tenant, workspace_id=workspace, candidate_id=target[1], decision=decision
                )
            except EngramError as error:
                return ("error", error.code.value)
            return ("result", result.to_json())

        outcome = self.both(run)
        self.counts[f"adjudicate:{outcome[0]}"] = self.counts.get(f"adjudicate:{outcome[0]}", 0) + 1
        if outcome[0] == "result" and outcome[1]["outcome"]["status"] == "accepted":
            self.records.append((target[0], outcome[1]["outcome"]["record_id"]))

    def switch_policy(self, index: int) -> None:
        self.policy_index = index
        self.memory = with_policy(self.memory, POLICIES[index])
        self.sqlite = with_policy(self.sqlite, POLICIES[index])

    # ------------------------------------------------------------------ final state

    def check_final_state(self) -> None:
        words = sorted({word for content in CONTENT_WORDS for word in content} | {"convention", "behaviour"})
        for tenant, workspace in SCOPES:
            scope = make_binding(tenant, workspace).scope
            digests = [MemoryAdmin(s).state_digest(tenant_id=tenant, workspace_id=workspace) for s in self.services]
            assert digests[0] == digests[1], (tenant, workspace)
            reports = [MemoryAdmin(s).verify(tenant_id=tenant, workspace_id=workspace) for s in self.services]
            assert reports[0].ok, reports[0]
            assert reports[1].ok, reports[1]
            assert reports[0] == reports[1]
            snapshots = [_snapshot(s.store, scope, words) for s in self.services]
            assert snapshots[0] == snapshots[1], (tenant, workspace)
        assert self.memory.store.scopes() == self.sqlite.store.scopes()

    @property
    def services(self) -> tuple[MemoryService, MemoryService]:
        return self.memory, self.sqlite


def _snapshot(store: Store, scope: str, words: list[str]) -> dict[str, Any]:
    """What a reader observes in ``scope``; sealed envelopes are reduced to their presence."""
    with store.read(scope) as reader:
        return {
            "high_water": reader.high_water(),
            "last": reader.last_event_digest(),
            "events": [(e.cursor, e.event_digest, e.body) for e in reader.events()],
            "candidates": [attrs.evolve(row, sealed=None) for row in reader.candidates()],
            "candidates_sealed": [row.sealed is not None for row in reader.candidates()],
            "records": [attrs.evolve(row, sealed=None) for row in reader.records()],
            "records_sealed": [row.sealed is not None for row in reader.records()],
            "stats": reader.index_stats(),
            "indexed": list(reader.indexed_ids()),
            "postings": {word: list(reader.postings(word)) for word in words},
            "doomed": len(reader.doomed_keys()),  # key refs are random per vault
        }


_RUNS: list[tuple[int, float, dict[str, int]]] = []


@TRACE_SETTINGS
@given(trace=st.lists(operations, min_size=MIN_STEPS, max_size=MIN_STEPS + 40))
def test_in_memory_and_sqlite_answer_a_random_trace_identically(trace: list[Op]) -> None:
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="engram-parity-") as directory:
        backends = _Backends(Path(directory))
        try:
            for step, op in enumerate(trace):
                backends.step = step
                backends.apply(op)
            backends.check_final_state()
        finally:
            backends.close()
    _RUNS.append((len(trace), time.perf_counter() - started, backends.counts))
