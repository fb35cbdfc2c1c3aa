"""The conformance kit's failure messages: they name what differs, with both values, when a store is wrong."""

from __future__ import annotations

import pytest

from engram_memory.ports import EligibleDocument, IndexEntry, RecordState
from engram_memory.testing.store import _differences, _eligibility_mismatch, _postings_mismatch, _same_snapshot, _shown


def test_a_long_value_is_cut_at_the_limit_and_marked() -> None:
    assert _shown("x" * 10, limit=20) == repr("x" * 10)
    assert _shown("y" * 50, limit=20) == repr("y" * 50)[:20] + "..."


def test_differences_name_each_method_and_probed_id_with_both_values() -> None:
    expected = {"high_water": 2, "record": {"mem_a": "row a", "mem_b": "row b"}, "scopes": ["a"]}
    found = {"high_water": 3, "record": {"mem_a": "row a", "mem_b": "other", "mem_c": "new"}, "scopes": ["a"]}
    assert _differences(found, expected) == (
        "they differ at high_water: found 3, expected 2; "
        "record['mem_b']: found 'other', expected 'row b'; "
        "record['mem_c']: found 'new', expected None"
    )


def test_differences_report_a_method_only_one_side_has_and_a_changed_type() -> None:
    assert _differences({"extra": 1, "record": "row"}, {"record": {"mem_a": "row"}}) == (
        "they differ at record: found 'row', expected {'mem_a': 'row'}; extra: found 1, expected None"
    )


def test_the_snapshot_assertion_names_what_was_checked() -> None:
    _same_snapshot({"high_water": 1}, {"high_water": 1}, "unused")  # equal: no failure
    with pytest.raises(AssertionError) as failed:
        _same_snapshot({"high_water": 1}, {"high_water": 0}, "a rolled-back unit left its event")
    assert str(failed.value).startswith(
        "a rolled-back unit left its event: they differ at high_water: found 1, expected 0"
    )


def _entry(record_id: str, state: RecordState = "accepted_current") -> IndexEntry:
    return IndexEntry(
        record_id=record_id, state=state, trust_valid=True, valid_from=10, valid_to=None, expires_at_ms=None
    )


ENTRIES = {"1": _entry("mem_kept"), "2": _entry("mem_dropped"), "3": _entry("mem_gone", "tombstoned")}


def test_the_eligibility_message_names_records_kept_and_dropped_wrongly_with_their_rows() -> None:
    found = [EligibleDocument("1", "mem_kept", None), EligibleDocument("3", "mem_gone", None)]
    expected = [EligibleDocument("1", "mem_kept", None), EligibleDocument("2", "mem_dropped", None)]
    message = _eligibility_mismatch(found, expected, ENTRIES, valid_as_of=2_000, now_ms=5)
    assert message == (
        "eligible_documents(valid_as_of=2000, now_ms=5) disagrees with the read rule; "
        f"kept what the rule drops: mem_gone ({ENTRIES['3']!r}); "
        f"dropped what the rule keeps: mem_dropped ({ENTRIES['2']!r})"
    )


def test_the_eligibility_message_says_when_only_the_count_of_a_document_differs() -> None:
    once = EligibleDocument("1", "mem_kept", None)
    message = _eligibility_mismatch([once, once], [once], ENTRIES, valid_as_of=0, now_ms=0)
    assert message == (
        "eligible_documents(valid_as_of=0, now_ms=0) disagrees with the read rule; "
        f"the same records, but not the same documents once each: {[once, once]!r}"
    )


_MUTANT_BINDING = '''
from contextlib import contextmanager

import pytest

from engram_memory.stores.memory import InMemoryStore
from engram_memory.testing import StoreConformance


class _DropsOneView:
    """A view that answers as the reference one, but drops one eligible record."""

    def __init__(self, inner):
        self._inner = inner

    def __getattr__(self, name):
        return getattr(self._inner, name)

    def eligible_documents(self, documents, *, valid_as_of, now_ms):
        found = self._inner.eligible_documents(documents, valid_as_of=valid_as_of, now_ms=now_ms)
        return [item for item in found if item.record_id != "mem_expires"]


class _DropsOne(InMemoryStore):
    @contextmanager
    def read(self, scope):
        with super().read(scope) as view:
            yield _DropsOneView(view)


class TestDropsOne(StoreConformance):
    @pytest.fixture
    def store(self):
        return _DropsOne()
'''


def test_a_store_that_drops_an_eligible_record_is_told_which_and_when(pytester: pytest.Pytester) -> None:
    """Run as an integrator runs the kit: the failure names the record, its row and the instants."""
    pytester.makepyfile(test_mutant=_MUTANT_BINDING)
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", "-k", "eligible_documents_keep_exactly")
    result.assert_outcomes(failed=1)
    dropped = (
        "*eligible_documents(valid_as_of=*, now_ms=*) disagrees with the read rule; "
        "dropped what the rule keeps: mem_expires (IndexEntry(record_id='mem_expires'*"
    )
    result.stdout.fnmatch_lines([dropped])


_CASELESS_BINDING = '''
from contextlib import contextmanager

import pytest

from engram_memory.errors import StoreConflictError
from engram_memory.stores.memory import InMemoryStore
from engram_memory.testing import StoreConformance


class _CaselessUnit:
    """A unit that reads confirmation ids exactly but refuses one whose case-folded form was used."""

    def __init__(self, inner):
        self._inner = inner

    def __getattr__(self, name):
        return getattr(self._inner, name)

    def consume_confirmation(self, confirmation_id):
        if any(used.casefold() == confirmation_id.casefold() for used in self._inner._p.confirmations):
            raise StoreConflictError("confirmation already used")
        self._inner.consume_confirmation(confirmation_id)


class _Caseless(InMemoryStore):
    @contextmanager
    def write(self, scope):
        with super().write(scope) as unit:
            yield _CaselessUnit(unit)


class TestCaseless(StoreConformance):
    @pytest.fixture
    def store(self):
        return _Caseless()
'''


def test_a_store_that_compares_confirmation_ids_without_case_is_told_so(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_mutant=_CASELESS_BINDING)
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", "-k", "confirmation_ids_are_compared_exactly")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*consuming 'CONFIRMATION-EXACT-0001' conflicts: ids are compared inexactly*"])


_PARTIAL_BINDINGS = """
import pytest

from engram_memory.stores.memory import InMemoryStore
from engram_memory.testing import StoreConformance


class TestWithoutCapabilities(StoreConformance):
    @pytest.fixture
    def store(self):
        return InMemoryStore()


class TestWithoutAStore(StoreConformance):
    pass


class TestPersistingWithoutReopen(StoreConformance):
    @pytest.fixture
    def store(self):
        return InMemoryStore()

    @pytest.fixture
    def persists_across_reopen(self):
        return True
"""


def test_a_binding_runs_on_the_capability_defaults_and_names_a_missing_fixture(pytester: pytest.Pytester) -> None:
    """Capabilities left at their defaults still run the test (without their extra checks, and the
    reopening tests skip); a missing ``store`` errors, and a persisting binding without ``reopen``
    fails its reopening tests, each naming the fixture to override."""
    pytester.makepyfile(test_bindings=_PARTIAL_BINDINGS)
    result = pytester.runpytest_inprocess(
        "-p", "no:cacheprovider", "-v", "-k", "unindex_purges_every_trace or reopening"
    )
    result.assert_outcomes(passed=2, skipped=3, failed=3, errors=4)
    result.stdout.fnmatch_lines_random(
        [
            "*TestWithoutCapabilities::test_unindex_purges_every_trace PASSED*",
            "*NotImplementedError: backend test classes must override the store fixture",
            "*NotImplementedError: override reopen when persists_across_reopen is True",
        ]
    )


def test_the_postings_message_names_the_likeliest_cause() -> None:
    expected = [("mem_a", (1, 0, 0, 0, 0), (1, 0, 0, 0, 0))]
    empty = _postings_mismatch("orbit", [], expected)
    assert "it is empty, though 1 committed documents hold the term" in empty
    counts = _postings_mismatch("orbit", [("mem_a", (2, 0, 0, 0, 0), (2, 0, 0, 0, 0))], expected)
    assert "the right documents, but other frequencies or lengths" in counts
    mixed = _postings_mismatch("orbit", [("mem_b", (1, 0, 0, 0, 0), (1, 0, 0, 0, 0))], expected)
    assert "mixes distinct terms" in mixed
    assert mixed.endswith(f"found {[('mem_b', (1, 0, 0, 0, 0), (1, 0, 0, 0, 0))]!r}, expected {expected!r}")


def test_the_postings_message_names_order_and_duplicates() -> None:
    one, two = ("mem_a", (1, 0, 0, 0, 0), (1, 0, 0, 0, 0)), ("mem_b", (1, 0, 0, 0, 0), (1, 0, 0, 0, 0))
    assert "out of record-id order" in _postings_mismatch("orbit", [two, one], [one, two])
    assert "a document listed more than once" in _postings_mismatch("orbit", [one, one, two], [one, two])


_PERSISTED_BINDINGS = """
import pickle

import pytest

from engram_memory.stores.memory import InMemoryStore
from engram_memory.testing import StoreConformance
from engram_memory.testing.store import SCOPE_A


class TestEncryptedAtRest(StoreConformance):
    @pytest.fixture
    def store(self):
        return InMemoryStore()

    @pytest.fixture
    def persisted_bytes(self):
        return lambda store: bytes(range(256)) * 4  # ciphertext: nothing readable


class TestTermsInClear(StoreConformance):
    @pytest.fixture
    def store(self):
        return InMemoryStore()

    @pytest.fixture
    def persisted_bytes(self):
        def dump(store):
            # what a file-backed store keying its postings by the terms would write (as UTF-16 text)
            with store.read(SCOPE_A) as reader:
                keys = pickle.dumps(list(reader.indexed_ids()))
            return keys + "zqcleartermprimary zqclearreindexed".encode("utf-16-le")

        return dump
"""


def test_persisted_bytes_skips_an_encrypting_store_and_fails_terms_in_clear(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_persisted=_PERSISTED_BINDINGS)
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", "-rs", "-k", "written_in_clear")
    result.assert_outcomes(skipped=1, failed=1)
    result.stdout.fnmatch_lines_random(
        [
            "*persisted_bytes holds not even the document key in clear: the store encrypts or compresses*",
            # fnmatch: "[[]" is a literal "["
            "*index terms written in clear: [[]'zqclearreindexed (utf-16)', 'zqcleartermprimary (utf-16)']",
        ]
    )
