"""Whatever part of a host ranker fails during a search, the search is ``RANKING_UNAVAILABLE`` (retriable).

Its ``profile``, ``channels`` and ``uses_network``, ``config()``, ``tokenize()`` and ``rank()``, or an
answer of the wrong shape: through ``call_tool`` and the typed ``MemoryService.search`` alike, with
nothing written and the next search with a working ranker answering as before.
"""

from __future__ import annotations

from typing import Any, Final

import pytest

from engram_memory import ErrorCode
from engram_memory.errors import EngramError, StoreUnavailableError
from engram_memory.ports import RankedHit, RankingQuery, StoreReader
from engram_memory.ranking.lexical import LexicalRanker
from engram_memory.wire import SearchArgs, parse_args
from tests.read_fixtures import DocSpec, ReadHarness, fail, make_binding, ok, without_audit

BOTH_CHANNELS: Final = {"minimum_channels": "lexical_and_semantic"}


class _Broken(LexicalRanker):
    """The reference ranker, except that ``where`` raises ``answer`` (an exception) or answers it."""

    def __init__(self, where: str, answer: object) -> None:
        self.where = where
        self.answer = answer

    def _broken(self, name: str) -> bool:
        if self.where != name:
            return False
        if isinstance(self.answer, BaseException):
            raise self.answer
        return True

    @property
    def profile(self) -> str:
        return self.answer if self._broken("profile") else super().profile  # type: ignore[return-value]

    @property
    def channels(self) -> frozenset[str]:
        if self._broken("channels"):
            return self.answer  # type: ignore[return-value]
        return frozenset({"lexical", "semantic"})  # lets a lexical_and_semantic search run

    @property
    def uses_network(self) -> bool:
        return self.answer if self._broken("uses_network") else super().uses_network  # type: ignore[return-value]

    def config(self) -> dict[str, Any]:
        return self.answer if self._broken("config") else super().config()  # type: ignore[return-value]

    def tokenize(self, text: str) -> list[str]:
        return self.answer if self._broken("tokenize") else super().tokenize(text)  # type: ignore[return-value]

    def rank(self, reader: StoreReader, query: RankingQuery) -> list[RankedHit]:
        return self.answer if self._broken("rank") else super().rank(reader, query)  # type: ignore[return-value]


CASES: Final[dict[str, tuple[str, object]]] = {
    "profile raises": ("profile", RuntimeError("profile down")),
    "profile is not text": ("profile", 7),
    "channels raises": ("channels", RuntimeError("channels down")),
    "channels is not a collection": ("channels", None),
    "uses_network raises": ("uses_network", RuntimeError("network flag down")),
    "config raises": ("config", RuntimeError("config down")),
    "config raises a store error": ("config", StoreUnavailableError("remote ranker store down")),
    "config is not an object": ("config", ["k1", 1.2]),
    "config has no JSON form": ("config", {"k1": float("nan")}),
    "tokenize raises": ("tokenize", ConnectionError("tokenizer service down")),
    "tokenize answers None": ("tokenize", None),
    "rank raises": ("rank", ConnectionError("semantic channel down")),
    "rank answers None": ("rank", None),
}


def _harness() -> tuple[ReadHarness, str]:
    harness = ReadHarness()
    record_id = harness.admit(make_binding(), DocSpec(key="ranker-failures-1", primary="orbit"))
    return harness, record_id


def _search_args(options: dict[str, Any]) -> SearchArgs:
    return parse_args(SearchArgs, {"query": "orbit", "purpose_ref": make_binding().purpose_ref, **options})


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_failing_ranker_is_ranking_unavailable_through_call_tool(case: str) -> None:
    where, answer = CASES[case]
    options: dict[str, Any] = {"capability_policy": BOTH_CHANNELS} if where == "channels" else {}
    harness, record_id = _harness()
    binding = make_binding()
    healthy = _Broken("nowhere", None)
    harness.use_ranker(healthy)
    before = without_audit(harness.search(binding, "orbit", **options))
    assert [packet["record"]["record_id"] for packet in ok(before)["records"]] == [record_id]
    state = harness.state(binding)

    harness.use_ranker(_Broken(where, answer))
    error = fail(harness.search(binding, "orbit", **options), ErrorCode.RANKING_UNAVAILABLE)
    assert error == {"code": "RANKING_UNAVAILABLE", "message": error["message"], "retriable": True}

    assert harness.state(binding) == state  # nothing written
    harness.use_ranker(healthy)
    assert without_audit(harness.search(binding, "orbit", **options)) == before


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_failing_ranker_is_ranking_unavailable_through_the_typed_search(case: str) -> None:
    where, answer = CASES[case]
    options: dict[str, Any] = {"capability_policy": BOTH_CHANNELS} if where == "channels" else {}
    harness, record_id = _harness()
    binding = make_binding()
    state = harness.state(binding)

    harness.use_ranker(_Broken(where, answer))
    with pytest.raises(EngramError) as info:
        harness.service.search(binding, _search_args(options))
    assert (info.value.code, info.value.retriable) == (ErrorCode.RANKING_UNAVAILABLE, True)

    assert harness.state(binding) == state  # nothing written
    harness.use_ranker(_Broken("nowhere", None))
    result = harness.service.search(binding, _search_args(options))
    assert [packet.record["record_id"] for packet in result.records] == [record_id]


@pytest.mark.parametrize("where", ["profile", "config", "tokenize", "rank"])
def test_a_memory_error_the_ranker_raises_keeps_its_code(where: str) -> None:
    harness, _record_id = _harness()
    binding = make_binding()
    harness.use_ranker(_Broken(where, EngramError(ErrorCode.DEADLINE_EXCEEDED)))
    error = fail(harness.search(binding, "orbit"), ErrorCode.DEADLINE_EXCEEDED)
    assert error["retriable"] is True
    with pytest.raises(EngramError) as info:
        harness.service.search(binding, _search_args({}))
    assert info.value.code is ErrorCode.DEADLINE_EXCEEDED
