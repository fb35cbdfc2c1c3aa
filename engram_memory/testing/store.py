"""``StoreConformance``: the behaviour every :class:`~engram_memory.ports.Store` must show.

Bind it with one fixture::

    class TestMyStore(StoreConformance):
        @pytest.fixture
        def store(self) -> Iterator[MyStore]:
            s = MyStore(...)
            yield s
            s.close()

Optional behaviours are capability fixtures: override ``persists_across_reopen`` to return
``True`` and ``reopen`` to return a callable that opens a second store over the same data, and
``term_traces`` (:data:`TermTraces`) to let the kit check that nothing of an unindexed term stays,
and ``persisted_bytes`` (:data:`PersistedBytes`) to let it check that a store writing outside
process memory never writes an index term in clear.
Only port-level behaviour and port exceptions are asserted. Some tests run several threads on
one store; none asserts how long anything takes (one waits up to ``_CLOSE_WAIT`` for a ``close``
that waits for open views).
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections.abc import Callable, Iterable
from contextlib import ExitStack, suppress
from typing import Any

import attrs
import pytest

from engram_memory.context import scope_key
from engram_memory.errors import StoreConflictError, StoreOutcomeUnknownError, StoreUnavailableError
from engram_memory.journal import build_event
from engram_memory.ports import (
    FIELDS,
    CandidateRow,
    EligibleDocument,
    IdempotencyRow,
    IndexedDocument,
    IndexEntry,
    JournalEvent,
    Posting,
    RecordRow,
    SealedEnvelope,
    Store,
    StoreReader,
    UnitOfWork,
    occurrence_fields,
    occurrence_key,
)
from engram_memory.ranking.eligibility import eligible_entries
from engram_memory.ranking.tokenizer import tokenize

__all__ = ["PersistedBytes", "StoreConformance", "TermTraces"]

TermTraces = Callable[[Store, str, str], bool]
"""``(store, scope, term) -> bool``: whether the store still holds anything of ``term`` for ``scope``.

Anything at all: the term, a digest of it (keyed or not), an empty posting list left under it.
Read from the store's raw data, not through the port, and only once no unit is open.
"""

PersistedBytes = Callable[[Store], bytes]
"""``(store) -> bytes``: every byte the store has written outside process memory, as it lies there.

For a file-backed store: the content of each of its files (a write-ahead log included), joined;
for a database server, a dump of its tables. Read only once no unit is open.
"""

SCOPE_A = scope_key("tenant-a", "workspace-1")
SCOPE_B = scope_key("tenant-b", "workspace-1")
SCOPE_C = scope_key("tenant-a", "workspace-2")


class _AbortUnitError(Exception):
    """Raised inside a unit of work to force a rollback."""


class _AbortUnitInterruptError(BaseException):
    """A ``BaseException`` that is no ``Exception`` (as ``KeyboardInterrupt`` is), raised inside a unit."""


def _sealed(tag: str) -> SealedEnvelope:
    return SealedEnvelope(key_ref=f"key_{tag}", nonce=b"\x01" * 12, ciphertext=f"ciphertext-{tag}".encode())


def _digest(tag: str) -> str:
    return "sha256:" + (tag.encode().hex() * 64)[:64]


def _candidate(candidate_id: str, state: Any = "pending", cursor: int = 1) -> CandidateRow:
    return CandidateRow(
        candidate_id=candidate_id,
        state=state,
        created_cursor=cursor,
        record_digest=_digest(candidate_id),
        sealed=_sealed(candidate_id) if state == "pending" else None,
        policy_id="policy:test",
        policy_version="1",
    )


def _record(record_id: str, state: Any = "accepted_current", cursor: int = 1) -> RecordRow:
    return RecordRow(
        record_id=record_id,
        state=state,
        record_digest=_digest(record_id),
        payload_digest=_digest("payload-" + record_id),
        sealed=None if state == "tombstoned" else _sealed(record_id),
        recorded_cursor=cursor,
        accepted_cursor=cursor,
        valid_from=1_000,
        valid_to=None,
        expires_at_ms=None,
    )


def _document(
    record_id: str, terms: dict[str, tuple[int, ...]], valid_to: int | None = None, expires_at_ms: int | None = None
) -> IndexedDocument:
    lengths = tuple(sum(frequencies[position] for frequencies in terms.values()) for position in range(len(FIELDS)))
    return IndexedDocument(
        record_id=record_id,
        lengths=lengths,
        terms=terms,
        valid_from=1_000,
        valid_to=valid_to,
        expires_at_ms=expires_at_ms,
    )


def _same_list(listed: list[str], expected: list[str], what: str) -> None:
    """``listed == expected``, or a failure naming the first difference (not a diff of thousands of items)."""
    if listed == expected:
        return
    at = next(
        (i for i, (a, b) in enumerate(zip(listed, expected, strict=False)) if a != b), min(len(listed), len(expected))
    )
    found = listed[at] if at < len(listed) else "(the end)"
    wanted = expected[at] if at < len(expected) else "(the end)"
    pytest.fail(f"{what}: {len(listed)} items where {len(expected)} were expected; at {at}, {found!r} where {wanted!r}")


def _shown(value: Any, limit: int = 300) -> str:
    """``repr(value)``, cut at ``limit`` characters, for a failure message."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


def _other_spellings(key: str) -> list[str]:
    """Strings that are not ``key`` but that a lenient parser might read as the same key."""
    return [f" {key}", f"{key} ", f"0{key}", f"+{key}", f"{key}.0", f'"{key}"', f"{key}\x00", key.upper() + "x"]


def _resolved(reader: StoreReader, term: str) -> list[tuple[str, str, IndexEntry | None]]:
    """``term_postings(term)`` with each document key resolved: (record id, occurrence key, entry), by id.

    A document whose record has no row resolves to nothing: ``("", occurrence key, None)``.
    """
    keys, occurrences = reader.term_postings(term)
    assert len(keys) == len(occurrences), f"term_postings({term!r}) are not parallel sequences: {keys}, {occurrences}"
    assert len(set(keys)) == len(keys), f"term_postings({term!r}) names a document key twice: {_shown(keys)}"
    entries = reader.index_entries(keys)
    resolved = [
        (entry.record_id if entry is not None else "", occurrence, entry)
        for key, occurrence in zip(keys, occurrences, strict=True)
        for entry in (entries.get(key),)
    ]
    return sorted(resolved, key=lambda item: item[:2])


def _row_of(document: IndexedDocument, **changes: Any) -> RecordRow:
    """An ``accepted_current`` record row with the document's id and times, then ``changes``."""
    row = attrs.evolve(
        _record(document.record_id),
        valid_from=document.valid_from,
        valid_to=document.valid_to,
        expires_at_ms=document.expires_at_ms,
    )
    return attrs.evolve(row, **changes)


def _index_with_rows(unit: UnitOfWork, documents: Iterable[IndexedDocument]) -> None:
    """Put each document's record row (:func:`_row_of`), then index the document."""
    for document in documents:
        unit.put_record(_row_of(document))
        unit.index_document(document)


def _run_unit(store: Store, scope: str, body: Callable[[UnitOfWork], None]) -> None:
    with store.write(scope) as unit:
        body(unit)


def _append(unit: UnitOfWork, operation: str = "test") -> JournalEvent:
    event, _body = build_event(unit, recorded_at="2026-01-01T00:00:00.000Z", operation=operation)
    unit.append_event(event)
    return event


def _freq(
    primary: int = 0, decision: int = 0, evidence: int = 0, context: int = 0, citations: int = 0
) -> tuple[int, ...]:
    return (primary, decision, evidence, context, citations)


def _populate(unit: UnitOfWork, tag: str) -> None:
    """Write one of everything a unit of work can write."""
    _append(unit, "capture")
    unit.put_idempotency("principal-1", f"key-{tag}", IdempotencyRow(intent_digest=_digest(tag), response=b"{}"))
    unit.put_candidate(_candidate(f"candidate-{tag}"))
    unit.put_record(_record(f"mem_{tag}"))
    unit.add_tombstone(_digest("tomb-" + tag))
    unit.consume_confirmation(f"confirmation-{tag}")
    unit.index_document(
        _document(f"mem_{tag}", {f"word{tag}": _freq(primary=2, context=1), "shared": _freq(decision=1)})
    )
    unit.doom_key(f"key_doomed_{tag}")


def _populated(store: Store) -> dict[str, Any]:
    """Commit :func:`_populate` ``"a"`` in ``SCOPE_A``; return the scope's :func:`_snapshot` after it."""
    with store.write(SCOPE_A) as unit:
        _populate(unit, "a")
    with store.read(SCOPE_A) as reader:
        return _snapshot(reader)


_PROBE_TAGS = ("a", "b", "c", "x")


def _reads(reader: StoreReader, tags: Iterable[str] = _PROBE_TAGS) -> dict[str, Callable[[], Any]]:
    """Every reader method, called on the probed ids, keys and terms: what :func:`_snapshot` reports, unread."""
    tags = tuple(tags)
    terms = ["shared", "fresh", *(f"word{tag}" for tag in tags)]

    def eligible() -> list[str]:
        keys = [key for term in terms for key in reader.term_postings(term)[0]]
        return sorted(item.record_id for item in reader.eligible_documents(keys, valid_as_of=2_000, now_ms=0))

    return {
        "high_water": reader.high_water,
        "last_event_digest": reader.last_event_digest,
        "events": lambda: list(reader.events()),
        "idempotency": lambda: {tag: reader.idempotency("principal-1", f"key-{tag}") for tag in tags},
        "candidate": lambda: {tag: reader.candidate(f"candidate-{tag}") for tag in tags},
        "record": lambda: {tag: reader.record(f"mem_{tag}") for tag in tags},
        "candidates": lambda: list(reader.candidates()),
        "records": lambda: list(reader.records()),
        "tombstoned": lambda: {tag: reader.is_tombstoned_payload(_digest("tomb-" + tag)) for tag in tags},
        "confirmations": lambda: {tag: reader.confirmation_used(f"confirmation-{tag}") for tag in tags},
        "index_stats": reader.index_stats,
        "postings": lambda: {term: list(reader.postings(term)) for term in terms},
        "term_postings": lambda: {term: _resolved(reader, term) for term in terms},
        "eligible_documents": eligible,
        "indexed_ids": lambda: list(reader.indexed_ids()),
        "doomed_keys": reader.doomed_keys,
    }


def _snapshot(reader: StoreReader, tags: Iterable[str] = _PROBE_TAGS) -> dict[str, Any]:
    """Everything every reader method reports about the probed ids, keys and terms."""
    return {name: read() for name, read in _reads(reader, tags).items()}


def _differences(found: dict[str, Any], expected: dict[str, Any]) -> str:
    """Where two :func:`_snapshot` results differ: each differing reader method (and probed id), both values."""
    parts = []
    for name in [*expected, *(name for name in found if name not in expected)]:
        got, want = found.get(name), expected.get(name)
        if got == want:
            continue
        if isinstance(got, dict) and isinstance(want, dict):
            parts += [
                f"{name}[{key!r}]: found {_shown(got.get(key))}, expected {_shown(want.get(key))}"
                for key in [*want, *(key for key in got if key not in want)]
                if got.get(key) != want.get(key)
            ]
        else:
            parts.append(f"{name}: found {_shown(got)}, expected {_shown(want)}")
    return "they differ at " + "; ".join(parts)


def _same_snapshot(found: dict[str, Any], expected: dict[str, Any], what: str) -> None:
    """Assert that two :func:`_snapshot` results are equal; the message names ``what`` and the differences."""
    assert found == expected, f"{what}: {_differences(found, expected)}"


def _eligibility_mismatch(
    found: list[EligibleDocument],
    expected: list[EligibleDocument],
    entries: dict[str, IndexEntry],
    *,
    valid_as_of: int,
    now_ms: int,
) -> str:
    """What ``eligible_documents`` got wrong at these instants: records kept or dropped wrongly, with their rows."""
    kept = {item.record_id for item in found}
    wanted = {item.record_id for item in expected}
    rows = {entry.record_id: entry for entry in entries.values()}

    def described(record_ids: set[str]) -> str:
        return ", ".join(f"{record_id} ({_shown(rows.get(record_id))})" for record_id in sorted(record_ids))

    parts = [f"eligible_documents(valid_as_of={valid_as_of}, now_ms={now_ms}) disagrees with the read rule"]
    if kept - wanted:
        parts.append(f"kept what the rule drops: {described(kept - wanted)}")
    if wanted - kept:
        parts.append(f"dropped what the rule keeps: {described(wanted - kept)}")
    if kept == wanted:
        parts.append(f"the same records, but not the same documents once each: {_shown(sorted(found))}")
    return "; ".join(parts)


_LONG_JOURNAL = 2_500
"""Events of the long-journal test, appended in ``_LONG_UNITS`` units: far more than any page size."""
_LONG_UNITS = 5

_TERMS = (
    *("alphabet", "alphabets", "alphabetical"),
    *("café", "cafe", "caf", "naïve", "naive"),
    *("straße", "strasse", "ﬁle", "file", "ｆｉｌｅ"),
    *("東京タワー", "東京", "大阪城", "서울", "москва", "αλφάβητο", "سلام", "שלום", "٣٤٥", "_under_score"),
)
"""Indexed terms that differ only in a suffix, in non-ASCII characters, by case folding or compatibility
(NFKC) forms, or in script. Each is a token the service can hand over (``tokenize(term) == [term]``)."""
_UNINDEXED_TERMS = (
    *("alphabe", "alphabetic", "alphabetically", "cafè", "cafés", "café_", "straß", "fil", "ﬁ"),
    *("東京タ", "東", "서", "москв", "αλφα", "٣٤"),
)
"""Terms nobody indexed, each sharing a prefix, or its ASCII letters, with an indexed one."""


def _term_documents() -> list[IndexedDocument]:
    """One document per term of ``_TERMS``, and one holding them all, each term with frequencies of its own."""
    single = [_document(f"mem_term{index:02d}", {term: _freq(primary=index + 1)}) for index, term in enumerate(_TERMS)]
    together: dict[str, tuple[int, ...]] = {}
    for index, term in enumerate(_TERMS):
        frequencies = [0] * len(FIELDS)
        frequencies[index % len(FIELDS)] = index // len(FIELDS) + 1
        together[term] = tuple(frequencies)
    return [*single, _document("mem_terms", together)]


def _first_encoding_in(text: str, written: bytes) -> str | None:
    """``"utf-8"`` or ``"utf-16"`` (either byte order) if ``text`` is among ``written`` so encoded, else ``None``.

    (Text in one UTF-16 byte order can match the other one byte further on, so the order is not told.)
    """
    forms = (("utf-8", "utf-8"), ("utf-16", "utf-16-le"), ("utf-16", "utf-16-be"))
    return next((label for label, codec in forms if text.encode(codec) in written), None)


def _postings_mismatch(term: str, found: list[Any], expected: list[Any]) -> str:
    """Why ``postings(term)`` differs, with the likeliest cause for the way it differs."""
    found_ids, expected_ids = [posting[0] for posting in found], [posting[0] for posting in expected]
    if not found:
        cause = (
            f"it is empty, though {len(expected)} committed documents hold the term"
            " (were the indexed documents committed, and are they read back from where they were written?)"
        )
    elif found_ids == expected_ids:
        cause = "the right documents, but other frequencies or lengths"
    elif len(set(found_ids)) < len(found_ids):
        cause = "a document listed more than once"
    elif sorted(found_ids) == expected_ids:
        cause = "the right documents, out of record-id order"
    else:
        cause = (
            "other documents (a store that keys terms by a prefix, a case or compatibility form, or an"
            " encoding that drops characters mixes distinct terms)"
        )
    return (
        f"postings({term!r}) are not those of the documents holding {term!r}, with their frequencies: {cause};"
        f" found {_shown(found, 600)}, expected {_shown(expected, 600)}"
    )


def _check_index(reader: StoreReader, documents: Iterable[IndexedDocument], terms: Iterable[str]) -> None:
    """``postings`` and ``term_postings`` (resolved by ``index_entries``) of each term are those of ``documents``.

    ``documents`` are exactly the scope's indexed documents, each with its record row. Every document
    has one key, the same under every term, and no key names two documents.
    """
    documents = list(documents)
    names: dict[str, set[str]] = {}
    for term in terms:
        holding = sorted((d for d in documents if term in d.terms), key=lambda d: d.record_id)
        postings = [(p.record_id, p.frequencies, p.lengths) for p in reader.postings(term)]
        expected = [(d.record_id, d.terms[term], d.lengths) for d in holding]
        assert postings == expected, _postings_mismatch(term, postings, expected)
        resolved = [(record_id, occurrence) for record_id, occurrence, _ in _resolved(reader, term)]
        assert resolved == [(d.record_id, occurrence_key(d.terms[term], d.lengths)) for d in holding], (
            f"term_postings({term!r}), resolved by index_entries, is not the documents holding {term!r}:"
            f" found (record id, occurrence key) {_shown(resolved, 600)}"
        )
        for key in reader.term_postings(term)[0]:
            names.setdefault(key, set()).update(entry.record_id for entry in reader.index_entries([key]).values())
    shared = {key: sorted(ids) for key, ids in names.items() if len(ids) > 1}
    assert not shared, f"document keys that name several documents: {shared}"
    keys_of: dict[str, list[str]] = {}
    for key, ids in names.items():
        for record_id in ids:
            keys_of.setdefault(record_id, []).append(key)
    several = {record_id: keys for record_id, keys in keys_of.items() if len(keys) > 1}
    assert not several, f"documents with several keys in one view: {several}"


def _check_long_journal(reader: StoreReader, appended: list[JournalEvent]) -> None:
    """``events()`` and ``events(after=k)`` give the whole journal ``appended``, whatever its length."""
    total = len(appended)
    for after in (0, 1, total - 1, total, total + 5):
        cursors = [event.cursor for event in reader.events(after=after)]
        assert cursors == list(range(after + 1, total + 1)), (
            f"events(after={after}) of a journal of {total} events gave {len(cursors)} events"
            f" (cursors {cursors[:3]}...{cursors[-3:]}), not cursors {after + 1}..{total} in order"
        )
    assert list(reader.events()) == appended, "events() are not the appended events"
    assert reader.high_water() == total
    assert reader.last_event_digest() == appended[-1].event_digest


_CLOSE_WAIT = 1.0
"""Seconds the kit waits for ``close`` on another thread before using a view or unit that is open (a store's
``close`` may wait for them to end); a store whose ``close`` returns at once costs no wait."""


class _Closer:
    """``store.close()`` on a thread of its own, started at once; returns once it closed or ``_CLOSE_WAIT`` passed."""

    def __init__(self, store: Store) -> None:
        self.raised: list[BaseException] = []
        self._thread = threading.Thread(target=self._close, args=(store,), daemon=True)
        self._thread.start()
        self._thread.join(_CLOSE_WAIT)

    def _close(self, store: Store) -> None:
        try:
            store.close()
        except BaseException as exc:  # noqa: BLE001 - reported by finish
            self.raised.append(exc)

    def finish(self) -> None:
        """Wait for ``close`` (the view or unit has ended) and check it raised nothing."""
        self._thread.join(10 * _CLOSE_WAIT)
        assert not self._thread.is_alive(), "close did not return once the open view or unit had ended"
        assert self.raised == [], f"close raised {self.raised[0]!r}"


_THREADS = 4
"""Threads sharing one store in the concurrency tests."""
_UNITS = 20
"""Units of work each writing thread runs."""
_ABORT_EVERY = 5
"""Every fifth unit of a thread raises after its writes: it must leave nothing."""
_ATTEMPTS = 200
"""Attempts a writing thread makes at a unit refused with a retriable error before it reports it."""


def _pause() -> None:
    """Let other threads run here (``sleep(0)`` releases the GIL): widens any race in the store."""
    time.sleep(0)


def _tag_digest(tag: str) -> str:
    return "sha256:" + hashlib.sha256(tag.encode()).hexdigest()


def _write_tagged(unit: UnitOfWork, tag: str, cursor: int) -> None:
    """The writes of one tagged unit (after its event at ``cursor``): a candidate, a binding, an indexed record."""
    unit.put_candidate(_candidate(f"candidate-{tag}", cursor=cursor))
    _pause()
    unit.put_idempotency("principal-1", f"key-{tag}", IdempotencyRow(intent_digest=_tag_digest(tag), response=b"{}"))
    _pause()
    _index_with_rows(unit, [_document(f"mem_{tag}", {"shared": _freq(primary=1), f"word{tag}": _freq(context=2)})])


def _tagged_event(cursor: int, tag: str) -> JournalEvent:
    return JournalEvent(cursor=cursor, event_digest=_tag_digest(tag), body=f'{{"tag":"{tag}"}}'.encode())


class _Writers:
    """Threads that each run ``_UNITS`` tagged units on one scope, and what became of every unit.

    A unit appends the scope's next event (its ``event_digest`` names the unit's tag) and writes
    :func:`_write_tagged`; every ``_ABORT_EVERY``-th unit then raises, so it must leave nothing.
    A *reading* thread takes the cursor inside the unit (``high_water() + 1``, as the service
    does); a *guessing* thread takes it from a read view opened just before the unit and writes
    its rows before appending, so a writer that won meanwhile makes ``append_event`` conflict
    and the whole unit roll back. Both retry a unit refused with ``StoreConflictError`` or
    ``StoreUnavailableError``, as the service does; a unit is *acknowledged* once its ``with``
    block exited without an exception.
    """

    def __init__(self, store: Store, scope: str, threads: int, *, guessing: bool) -> None:
        self.store, self.scope = store, scope
        self.acknowledged: list[str] = []
        self.aborted: list[str] = []
        self.unknown: list[str] = []
        self.failures: list[str] = []
        self.retries = 0
        self._lock = threading.Lock()
        self._start = threading.Event()
        self.done = threading.Event()
        self._threads = [
            threading.Thread(target=self._run, args=(n, guessing and n % 2 == 1), daemon=True) for n in range(threads)
        ]

    def start(self) -> None:
        for thread in self._threads:
            thread.start()
        self._start.set()

    def join(self) -> None:
        for thread in self._threads:
            thread.join()
        self.done.set()

    def _note(self, outcome: list[str], item: str) -> None:
        with self._lock:
            outcome.append(item)

    def _run(self, n: int, guess: bool) -> None:
        self._start.wait()
        for index in range(_UNITS):
            tag = f"t{n}u{index:02d}"
            abort = index % _ABORT_EVERY == _ABORT_EVERY - 1
            try:
                self._commit(tag, guess=guess, abort=abort)
            except BaseException as exc:  # noqa: BLE001 - every failure is reported by the test
                self._note(self.failures, f"{tag}: {exc!r}")
                return

    def _commit(self, tag: str, *, guess: bool, abort: bool) -> None:
        for _ in range(_ATTEMPTS):
            try:
                self._attempt(tag, guess=guess, abort=abort)
            except _AbortUnitError:
                self._note(self.aborted, tag)
                return
            except StoreOutcomeUnknownError:
                self._note(self.unknown, tag)
                return
            except (StoreConflictError, StoreUnavailableError):
                with self._lock:
                    self.retries += 1
                _pause()
                continue
            self._note(self.acknowledged, tag)
            return
        self._note(self.failures, f"{tag}: still refused after {_ATTEMPTS} attempts")

    def _attempt(self, tag: str, *, guess: bool, abort: bool) -> None:
        if guess:
            with self.store.read(self.scope) as reader:
                cursor = reader.high_water() + 1
            _pause()
            with self.store.write(self.scope) as unit:
                _write_tagged(unit, tag, cursor)
                _pause()
                unit.append_event(_tagged_event(cursor, tag))
                if abort:
                    raise _AbortUnitError
            return
        with self.store.write(self.scope) as unit:
            cursor = unit.high_water() + 1
            _pause()
            unit.append_event(_tagged_event(cursor, tag))
            _pause()
            _write_tagged(unit, tag, cursor)
            if abort:
                raise _AbortUnitError


def _tag_of(event: JournalEvent) -> str:
    return str(json.loads(event.body)["tag"])


def _check_view(reader: StoreReader) -> list[JournalEvent]:
    """Check that everything one view reports agrees with its journal; return the journal.

    Reads are spaced by pauses, so a store whose view is not one snapshot shows a unit that
    committed (or rolled back) between two of them.
    """
    high = reader.high_water()
    _pause()
    last = reader.last_event_digest()
    _pause()
    events = list(reader.events())
    _pause()
    candidates = [row.candidate_id for row in reader.candidates()]
    _pause()
    indexed = list(reader.indexed_ids())
    _pause()
    stats = reader.index_stats()
    _pause()
    cursors = [event.cursor for event in events]
    assert cursors == list(range(1, high + 1)), f"a view's journal is not dense up to high_water {high}: {cursors}"
    assert last == (events[-1].event_digest if events else None), "last_event_digest is not the last event's"
    tags = [_tag_of(event) for event in events]
    assert all(event.event_digest == _tag_digest(tag) for event, tag in zip(events, tags, strict=True))
    assert candidates == sorted(f"candidate-{tag}" for tag in tags), (
        f"a view's candidates are not those of its journal: {candidates} for units {tags}"
    )
    assert indexed == sorted(f"mem_{tag}" for tag in tags), (
        f"a view's indexed ids are not those of its journal: {indexed} for units {tags}"
    )
    assert stats.documents == high, f"a view counts {stats.documents} indexed documents for {high} units"
    again = reader.high_water()
    assert again == high, f"high_water moved from {high} to {again} within one view"
    return events


class StoreConformance:
    """The Store suite. Subclass it and override the ``store`` fixture."""

    long_list: int = 2_500
    """Doomed keys of the long-list test (2,500 ``doom_key`` and 1,250 ``clear_doomed_key`` calls in 6 units)."""
    many_scopes: int = 1_100
    """Scopes of the many-scopes test, one unit each: more than a page of a thousand. A networked
    backend may lower either, but not below one page of its own listing."""

    @pytest.fixture
    def store(self) -> Store:
        """The store under test (fresh and empty for every test)."""
        raise NotImplementedError("backend test classes must override the store fixture")

    @pytest.fixture
    def persists_across_reopen(self) -> bool:
        """Capability: a second store opened over the same data sees committed writes."""
        return False

    @pytest.fixture
    def reopen(self) -> Callable[[], Store]:
        """Opens another store over the same data as ``store`` (only used when it persists)."""
        raise NotImplementedError("override reopen when persists_across_reopen is True")

    @pytest.fixture
    def term_traces(self) -> TermTraces | None:
        """Capability (:data:`TermTraces`): enables the checks that ``unindex`` leaves nothing of a term behind.

        ``None`` (the default) skips them. A store keeping terms only as keys of its postings is
        covered by the postings checks; one keeping digests or empty lists under a term should bind it.
        """
        return None

    @pytest.fixture
    def persisted_bytes(self) -> PersistedBytes | None:
        """Capability (:data:`PersistedBytes`): enables the check that no index term is written in clear.

        ``None`` (the default) skips it; bind it for any store that writes its index outside
        process memory (a file, a database server).
        """
        return None

    def test_no_index_term_is_written_in_clear(self, store: Store, persisted_bytes: PersistedBytes | None) -> None:
        """A store that writes its index outside process memory keys it by a keyed digest of each term.

        The words of admitted records reach the store in clear only as index terms; written as
        they are (UTF-8 or UTF-16), they would sit on disk (or on a server) for anyone who can
        read the files. Skipped when the binding gives no ``persisted_bytes`` (a store that keeps
        its index in process memory may key it by the terms themselves), and, once no term is
        found, when not even the document key (an id stores hold in clear) is among the bytes:
        the store encrypts or compresses what it writes, or the binding reads the wrong place.
        """
        if persisted_bytes is None:
            pytest.skip("no persisted_bytes: nothing checks that the index terms are not written in clear")
        terms = {
            "zqcleartermprimary": _freq(primary=1),
            "zqcleartermcitation": _freq(citations=2),
            "zqclear\u00e9accented": _freq(decision=1),
            "zq\u043a\u043b\u0438\u0440": _freq(context=1),
        }
        with store.write(SCOPE_A) as unit:
            unit.index_document(_document("mem_persistedcontrol", terms))
        with store.write(SCOPE_A) as unit:
            unit.index_document(_document("mem_persistedcontrol", {**terms, "zqclearreindexed": _freq(evidence=1)}))
        written = persisted_bytes(store)
        in_clear = sorted(
            f"{term} ({encoding})"
            for term in [*terms, "zqclearreindexed"]
            if (encoding := _first_encoding_in(term, written)) is not None
        )
        assert not in_clear, f"index terms written in clear: {in_clear}"
        if _first_encoding_in("mem_persistedcontrol", written) is None:  # encrypted or compressed, or a wrong binding
            pytest.skip(
                "persisted_bytes holds not even the document key in clear: the store encrypts or compresses"
                " what it writes (nothing here can be read in clear), or the capability reads the wrong place"
            )

    def test_an_unindexed_term_leaves_no_trace_in_the_store(self, store: Store, term_traces: TermTraces | None) -> None:
        """``term_traces`` finds an indexed term, and nothing of it once its only document is unindexed.

        Skipped, so that a report shows it, when the binding gives no ``term_traces``: the kit then
        checks the postings through the port only, and a store that keeps an index outside the
        port's view (a table of term digests, an empty posting list left under a term) could keep
        a forgotten term on disk and still pass.
        """
        if term_traces is None:
            pytest.skip("no term_traces: nothing checks that an unindexed term leaves no trace in the store")
        with store.write(SCOPE_A) as unit:
            unit.index_document(_document("mem_traced", {"traced": _freq(primary=1)}))
        assert term_traces(store, SCOPE_A, "traced"), "term_traces finds nothing of a term that is indexed"
        with store.write(SCOPE_A) as unit:
            unit.unindex("mem_traced")
        assert not term_traces(store, SCOPE_A, "traced"), "a term whose only document was unindexed left a trace"

    # ------------------------------------------------------------------ empty store

    def test_an_empty_scope_reads_as_empty(self, store: Store) -> None:
        """A scope nobody wrote to has no events, rows, index entries or doomed keys."""
        with store.read(SCOPE_A) as reader:
            snap = _snapshot(reader)
        empty = {
            "high_water": 0,
            "last_event_digest": None,
            "events": [],
            "idempotency": dict.fromkeys(_PROBE_TAGS),
            "candidate": dict.fromkeys(_PROBE_TAGS),
            "record": dict.fromkeys(_PROBE_TAGS),
            "candidates": [],
            "records": [],
            "tombstoned": dict.fromkeys(_PROBE_TAGS, False),
            "confirmations": dict.fromkeys(_PROBE_TAGS, False),
            "index_stats": snap["index_stats"],
            "postings": {term: [] for term in snap["postings"]},
            "term_postings": {term: [] for term in snap["term_postings"]},
            "eligible_documents": [],
            "indexed_ids": [],
            "doomed_keys": [],
        }
        _same_snapshot(snap, empty, "a scope nobody wrote to does not read as empty")
        stats = snap["index_stats"]
        assert (stats.documents, tuple(stats.total_lengths)) == (0, (0,) * len(FIELDS)), f"index_stats: {stats}"
        assert store.scopes() == [], "scopes() of an empty store"

    def test_secret_is_32_stable_bytes(self, store: Store) -> None:
        """The per-store MAC secret is 32 bytes and the same on every call."""
        assert len(store.secret()) == 32, "secret() is 32 bytes"
        assert store.secret() == store.secret(), "secret() is the same on every call"

    def test_close_is_idempotent(
        self, store: Store, persists_across_reopen: bool, request: pytest.FixtureRequest
    ) -> None:
        """Closing twice raises nothing and, on a backend that persists, loses nothing committed before."""
        before = _populated(store)
        store.close()
        store.close()
        if not persists_across_reopen:
            return  # the port asks nothing else of a volatile store's close
        again = request.getfixturevalue("reopen")()
        try:
            with again.read(SCOPE_A) as reader:
                _same_snapshot(_snapshot(reader), before, "a reopened store reads what the closed one committed")
        finally:
            again.close()

    def test_after_close_a_method_works_as_before_or_is_unavailable(self, store: Store) -> None:
        """After ``close``, each store method raises StoreUnavailableError or works as before.

        ``read``, ``write``, ``scopes`` and ``secret`` never raise another exception (a driver's
        "closed" error is translated at the edge), and a write that a closed store still
        acknowledges is then read back like any other.
        """
        before = _populated(store)
        secret = store.secret()
        store.close()
        with ExitStack() as stack:
            try:
                reader = stack.enter_context(store.read(SCOPE_A))
            except StoreUnavailableError:
                pass
            else:
                _same_snapshot(_snapshot(reader), before, "a closed store that still reads reads what it held")
        with suppress(StoreUnavailableError):
            assert store.scopes() == [SCOPE_A]
        with suppress(StoreUnavailableError):
            assert store.secret() == secret
        try:
            with store.write(SCOPE_A) as unit:
                _populate(unit, "b")
        except StoreUnavailableError:
            return
        with ExitStack() as stack:
            try:
                reader = stack.enter_context(store.read(SCOPE_A))
            except StoreUnavailableError:
                return
            assert _snapshot(reader)["candidate"]["b"] == _candidate("candidate-b"), "an acknowledged write is lost"

    def test_a_view_open_when_another_thread_closes_the_store_works_or_is_unavailable(self, store: Store) -> None:
        """A view open while another thread closes the store: each method answers as before or is unavailable.

        ``close`` runs on another thread while this one has a view open (the kit waits up to
        ``_CLOSE_WAIT`` seconds for it, as a store may make ``close`` wait for open views). Each
        reader method of the view then answers what it did before the close or raises
        StoreUnavailableError (never a driver's error), and ``close`` returns once the view ended.
        """
        before = _populated(store)
        with store.read(SCOPE_A) as reader:
            closer = _Closer(store)
            for name, read in _reads(reader).items():
                try:
                    found = read()
                except StoreUnavailableError:
                    continue
                except Exception as exc:  # noqa: BLE001 - reported as the failure
                    pytest.fail(
                        f"{name} of a view open when the store closed raised {exc!r}: only StoreUnavailableError"
                    )
                assert found == before[name], f"{name} of a view open when the store closed: {_shown(found)}"
        closer.finish()

    def test_a_unit_open_when_another_thread_closes_the_store_commits_whole_or_is_unavailable(
        self, store: Store, persists_across_reopen: bool, request: pytest.FixtureRequest
    ) -> None:
        """A unit open while another thread closes the store commits whole, or raises StoreUnavailableError.

        ``close`` runs on another thread while this one has a unit open (waited for as for a view);
        the unit then writes one of everything and its block ends. Its writes and its end raise
        StoreUnavailableError (or StoreOutcomeUnknownError) or nothing, never another exception.
        With ``persists_across_reopen`` a reopened store holds all of the unit's writes if its block
        ended without an exception and none if it raised StoreUnavailableError.
        """
        before = _populated(store)
        outcome, closer = "acknowledged", None
        try:
            with store.write(SCOPE_A) as unit:
                closer = _Closer(store)
                _populate(unit, "b")
        except StoreUnavailableError:
            outcome = "refused"
        except StoreOutcomeUnknownError:
            outcome = "unknown"
        except Exception as exc:  # noqa: BLE001 - reported as the failure
            pytest.fail(f"a unit open when the store closed raised {exc!r}, not StoreUnavailableError")
        assert closer is not None, "a unit of an open store was refused"
        closer.finish()
        if not persists_across_reopen:
            return
        again: Store = request.getfixturevalue("reopen")()
        try:
            with again.read(SCOPE_A) as reader:
                found = _snapshot(reader)
            if found["high_water"] == 1 and outcome != "acknowledged":
                _same_snapshot(found, before, "a unit refused when the store closed left some of its writes")
                return
            assert outcome != "refused", "a unit that raised StoreUnavailableError when the store closed committed"
            with again.write(SCOPE_C) as unit:  # the same two units, made in another scope
                _populate(unit, "a")
            with again.write(SCOPE_C) as unit:
                _populate(unit, "b")
            with again.read(SCOPE_C) as reader:
                _same_snapshot(found, _snapshot(reader), "a unit acknowledged when the store closed is not all there")
        finally:
            again.close()

    # ------------------------------------------------------------------ journal

    def test_events_come_back_in_cursor_order(self, store: Store) -> None:
        """Events appended over several units come back dense from 1, in cursor order."""
        appended = []
        for _ in range(3):
            with store.write(SCOPE_A) as unit:
                appended.append(_append(unit))
        with store.read(SCOPE_A) as reader:
            assert [e.cursor for e in reader.events()] == [1, 2, 3], "events() in cursor order, from 1"
            assert list(reader.events()) == appended, "events() are the appended events, unchanged"
            assert list(reader.events(after=1)) == appended[1:], "events(after=1) are those with cursor > 1"
            assert list(reader.events(after=3)) == [], "events(after=high_water) is empty"
            assert reader.high_water() == 3, "high_water() is the last cursor"
            assert reader.last_event_digest() == appended[-1].event_digest, "last_event_digest() is the last event's"

    def test_a_long_journal_comes_back_whole(
        self, store: Store, persists_across_reopen: bool, request: pytest.FixtureRequest
    ) -> None:
        """2,500 events appended in five units come back whole, from any cursor.

        ``events()`` is cursors 1..N in order, and ``events(after=k)`` is k+1..N for k in 0, 1,
        N-1, N and N+5: a store that reads the journal in pages follows every page. With
        ``persists_across_reopen`` the same holds after reopening.
        """
        appended: list[JournalEvent] = []
        for _ in range(_LONG_UNITS):
            with store.write(SCOPE_A) as unit:
                for _ in range(_LONG_JOURNAL // _LONG_UNITS):
                    appended.append(_tagged_event(len(appended) + 1, f"long{len(appended) + 1}"))
                    unit.append_event(appended[-1])
                assert unit.high_water() == len(appended)
        with store.read(SCOPE_A) as reader:
            _check_long_journal(reader, appended)
        if not persists_across_reopen:
            return
        store.close()
        again: Store = request.getfixturevalue("reopen")()
        try:
            with again.read(SCOPE_A) as reader:
                _check_long_journal(reader, appended)
        finally:
            again.close()

    def test_several_events_in_one_unit(self, store: Store) -> None:
        """A unit may append several consecutive events; its reads see them before commit."""
        with store.write(SCOPE_A) as unit:
            _append(unit)
            second = _append(unit)
            assert unit.high_water() == 2, "a unit reads its own appended events"
            assert unit.last_event_digest() == second.event_digest, "a unit reads its own last event digest"
        with store.read(SCOPE_A) as reader:
            assert reader.high_water() == 2

    def test_appending_a_cursor_that_is_not_next_conflicts(self, store: Store) -> None:
        """An event whose cursor is not ``high_water() + 1`` raises StoreConflictError."""
        with store.write(SCOPE_A) as unit:
            first = _append(unit)
        skipping = JournalEvent(cursor=3, event_digest=_digest("skip"), body=b"{}")
        with pytest.raises(StoreConflictError), store.write(SCOPE_A) as unit:
            unit.append_event(skipping)
        with pytest.raises(StoreConflictError), store.write(SCOPE_A) as unit:
            unit.append_event(first)
        with store.read(SCOPE_A) as reader:
            assert list(reader.events()) == [first]

    def test_each_scope_starts_its_journal_at_one(self, store: Store) -> None:
        """Cursors are per scope: the first event of every scope is cursor 1."""
        for scope in (SCOPE_A, SCOPE_A, SCOPE_B, SCOPE_C):
            with store.write(scope) as unit:
                _append(unit)
        with store.read(SCOPE_B) as reader:
            assert [e.cursor for e in reader.events()] == [1]
        with store.read(SCOPE_A) as reader:
            assert [e.cursor for e in reader.events()] == [1, 2]

    def test_scopes_lists_scopes_with_events_sorted(self, store: Store) -> None:
        """``scopes()`` is sorted and lists only scopes that have at least one event."""
        for scope in (SCOPE_C, SCOPE_A):
            with store.write(scope) as unit:
                _append(unit)
        with store.write(SCOPE_B) as unit:
            unit.doom_key("key_without_event")
        assert store.scopes() == sorted([SCOPE_A, SCOPE_C])

    # ------------------------------------------------------------------ atomicity

    def test_a_unit_commits_when_the_block_ends(self, store: Store) -> None:
        """Every write of a unit is visible to later readers once the block exits normally."""
        with store.write(SCOPE_A) as unit:
            _populate(unit, "a")
            inside = _snapshot(unit)
        with store.read(SCOPE_A) as reader:
            _same_snapshot(_snapshot(reader), inside, "after its commit a unit's writes read as inside it")
        written = {
            "high_water": 1,
            "candidate": _candidate("candidate-a"),
            "record": _record("mem_a"),
            "tombstoned": True,
            "confirmations": True,
            "indexed_ids": ["mem_a"],
            "doomed_keys": ["key_doomed_a"],
        }
        read = {name: inside[name]["a"] if isinstance(inside[name], dict) else inside[name] for name in written}
        assert read == written, f"a unit does not read its own writes: {_differences(read, written)}"

    def test_an_exception_rolls_back_every_write(self, store: Store, term_traces: TermTraces | None) -> None:
        """An exception inside the unit undoes events, rows, index, idempotency and the rest.

        With the ``term_traces`` capability, nothing remains of the terms the unit indexed.
        """
        before = _populated(store)

        def doomed(unit: UnitOfWork) -> None:
            _populate(unit, "b")
            _append(unit)
            unit.put_candidate(_candidate("candidate-a", state="withdrawn"))
            unit.put_record(_record("mem_a", state="tombstoned"))
            unit.unindex("mem_a")
            unit.index_document(_document("mem_x", {"fresh": _freq(primary=1)}))
            unit.clear_doomed_key("key_doomed_a")
            assert _snapshot(unit) != before
            raise _AbortUnitError

        with pytest.raises(_AbortUnitError):
            _run_unit(store, SCOPE_A, doomed)
        with store.read(SCOPE_A) as reader:
            _same_snapshot(_snapshot(reader), before, "an exception inside a unit left some of its writes")
        if term_traces is not None:
            left = [term for term in ("wordb", "fresh") if term_traces(store, SCOPE_A, term)]
            assert not left, f"terms indexed by a unit that rolled back left traces: {left}"

    def test_an_interrupt_rolls_back_every_write(self, store: Store) -> None:
        """A ``BaseException`` that is not an ``Exception`` (Ctrl-C, ``SystemExit``) rolls the unit back too."""
        before = _populated(store)

        def interrupted(unit: UnitOfWork) -> None:
            _populate(unit, "b")
            _append(unit)
            unit.put_idempotency(
                "principal-9", "key-interrupted", IdempotencyRow(intent_digest=_digest("i"), response=b"")
            )
            raise _AbortUnitInterruptError

        with pytest.raises(_AbortUnitInterruptError):
            _run_unit(store, SCOPE_A, interrupted)
        with store.read(SCOPE_A) as reader:
            _same_snapshot(_snapshot(reader), before, "an interrupt inside a unit left some of its writes")
            assert reader.idempotency("principal-9", "key-interrupted") is None, "an interrupted unit's key binding"

    def test_a_conflict_rolls_back_the_whole_unit(self, store: Store) -> None:
        """A StoreConflictError raised by the port leaves none of the unit's earlier writes."""
        before = _populated(store)

        def conflicting(unit: UnitOfWork) -> None:
            _append(unit)
            unit.put_candidate(_candidate("candidate-b"))
            unit.index_document(_document("mem_b", {"wordb": _freq(primary=1)}))
            unit.put_idempotency("principal-1", "key-a", IdempotencyRow(intent_digest=_digest("z"), response=b"[]"))

        with pytest.raises(StoreConflictError):
            _run_unit(store, SCOPE_A, conflicting)
        with store.read(SCOPE_A) as reader:
            _same_snapshot(_snapshot(reader), before, "a StoreConflictError left some of the unit's earlier writes")

    def test_a_rolled_back_first_unit_leaves_no_scope(self, store: Store) -> None:
        """A scope whose only unit rolled back is not listed and still reads as empty."""
        with store.read(SCOPE_A) as reader:
            empty = _snapshot(reader)

        def doomed(unit: UnitOfWork) -> None:
            _populate(unit, "a")
            raise _AbortUnitError

        with pytest.raises(_AbortUnitError):
            _run_unit(store, SCOPE_A, doomed)
        assert store.scopes() == []
        with store.read(SCOPE_A) as reader:
            _same_snapshot(_snapshot(reader), empty, "a scope whose only unit rolled back reads as empty")

    def test_a_unit_opened_inside_an_open_unit_of_the_thread_never_commits(self, store: Store) -> None:
        """A unit opened while the same thread has one open raises StoreUnavailableError and leaves nothing.

        Inside an open unit the thread opens a unit of the same scope, then one of another scope,
        each writing one of everything and changing the outer unit's rows: both must raise
        StoreUnavailableError, from the ``with`` statement (at once, or after the store's timeout),
        from one of the unit's methods or when the block ends, as :meth:`Store.write` allows. The
        outer unit catches the errors, writes on and commits: its scope then reads exactly as the
        same writes made without nesting (in a third scope), the other scope reads as empty, and
        the thread opens units again once the outer one has ended.
        """
        with store.read(SCOPE_B) as reader:
            empty = _snapshot(reader)

        def before_nesting(unit: UnitOfWork) -> None:
            _populate(unit, "a")

        def after_nesting(unit: UnitOfWork) -> None:
            _append(unit, "after")
            unit.put_candidate(_candidate("candidate-c", cursor=2))

        def nested(unit: UnitOfWork) -> None:
            _populate(unit, "b")
            unit.put_candidate(_candidate("candidate-a", state="withdrawn"))
            unit.unindex("mem_a")
            unit.clear_doomed_key("key_doomed_a")

        refused: list[str] = []
        with store.write(SCOPE_A) as outer:
            before_nesting(outer)
            for scope in (SCOPE_A, SCOPE_B):
                try:
                    _run_unit(store, scope, nested)
                except StoreUnavailableError:
                    refused.append(scope)
            after_nesting(outer)
        assert refused == [SCOPE_A, SCOPE_B], "a unit opened inside an open unit must raise StoreUnavailableError"
        try:
            with store.write(SCOPE_C) as control:  # the outer unit's own writes, nothing nested
                before_nesting(control)
                after_nesting(control)
        except StoreConflictError as exc:
            pytest.fail(
                f"a unit of scope C conflicts with what the outer unit wrote in scope A ({exc!r}): a reader or"
                f" unit method is not scope-isolated (test_every_reader_method_is_scope_isolated checks that alone)"
            )
        with store.read(SCOPE_A) as reader:
            committed = _snapshot(reader)
        with store.read(SCOPE_C) as reader:
            _same_snapshot(
                committed,
                _snapshot(reader),
                "scope A, where units were nested, does not read as scope C, where the outer unit's writes were made"
                " alone: either the outer unit lost writes or kept a nested unit's, or a reader method mixes scopes"
                " (test_every_reader_method_is_scope_isolated checks that alone; here 'found' is A, 'expected' is C)",
            )
        with store.read(SCOPE_B) as reader:
            _same_snapshot(
                _snapshot(reader),
                empty,
                "scope B shows data after its nested unit was refused: either the nested unit left writes, or a"
                " reader method of scope B sees another scope's data (test_every_reader_method_is_scope_isolated"
                " checks that alone)",
            )
        assert store.scopes() == sorted([SCOPE_A, SCOPE_C])
        with store.write(SCOPE_B) as unit:
            _append(unit)
        assert store.scopes() == sorted([SCOPE_A, SCOPE_B, SCOPE_C])

    # ------------------------------------------------------------------ idempotency and confirmations

    def test_an_idempotency_binding_is_never_overwritten(self, store: Store) -> None:
        """Binding a bound (principal, key) again conflicts and keeps the first row."""
        first = IdempotencyRow(intent_digest=_digest("first"), response=b'{"n":1}')
        with store.write(SCOPE_A) as unit:
            _append(unit)
            unit.put_idempotency("principal-1", "key-a", first)
        second = IdempotencyRow(intent_digest=_digest("second"), response=b'{"n":2}')
        with pytest.raises(StoreConflictError), store.write(SCOPE_A) as unit:
            unit.put_idempotency("principal-1", "key-a", second)
        with store.read(SCOPE_A) as reader:
            assert reader.idempotency("principal-1", "key-a") == first, "a refused binding replaced the first one"

    def test_an_idempotency_binding_conflicts_within_one_unit(self, store: Store) -> None:
        """A second binding of the same pair inside one unit conflicts too."""
        row = IdempotencyRow(intent_digest=_digest("one"), response=b"{}")

        def twice(unit: UnitOfWork) -> None:
            unit.put_idempotency("principal-1", "key-a", row)
            unit.put_idempotency("principal-1", "key-a", row)

        with pytest.raises(StoreConflictError):
            _run_unit(store, SCOPE_A, twice)
        with store.read(SCOPE_A) as reader:
            assert reader.idempotency("principal-1", "key-a") is None, "a unit that conflicted left its binding"

    def test_only_a_provisional_binding_is_settled_and_only_by_its_intent(self, store: Store) -> None:
        """An empty response binds provisionally: the same intent may replace it, nothing else may."""
        held = IdempotencyRow(intent_digest=_digest("held"), response=b"")
        settled = IdempotencyRow(intent_digest=_digest("held"), response=b'{"n":1}')
        assert held.provisional
        assert not settled.provisional
        with store.write(SCOPE_A) as unit:
            unit.put_idempotency("principal-1", "key-a", held)
        with store.write(SCOPE_A) as unit:
            unit.put_idempotency("principal-1", "key-a", held)  # held again by a retry
        other = IdempotencyRow(intent_digest=_digest("other"), response=b'{"n":2}')
        for refused in (other, attrs.evolve(other, response=b"")):
            with pytest.raises(StoreConflictError), store.write(SCOPE_A) as unit:
                unit.put_idempotency("principal-1", "key-a", refused)
        with store.read(SCOPE_A) as reader:
            assert reader.idempotency("principal-1", "key-a") == held

        def settle_then_fail(unit: UnitOfWork) -> None:
            unit.put_idempotency("principal-1", "key-a", settled)
            raise _AbortUnitError

        with pytest.raises(_AbortUnitError):
            _run_unit(store, SCOPE_A, settle_then_fail)
        with store.read(SCOPE_A) as reader:
            assert reader.idempotency("principal-1", "key-a") == held  # the rollback restores the hold
        with store.write(SCOPE_A) as unit:
            unit.put_idempotency("principal-1", "key-a", settled)
        for refused in (held, attrs.evolve(settled, response=b'{"n":3}')):
            with pytest.raises(StoreConflictError), store.write(SCOPE_A) as unit:
                unit.put_idempotency("principal-1", "key-a", refused)
        with store.read(SCOPE_A) as reader:
            assert reader.idempotency("principal-1", "key-a") == settled

    def test_idempotency_keys_are_scoped_per_principal_and_scope(self, store: Store) -> None:
        """The same key binds independently for another principal and in another scope."""
        rows = {
            (SCOPE_A, "principal-1"): IdempotencyRow(intent_digest=_digest("a1"), response=b"1"),
            (SCOPE_A, "principal-2"): IdempotencyRow(intent_digest=_digest("a2"), response=b"2"),
            (SCOPE_B, "principal-1"): IdempotencyRow(intent_digest=_digest("b1"), response=b"3"),
        }
        for (scope, principal), row in rows.items():
            with store.write(scope) as unit:
                unit.put_idempotency(principal, "key-shared", row)
        for (scope, principal), row in rows.items():
            with store.read(scope) as reader:
                assert reader.idempotency(principal, "key-shared") == row, f"the binding of {principal} in {scope}"
        with store.read(SCOPE_B) as reader:
            assert reader.idempotency("principal-2", "key-shared") is None, "a binding of another scope shows"

    def test_a_confirmation_is_consumed_once(self, store: Store) -> None:
        """Consuming a used confirmation id conflicts; the id stays used."""
        with store.write(SCOPE_A) as unit:
            unit.consume_confirmation("confirmation-1")
        with pytest.raises(StoreConflictError), store.write(SCOPE_A) as unit:
            unit.consume_confirmation("confirmation-1")
        with store.read(SCOPE_A) as reader:
            assert reader.confirmation_used("confirmation-1"), "a consumed confirmation reads as unused"
        with store.read(SCOPE_B) as reader:
            assert not reader.confirmation_used("confirmation-1"), "a confirmation of another scope reads as used"

    def test_idempotency_keys_and_principals_are_compared_exactly(self, store: Store) -> None:
        """A binding is found only by its exact (principal, key): case, padding and concatenation are other pairs.

        Keys ``k``, ``k.upper()``, ``k.lower()`` and ``k + " "`` bind independently (idempotency keys are
        free strings: a case-insensitive or PAD SPACE collation merges them), so do principals in
        another case, padded or in their NFKC form (one principal would replay another's
        response), and (``p``, ``"x:" + k``)
        and (``p + ":x"``, ``k``), which a store keying bindings by ``principal + ":" + key`` merges.
        """
        key, principal = "Key-Exact-0001", "principal-\ufb01"  # U+FB01: NFC, but NFKC reads "fi"
        pairs = [
            *((principal, spelling) for spelling in (key, key.upper(), key.lower(), key + " ")),
            *((spelling, key) for spelling in (principal.upper(), principal + " ", "principal-fi")),
            (principal, "x:" + key),
            (principal + ":x", key),
        ]
        rows = {
            pair: IdempotencyRow(intent_digest=_digest(f"pair{index}"), response=f'{{"n":{index}}}'.encode())
            for index, pair in enumerate(pairs)
        }
        for bound, pair in enumerate(pairs):
            with store.read(SCOPE_A) as reader:
                found = reader.idempotency(*pair)
            assert found is None, f"{pair!r} reads as bound once {pairs[:bound]!r} are: {found!r}"
            try:
                with store.write(SCOPE_A) as unit:
                    unit.put_idempotency(*pair, rows[pair])
            except StoreConflictError:
                pytest.fail(f"binding {pair!r} conflicts with one of {pairs[:bound]!r}: keys are compared inexactly")
        with store.read(SCOPE_A) as reader:
            found_rows = {pair: reader.idempotency(*pair) for pair in pairs}
        assert found_rows == rows, "each (principal, key) reads back its own row"

    def test_confirmation_ids_are_compared_exactly(self, store: Store) -> None:
        """A confirmation id is used only as spelled: its case and padded forms are other, unused ids."""
        used = "Confirmation-Exact-0001"
        others = [used.upper(), used.lower(), used + " ", " " + used]
        with store.write(SCOPE_A) as unit:
            unit.consume_confirmation(used)
        with store.read(SCOPE_A) as reader:
            wrongly_used = [other for other in others if reader.confirmation_used(other)]
        assert not wrongly_used, f"ids read as used once only {used!r} was: {wrongly_used!r}"
        for other in others:
            try:
                with store.write(SCOPE_A) as unit:
                    unit.consume_confirmation(other)
            except StoreConflictError:
                pytest.fail(f"consuming {other!r} conflicts: ids are compared inexactly")
        with store.read(SCOPE_A) as reader:
            assert all(reader.confirmation_used(each) for each in (used, *others))

    def test_row_ids_are_compared_exactly(self, store: Store) -> None:
        """``candidate`` and ``record`` find a row only by its exact id: another case or padding is unknown."""
        with store.write(SCOPE_A) as unit:
            unit.put_candidate(_candidate("candidate-a"))
            unit.put_record(_record("mem_a"))
        with store.read(SCOPE_A) as reader:
            found = {
                spelling: (reader.candidate(f"candidate-{spelling}"), reader.record(f"mem_{spelling}"))
                for spelling in ("A", "a ", " a")
            }
        assert all(rows == (None, None) for rows in found.values()), f"rows found under other ids: {found}"

    # ------------------------------------------------------------------ rows

    def test_rows_are_replaced_and_listed_by_id(self, store: Store) -> None:
        """``put_*`` inserts or replaces; ``candidates()``/``records()`` are ordered by id."""
        with store.write(SCOPE_A) as unit:
            for tag in ("c", "a", "b"):
                unit.put_candidate(_candidate(f"candidate-{tag}"))
                unit.put_record(_record(f"mem_{tag}"))
        with store.write(SCOPE_A) as unit:
            unit.put_candidate(_candidate("candidate-b", state="withdrawn"))
            unit.put_record(_record("mem_b", state="tombstoned"))
        with store.read(SCOPE_A) as reader:
            ids = [c.candidate_id for c in reader.candidates()]
            assert ids == ["candidate-a", "candidate-b", "candidate-c"], "candidates() once each, ordered by id"
            assert [r.record_id for r in reader.records()] == ["mem_a", "mem_b", "mem_c"], "records(): each, by id"
            assert reader.candidate("candidate-b") == _candidate("candidate-b", state="withdrawn"), "not replaced"
            assert reader.record("mem_b") == _record("mem_b", state="tombstoned"), "put_record did not replace"

    def test_a_candidate_row_round_trips_every_field(self, store: Store) -> None:
        """Optional fields (record id, outcome bytes) and the sealed envelope come back equal."""
        admitted = CandidateRow(
            candidate_id="candidate-a",
            state="admitted",
            created_cursor=7,
            record_digest=_digest("r"),
            sealed=None,
            policy_id="policy:test",
            policy_version="2",
            record_id="mem_a",
            outcome=b'{"status":"accepted"}',
        )
        with store.write(SCOPE_A) as unit:
            unit.put_candidate(admitted)
            unit.put_candidate(_candidate("candidate-b"))
        with store.read(SCOPE_A) as reader:
            assert reader.candidate("candidate-a") == admitted, "a candidate row does not round-trip"
            pending = reader.candidate("candidate-b")
        assert pending is not None
        assert pending.sealed == _sealed("candidate-b")

    def test_large_values_round_trip_whole(self, store: Store) -> None:
        """Values of a mebibyte and more (a capture may carry 1 MiB of arguments) come back byte for byte.

        A store that cuts long values acknowledges a capture whose body it cannot give back.
        """
        big = bytes(range(256)) * 4_500  # 1,152,000 bytes
        sealed = SealedEnvelope(key_ref="key_large", nonce=b"\x02" * 12, ciphertext=big)
        candidate = attrs.evolve(_candidate("candidate-large"), sealed=sealed)
        admitted = attrs.evolve(_candidate("candidate-large-2", state="admitted"), outcome=big[::-1])
        record = attrs.evolve(_record("mem_large"), sealed=sealed)
        response = IdempotencyRow(intent_digest=_digest("large"), response=b'{"v":"' + big.hex().encode() + b'"}')
        with store.write(SCOPE_A) as unit:
            unit.put_candidate(candidate)
            unit.put_candidate(admitted)
            unit.put_record(record)
            unit.put_idempotency("principal-1", "key-large", response)
        with store.read(SCOPE_A) as reader:
            found = (
                reader.candidate("candidate-large"),
                reader.candidate("candidate-large-2"),
                reader.record("mem_large"),
                reader.idempotency("principal-1", "key-large"),
            )
        assert found == (candidate, admitted, record, response), "a large value came back cut or changed"

    def test_tombstoned_payloads_are_remembered(self, store: Store) -> None:
        """``add_tombstone`` makes ``is_tombstoned_payload`` true for that digest only."""
        with store.write(SCOPE_A) as unit:
            unit.add_tombstone(_digest("gone"))
            unit.add_tombstone(_digest("gone"))
        with store.read(SCOPE_A) as reader:
            assert reader.is_tombstoned_payload(_digest("gone"))
            assert not reader.is_tombstoned_payload(_digest("kept"))

    def test_doomed_keys_are_listed_sorted_until_cleared(self, store: Store) -> None:
        """Doomed keys are listed sorted and disappear once cleared (clearing twice is harmless)."""
        with store.write(SCOPE_A) as unit:
            unit.doom_key("key_b")
            unit.doom_key("key_ab")
            unit.doom_key("key_a")
        with store.read(SCOPE_A) as reader:
            assert reader.doomed_keys() == ["key_a", "key_ab", "key_b"], "doomed_keys(): each key once, sorted"
        for _ in range(2):
            with store.write(SCOPE_A) as unit:
                unit.clear_doomed_key("key_a")
        with store.read(SCOPE_A) as reader:
            assert reader.doomed_keys() == ["key_ab", "key_b"], "clear_doomed_key clears that key only (not by prefix)"

    def test_a_long_list_of_doomed_keys_comes_back_whole(self, store: Store) -> None:
        """``long_list`` doomed keys (2,500: a vault outage's backlog) are all listed, sorted, and cleared exactly.

        A store that lists them in pages must follow every page: the write path destroys exactly
        what ``doomed_keys()`` returns, so a key left out would never be destroyed.
        """
        refs = [f"key_backlog_{index:05d}" for index in range(self.long_list)]
        per_unit = max(1, len(refs) // _LONG_UNITS)
        for start in range(0, len(refs), per_unit):
            with store.write(SCOPE_A) as unit:
                for ref in refs[start : start + per_unit]:
                    unit.doom_key(ref)
        with store.read(SCOPE_A) as reader:
            _same_list(reader.doomed_keys(), sorted(refs), "doomed_keys() of a long list")
        with store.write(SCOPE_A) as unit:
            for ref in refs[::2]:
                unit.clear_doomed_key(ref)
        with store.read(SCOPE_A) as reader:
            _same_list(reader.doomed_keys(), sorted(refs[1::2]), "doomed_keys() once half of a long list is cleared")

    def test_clearing_a_doomed_key_clears_it_in_its_own_scope_only(self, store: Store) -> None:
        """Doomed keys are per scope: the same ref doomed in two scopes is cleared in one only."""
        for scope in (SCOPE_A, SCOPE_B):
            with store.write(scope) as unit:
                unit.doom_key("key_in_two_scopes")
        for scope in (SCOPE_A, SCOPE_B):
            with store.read(scope) as reader:
                assert reader.doomed_keys() == ["key_in_two_scopes"], "a ref doomed in two scopes is listed in each"
        with store.write(SCOPE_A) as unit:
            unit.clear_doomed_key("key_in_two_scopes")
        with store.read(SCOPE_B) as reader:
            assert reader.doomed_keys() == ["key_in_two_scopes"], "clear_doomed_key cleared another scope's key"

    def test_many_scopes_are_all_listed(self, store: Store) -> None:
        """``many_scopes`` scopes (1,100), an event each, are listed once each, sorted, across every page.

        The key reaper and the operator commands visit every scope through ``scopes()``.
        """
        scopes = [scope_key(f"tenant-{index:05d}", "workspace-1") for index in range(self.many_scopes)]
        for scope in scopes:
            with store.write(scope) as unit:
                _append(unit)
        _same_list(store.scopes(), sorted(scopes), "scopes() of many scopes")

    # ------------------------------------------------------------------ isolation

    def test_every_reader_method_is_scope_isolated(self, store: Store) -> None:
        """What scope A holds is invisible through every reader method of scopes B and C."""
        with store.read(SCOPE_B) as reader:
            empty = _snapshot(reader)
        with store.write(SCOPE_A) as unit:
            for tag in ("a", "b"):
                _populate(unit, tag)
        with store.read(SCOPE_A) as reader:
            full = _snapshot(reader)
        assert full != empty
        for other in (SCOPE_B, SCOPE_C):
            with store.read(other) as reader:
                _same_snapshot(_snapshot(reader), empty, "scope A's data shows through a reader of another scope")
        with store.write(SCOPE_B) as unit:
            _populate(unit, "a")
        with store.read(SCOPE_A) as reader:
            _same_snapshot(_snapshot(reader), full, "writing scope B changed what scope A reads")
        with store.read(SCOPE_C) as reader:
            _same_snapshot(_snapshot(reader), empty, "scope A's or B's data shows through a reader method of scope C")

    # ------------------------------------------------------------------ index

    def test_postings_and_stats_agree_with_indexed_documents(self, store: Store) -> None:
        """Postings list exactly the documents holding a term, by id; stats sum the lengths."""
        documents = [
            _document("mem_b", {"alpha": _freq(primary=2), "beta": _freq(context=1)}, valid_to=9_000),
            _document("mem_a", {"alpha": _freq(decision=1, citations=3)}),
            _document("mem_c", {"gamma": _freq(evidence=4)}),
        ]
        with store.write(SCOPE_A) as unit:
            for document in documents:
                unit.index_document(document)
        with store.read(SCOPE_A) as reader:
            stats = reader.index_stats()
            assert stats.documents == 3, f"index_stats().documents of 3 indexed documents: {stats}"
            assert tuple(stats.total_lengths) == tuple(
                sum(d.lengths[position] for d in documents) for position in range(len(FIELDS))
            )
            assert list(reader.indexed_ids()) == ["mem_a", "mem_b", "mem_c"], "indexed_ids(): each, sorted"
            assert list(reader.postings("alpha")) == [
                Posting(
                    record_id="mem_a",
                    frequencies=_freq(decision=1, citations=3),
                    lengths=documents[1].lengths,
                    valid_from=1_000,
                    valid_to=None,
                    expires_at_ms=None,
                ),
                Posting(
                    record_id="mem_b",
                    frequencies=_freq(primary=2),
                    lengths=documents[0].lengths,
                    valid_from=1_000,
                    valid_to=9_000,
                    expires_at_ms=None,
                ),
            ]
            assert [p.record_id for p in reader.postings("gamma")] == ["mem_c"], "postings('gamma')"
            assert list(reader.postings("absent")) == [], "postings of a term nobody indexed"

    def test_distinct_terms_never_share_postings(self, store: Store) -> None:
        """Terms differing only in a suffix, in non-ASCII characters, in script or form have postings of their own.

        Terms are what the service's tokenizer makes of NFC text: lower-cased runs of letters,
        digits and ``_``, in any script (``engram_memory.ranking.tokenizer``); the kit uses only
        such tokens. Text is NFC-normalised before it is tokenized, so a decomposed (NFD) spelling
        of "café" never reaches the store, and the kit does not test how a store compares one
        (exactly, as every other term, is the rule). "alphabet"/"alphabets"/"alphabetical",
        "café"/"cafe"/"caf", "straße"/"strasse", "ﬁle"/"file"/"ｆｉｌｅ" and words of several scripts
        are each indexed alone and all together (each with frequencies of its own): ``postings(t)``
        and ``term_postings(t)`` hold exactly the documents containing ``t``, with ``t``'s
        frequencies. Terms nobody indexed that share a prefix with an indexed one ("alphabetic",
        "東京タ", "cafè", "straß") have no postings.
        """
        assert all(tokenize(term) == [term] for term in (*_TERMS, *_UNINDEXED_TERMS)), "the kit's own terms"
        documents = _term_documents()
        with store.write(SCOPE_A) as unit:
            _index_with_rows(unit, documents)
        with store.read(SCOPE_A) as reader:
            _check_index(reader, documents, _TERMS)
            for term in _UNINDEXED_TERMS:
                postings = [p.record_id for p in reader.postings(term)]
                assert postings == [], f"postings({term!r}) of a term nobody indexed: {postings}"
                keys, occurrences = reader.term_postings(term)
                assert (list(keys), list(occurrences)) == ([], []), (
                    f"term_postings({term!r}) of a term nobody indexed: {list(keys)}"
                )
            assert reader.index_stats().documents == len(documents)

    def test_term_postings_are_the_postings_by_document_key(self, store: Store) -> None:
        """``term_postings`` resolved by ``index_entries`` says what ``postings`` says, term by term."""
        documents = [
            _document("mem_b", {"alpha": _freq(primary=2), "beta": _freq(context=1)}, valid_to=9_000),
            _document("mem_a", {"alpha": _freq(decision=1, citations=3)}, expires_at_ms=5_000),
            _document("mem_c", {"gamma": _freq(evidence=4), "alpha": _freq(primary=1, evidence=2)}),
        ]
        with store.write(SCOPE_A) as unit:
            _index_with_rows(unit, documents)
        with store.read(SCOPE_A) as reader:
            held: dict[str, set[str]] = {}
            for term in ("alpha", "beta", "gamma", "absent"):
                resolved = _resolved(reader, term)
                postings = list(reader.postings(term))
                assert [record_id for record_id, _, _ in resolved] == [p.record_id for p in postings], (
                    f"term_postings({term!r}) resolved by index_entries names other records than postings({term!r})"
                )
                for (_, key, entry), posting in zip(resolved, postings, strict=True):
                    assert key == occurrence_key(posting.frequencies, posting.lengths), f"occurrence key of {term!r}"
                    assert occurrence_fields(key)[0] == posting.frequencies
                    row = _row_of(next(d for d in documents if d.record_id == posting.record_id))
                    assert entry == IndexEntry(
                        row.record_id, row.state, row.trust_valid, row.valid_from, row.valid_to, row.expires_at_ms
                    )
                for key in reader.term_postings(term)[0]:
                    held.setdefault(reader.index_entries([key])[key].record_id, set()).add(key)
            assert all(len(keys) == 1 for keys in held.values()), "one key per document in a view"
            assert set(held) == {"mem_a", "mem_b", "mem_c"}

    def test_index_entries_skip_unknown_keys_and_batch(self, store: Store) -> None:
        """Unknown keys are absent, duplicates are harmless, and long lists (> 500) are served whole.

        A key is the store's own string: another spelling of it (padded, signed, zero-led, quoted)
        is unknown.
        """
        with store.write(SCOPE_A) as unit:
            _index_with_rows(
                unit, (_document(f"mem_{index:04d}", {"bulk": _freq(primary=1 + index % 3)}) for index in range(1_200))
            )
        with store.read(SCOPE_A) as reader:
            keys, occurrences = reader.term_postings("bulk")
            assert len(keys) == 1_200
            unknown = ["", "mem_never", "99999999", "-1", "1e3", "not a key", "9" * 40, '"', "\\", "\u0661"]
            unknown += [form for key in keys[:3] for form in _other_spellings(key)]
            entries = reader.index_entries([*unknown, *keys, keys[0]])
            assert set(entries) == set(keys)
            assert sorted(entry.record_id for entry in entries.values()) == [f"mem_{i:04d}" for i in range(1_200)]
            assert reader.index_entries([]) == {}
            assert reader.index_entries(unknown) == {}
            assert set(occurrences) == {"0:1:1", "0:2:2", "0:3:3"}

    def test_unindexed_keys_no_longer_resolve(self, store: Store) -> None:
        """After ``unindex`` (or re-indexing) a removed document's key resolves to nothing in this scope."""
        with store.write(SCOPE_A) as unit:
            _index_with_rows(
                unit, [_document("mem_a", {"old": _freq(primary=1)}), _document("mem_b", {"old": _freq(context=2)})]
            )
        with store.read(SCOPE_A) as reader:
            before = list(reader.term_postings("old")[0])
            assert len(reader.index_entries(before)) == 2
        with store.write(SCOPE_A) as unit:
            unit.unindex("mem_a")
            unit.index_document(_document("mem_b", {"new": _freq(decision=1)}))
        with store.read(SCOPE_A) as reader:
            assert [list(keys) for keys in reader.term_postings("old")] == [[], []]
            assert [record_id for record_id, _, _ in _resolved(reader, "new")] == ["mem_b"]
            live = set(reader.term_postings("new")[0])
            stale = [key for key in before if key not in live]
            assert stale
            assert reader.index_entries(stale) == {}

    def test_an_unindexed_record_never_resolves_again_whatever_key_comes_next(self, store: Store) -> None:
        """After ``unindex`` the record's row names no document: a later key resolves only to its own record.

        A backend may reuse a freed document number; the unindexed row must not claim it.
        """
        with store.write(SCOPE_A) as unit:
            _index_with_rows(unit, [_document("mem_z", {"old": _freq(primary=1)})])
        with store.write(SCOPE_A) as unit:
            unit.unindex("mem_z")
        with store.write(SCOPE_A) as unit:
            _index_with_rows(unit, [_document("mem_a", {"new": _freq(context=2)})])
        with store.read(SCOPE_A) as reader:
            assert [record_id for record_id, _, _ in _resolved(reader, "new")] == ["mem_a"]
            keys = list(reader.term_postings("new")[0])
            assert [entry.record_id for entry in reader.index_entries(keys).values()] == ["mem_a"]
            assert list(reader.indexed_ids()) == ["mem_a"]
            assert reader.record("mem_z") == _row_of(_document("mem_z", {"old": _freq(primary=1)}))

    def test_a_key_freed_by_unindex_never_names_two_live_documents(self, store: Store) -> None:
        """Documents indexed after an ``unindex`` get keys no live document holds.

        Three documents share a term; the middle one is unindexed and a fourth indexed: the term's
        postings then name three distinct keys, each resolving to its own record. A store that
        numbers a new document by how many it holds hands out the last live document's key again.
        """
        with store.write(SCOPE_A) as unit:
            _index_with_rows(unit, [_document(f"mem_{name}", {"shared": _freq(primary=1)}) for name in ("a", "b", "c")])
        with store.write(SCOPE_A) as unit:
            unit.unindex("mem_b")
        with store.write(SCOPE_A) as unit:
            _index_with_rows(unit, [_document("mem_d", {"shared": _freq(context=1)})])
        with store.read(SCOPE_A) as reader:
            keys = list(reader.term_postings("shared")[0])
            assert len(keys) == len(set(keys)) == 3, f"a freed key named two live documents: {keys}"
            resolved = reader.index_entries(keys)
            assert sorted(entry.record_id for entry in resolved.values()) == ["mem_a", "mem_c", "mem_d"], (
                "each live document's key resolves to its own record"
            )
            assert sorted(record_id for record_id, _, _ in _resolved(reader, "shared")) == ["mem_a", "mem_c", "mem_d"]

    def test_index_entries_report_each_row_as_it_is(self, store: Store) -> None:
        """An entry carries its row's state, trust and times as they are now, not as they were indexed.

        Ineligible rows are reported too (the ranker judges them); a document whose record has no
        row resolves to nothing, until the row is put; another scope sees nothing.
        """
        documents = [
            _document(f"mem_{tag}", {"shared": _freq(primary=1 + position)}, valid_to=9_000)
            for position, tag in enumerate("abcde")
        ]
        with store.write(SCOPE_A) as unit:
            _index_with_rows(unit, documents[:4])
            unit.index_document(documents[4])  # mem_e: indexed, no row yet
        changed = {
            "mem_a": _row_of(documents[0]),
            "mem_b": _row_of(documents[1], state="tombstoned", sealed=None),
            "mem_c": _row_of(documents[2], trust_valid=False, valid_to=4_000, expires_at_ms=8_000),
            "mem_d": _row_of(documents[3], state="historical", valid_from=2_000),
        }
        with store.write(SCOPE_A) as unit:
            for row in changed.values():
                unit.put_record(row)  # rows change without re-indexing: a stale index
        with store.read(SCOPE_A) as reader:
            keys = list(reader.term_postings("shared")[0])
            found = reader.index_entries([*keys, keys[0]])
            assert {entry.record_id: entry for entry in found.values()} == {
                rid: IndexEntry(rid, row.state, row.trust_valid, row.valid_from, row.valid_to, row.expires_at_ms)
                for rid, row in changed.items()
            }
        with store.write(SCOPE_A) as unit:
            unit.put_record(_row_of(documents[4], state="accepted_disputed"))
        with store.read(SCOPE_A) as reader:
            entries = reader.index_entries(keys)
            assert len(entries) == 5
            assert {entry.record_id: entry.state for entry in entries.values()}["mem_e"] == "accepted_disputed"
        with store.read(SCOPE_B) as reader:
            assert reader.index_entries(keys) == {}

    def test_eligible_documents_keep_exactly_what_the_rule_keeps(self, store: Store) -> None:
        """``eligible_documents`` is ``eligible_entries`` over ``index_entries``, instants on every boundary.

        Rows differ in state, trust, valid time and retention (stale rows included); one record id
        holds a comma; unknown and repeated keys are harmless; another scope sees nothing.
        """
        rows: dict[str, dict[str, Any]] = {
            "mem_open": {},
            "mem_ends": {"valid_to": 3_000},
            "mem_starts_late": {"valid_from": 2_000},
            "mem_expires": {"expires_at_ms": 4_000},
            "mem_all_times": {"valid_from": 1_500, "valid_to": 2_500, "expires_at_ms": 3_500},
            "mem_untrusted": {"trust_valid": False},
            "mem_disputed": {"state": "accepted_disputed"},
            "mem_historical": {"state": "historical", "valid_to": 3_000},
            "mem_tombstoned": {"state": "tombstoned", "sealed": None},
            "mem_a,b": {"valid_to": 2_000},
        }
        documents = [
            _document(record_id, {"shared": _freq(primary=1 + position % 3)}) for position, record_id in enumerate(rows)
        ]
        with store.write(SCOPE_A) as unit:
            _index_with_rows(unit, documents)
            for document in documents:
                unit.put_record(_row_of(document, **rows[document.record_id]))
            unit.index_document(_document("mem_rowless", {"shared": _freq(context=1)}))
        instants = sorted(
            {0, 999, 1_000, 1_001, 1_499, 1_500, 1_501, 1_999, 2_000, 2_001, 2_499, 2_500, 2_501}
            | {2_999, 3_000, 3_001, 3_499, 3_500, 3_501, 3_999, 4_000, 4_001, 10**15}
        )
        with store.read(SCOPE_A) as reader:
            keys = list(reader.term_postings("shared")[0])
            asked = [*keys, keys[0], "", "mem_open", "99999999", *_other_spellings(keys[1])]
            entries = reader.index_entries(keys)
            seen_kept: set[str] = set()
            for valid_as_of in instants:
                for now_ms in (0, 3_500, 3_999, 4_000, 10**15):
                    expected = sorted(
                        EligibleDocument(key, entry.record_id, entry.valid_to)
                        for key, entry in eligible_entries(entries.items(), valid_as_of=valid_as_of, now_ms=now_ms)
                    )
                    found = reader.eligible_documents(asked, valid_as_of=valid_as_of, now_ms=now_ms)
                    assert sorted(found) == expected, _eligibility_mismatch(
                        found, expected, entries, valid_as_of=valid_as_of, now_ms=now_ms
                    )
                    assert all(type(item) is EligibleDocument for item in found), (
                        f"eligible_documents returns EligibleDocument values: {_shown(found)}"
                    )
                    seen_kept.update(item.record_id for item in found)
            assert reader.eligible_documents([], valid_as_of=2_000, now_ms=0) == []
        assert seen_kept == {"mem_open", "mem_ends", "mem_starts_late", "mem_expires", "mem_all_times", "mem_a,b"}
        with store.read(SCOPE_B) as reader:
            assert reader.eligible_documents(keys, valid_as_of=2_000, now_ms=0) == [], "scope A's documents"

    def test_index_keys_of_one_scope_resolve_in_no_other(self, store: Store) -> None:
        """Document keys read in scope A resolve to nothing in scopes B and C."""
        with store.write(SCOPE_A) as unit:
            _index_with_rows(unit, [_document("mem_a", {"shared": _freq(primary=1)})])
        with store.write(SCOPE_B) as unit:
            _index_with_rows(unit, [_document("mem_b", {"shared": _freq(primary=1)})])
        with store.read(SCOPE_A) as reader:
            keys = reader.term_postings("shared")[0]
            assert [entry.record_id for entry in reader.index_entries(keys).values()] == ["mem_a"]
        for other in (SCOPE_B, SCOPE_C):
            with store.read(other) as reader:
                assert reader.index_entries(keys) == {}

    def test_reindexing_a_record_replaces_its_entry(self, store: Store, term_traces: TermTraces | None) -> None:
        """Indexing the same record again drops its old terms and does not double-count.

        With the ``term_traces`` capability, nothing of the dropped term remains in the store.
        """
        with store.write(SCOPE_A) as unit:
            unit.index_document(_document("mem_a", {"old": _freq(primary=3)}))
        replacement = _document("mem_a", {"new": _freq(context=2)})
        with store.write(SCOPE_A) as unit:
            unit.index_document(replacement)
        with store.read(SCOPE_A) as reader:
            assert list(reader.postings("old")) == [], "a re-indexed record keeps postings of its old terms"
            assert [p.record_id for p in reader.postings("new")] == ["mem_a"], "postings of its new term"
            stats = reader.index_stats()
            assert (stats.documents, tuple(stats.total_lengths)) == (1, replacement.lengths), (
                f"index_stats() count the re-indexed record once, with its new lengths: {stats}"
            )
        if term_traces is not None:
            assert term_traces(store, SCOPE_A, "new"), "term_traces finds nothing of a term that is indexed"
            assert not term_traces(store, SCOPE_A, "old"), "a term no document holds any more left a trace"

    def test_a_malformed_document_raises_and_its_unit_leaves_nothing(self, store: Store) -> None:
        """``index_document`` refuses a tuple without one entry per field; the unit rolls back whole."""
        before = _populated(store)
        good = _document("mem_a", {"fresh": _freq(primary=1), "worda": _freq(context=2)})
        malformed = [
            attrs.evolve(good, terms={"fresh": _freq(primary=1), "worda": (1, 2)}),
            attrs.evolve(good, lengths=(1, 2)),
        ]
        for document in malformed:

            def reindex(unit: UnitOfWork, document: IndexedDocument = document) -> None:
                unit.index_document(document)

            with pytest.raises(ValueError, match=r"."):
                _run_unit(store, SCOPE_A, reindex)
            with store.read(SCOPE_A) as reader:
                _same_snapshot(_snapshot(reader), before, "a malformed document's unit left some of its writes")

    def test_the_index_keeps_no_reference_to_the_callers_document(self, store: Store) -> None:
        """Changing an indexed document's terms afterwards changes nothing the store reports."""
        terms = {"fresh": _freq(primary=2), "shared": _freq(context=1)}
        with store.write(SCOPE_A) as unit:
            unit.index_document(_document("mem_a", terms))
        with store.read(SCOPE_A) as reader:
            before = _snapshot(reader)
        terms["fresh"] = _freq(primary=9)
        del terms["shared"]
        with store.read(SCOPE_A) as reader:
            _same_snapshot(_snapshot(reader), before, "changing an indexed document changed what the store reports")

    def test_a_view_or_unit_kept_past_its_block_is_unavailable(self, store: Store) -> None:
        """Use after the ``with`` block raises StoreUnavailableError and writes nothing."""
        with store.write(SCOPE_A) as unit:
            _populate(unit, "a")
        with store.read(SCOPE_A) as reader:
            before = _snapshot(reader)
        with pytest.raises(_AbortUnitError), store.write(SCOPE_A) as rolled_back:
            raise _AbortUnitError
        for kept in (unit, rolled_back):
            with pytest.raises(StoreUnavailableError):
                kept.put_candidate(_candidate("candidate-b"))
        with pytest.raises(StoreUnavailableError):
            reader.high_water()
        with store.read(SCOPE_A) as again:
            _same_snapshot(_snapshot(again), before, "a view or unit kept past its block wrote something")

    def test_unindex_purges_every_trace(self, store: Store, term_traces: TermTraces | None) -> None:
        """After ``unindex`` no posting, id or length of the record remains; absent ids are a no-op.

        With the ``term_traces`` capability, nothing remains of a term only the record held (no
        digest of it, no empty posting list), while a term another document holds is still there.
        """
        kept = _document("mem_b", {"shared": _freq(primary=1)})
        every_field = _freq(primary=1, decision=2, evidence=3, context=4, citations=5)  # each length counts
        with store.write(SCOPE_A) as unit:
            unit.index_document(_document("mem_a", {"shared": _freq(primary=2), "only": every_field}))
            unit.index_document(kept)
        with store.write(SCOPE_A) as unit:
            unit.unindex("mem_a")
            unit.unindex("mem_a")
            unit.unindex("mem_never")
        with store.read(SCOPE_A) as reader:
            assert list(reader.postings("only")) == [], "postings of a term only the unindexed record held"
            assert [p.record_id for p in reader.postings("shared")] == ["mem_b"], "postings after unindex"
            assert list(reader.indexed_ids()) == ["mem_b"], "indexed_ids() after unindex"
            stats = reader.index_stats()
            assert (stats.documents, tuple(stats.total_lengths)) == (1, kept.lengths), f"index_stats(): {stats}"
        if term_traces is not None:
            assert term_traces(store, SCOPE_A, "shared"), "term_traces finds nothing of a term that is indexed"
            assert not term_traces(store, SCOPE_A, "only"), "a term only the unindexed record held left a trace"

    # ------------------------------------------------------------------ threads

    def test_concurrent_writers_of_one_scope_lose_no_acknowledged_unit(self, store: Store) -> None:
        """Four threads write one scope at once: the journal is dense and holds exactly the acknowledged units.

        Two threads take the next cursor inside their unit; two take it from a view read just
        before, so a writer that won meanwhile makes their ``append_event`` conflict; both retry
        a refused unit (``StoreConflictError``, ``StoreUnavailableError``). Every fifth unit raises
        after its writes. Afterwards the journal is cursors 1..K with no gap or repeat, and its
        events are exactly the acknowledged units, each with its candidate (at the same cursor),
        binding and index entry; nothing of a rolled-back or refused attempt remains.
        """
        writers = _Writers(store, SCOPE_A, _THREADS, guessing=True)
        writers.start()
        writers.join()
        assert writers.failures == [], writers.failures
        tried = writers.acknowledged + writers.aborted + writers.unknown
        assert len(tried) == _THREADS * _UNITS
        with store.read(SCOPE_A) as reader:
            events = list(reader.events())
            created = {row.candidate_id: row.created_cursor for row in reader.candidates()}
            bound = {tag for tag in tried if reader.idempotency("principal-1", f"key-{tag}") is not None}
        journal = [_tag_of(event) for event in events]
        lost = sorted(set(writers.acknowledged) - set(journal))
        assert not lost, f"{len(lost)} of {len(writers.acknowledged)} acknowledged units are not in the journal: {lost}"
        cursors = [event.cursor for event in events]
        assert cursors == list(range(1, len(events) + 1)), f"the journal's cursors are not 1..K: {cursors}"
        assert len(set(journal)) == len(journal), "a unit's event is in the journal twice"
        unacknowledged = sorted(set(journal) - set(writers.acknowledged) - set(writers.unknown))
        assert not unacknowledged, f"units that were not acknowledged are in the journal: {unacknowledged}"
        assert created == {f"candidate-{tag}": event.cursor for tag, event in zip(journal, events, strict=True)}, (
            "each committed unit's candidate, at its event's cursor, and no other"
        )
        assert bound == set(journal), "idempotency bindings of exactly the committed units"
        with store.read(SCOPE_A) as reader:
            assert _check_view(reader) == events
        assert store.scopes() == [SCOPE_A]

    def test_views_read_during_concurrent_writes_see_one_committed_state(self, store: Store) -> None:
        """Views opened while two threads write show one committed state each, and only committed units.

        Two threads read the scope over and over while two write it (every fifth unit rolls
        back). Within each view the journal is dense up to ``high_water``, which does not move;
        ``last_event_digest`` is its last event's; the candidates, indexed ids and index
        statistics are exactly those of its events. Every event any view saw is in the final
        journal at the same cursor: no view saw a unit still open or rolled back.
        """
        writers = _Writers(store, SCOPE_A, 2, guessing=False)
        seen: set[tuple[int, str]] = set()
        failures: list[str] = []
        guard = threading.Lock()

        def read_until_the_writers_are_done() -> None:
            try:
                while True:
                    finished = writers.done.is_set()  # one more view once they are: the final state
                    with store.read(SCOPE_A) as reader:
                        events = _check_view(reader)
                    with guard:
                        seen.update((event.cursor, event.event_digest) for event in events)
                    if finished:
                        return
                    _pause()
            except BaseException as exc:  # noqa: BLE001 - reported below
                with guard:
                    failures.append(repr(exc))

        readers = [threading.Thread(target=read_until_the_writers_are_done, daemon=True) for _ in range(2)]
        for reader_thread in readers:
            reader_thread.start()
        writers.start()
        writers.join()
        for reader_thread in readers:
            reader_thread.join()
        assert writers.failures == [], writers.failures
        assert failures == [], failures
        with store.read(SCOPE_A) as reader:
            events = _check_view(reader)
        final = {(event.cursor, event.event_digest) for event in events}
        lost = sorted(set(writers.acknowledged) - {_tag_of(event) for event in events})
        assert not lost, f"acknowledged units are missing from the journal: {lost}"
        never_committed = sorted(seen - final)
        assert not never_committed, f"views saw events that are not in the final journal: {never_committed}"
        aborted = {_tag_digest(tag) for tag in writers.aborted}
        assert not any(digest in aborted for _, digest in seen), "a view saw a unit that rolled back"

    # ------------------------------------------------------------------ capabilities

    def test_committed_writes_survive_reopening(
        self, store: Store, persists_across_reopen: bool, request: pytest.FixtureRequest
    ) -> None:
        """Capability ``persists_across_reopen``: another store over the same data reads the same."""
        if not persists_across_reopen:
            pytest.skip("the backend does not persist across reopen")
        before = _populated(store)
        secret = store.secret()
        store.close()
        reopen: Callable[[], Store] = request.getfixturevalue("reopen")
        again = reopen()
        try:
            with again.read(SCOPE_A) as reader:
                _same_snapshot(_snapshot(reader), before, "a reopened store reads what the closed one committed")
            assert again.secret() == secret
            assert again.scopes() == [SCOPE_A]
        finally:
            again.close()

    def test_the_secret_survives_reopening_without_a_commit(
        self, store: Store, persists_across_reopen: bool, request: pytest.FixtureRequest
    ) -> None:
        """Capability ``persists_across_reopen``: ``secret()`` is the same after reopening, even with no write.

        A store that only saves its secret with its first commit gives a new one after a reopen,
        and every page cursor signed before it then fails.
        """
        if not persists_across_reopen:
            pytest.skip("the backend does not persist across reopen")
        secret = store.secret()
        store.close()
        again: Store = request.getfixturevalue("reopen")()
        try:
            assert again.secret() == secret, "a store reopened before any commit has another secret"
        finally:
            again.close()

    def test_the_index_stays_consistent_when_written_after_reopening(
        self, store: Store, persists_across_reopen: bool, request: pytest.FixtureRequest
    ) -> None:
        """Capability ``persists_across_reopen``: documents indexed, unindexed or re-indexed after a reopen.

        After each reopen a new document is indexed, then one is unindexed and another re-indexed
        with other terms: every term's ``postings`` and ``term_postings`` (resolved by
        ``index_entries``) are then those of the documents indexed, old and new, and no document
        key names two documents (a store whose document counter restarts on reopen hands out a
        live document's key again).
        """
        if not persists_across_reopen:
            pytest.skip("the backend does not persist across reopen")
        documents = {
            d.record_id: d
            for d in (
                _document("mem_a", {"shared": _freq(primary=1), "worda": _freq(context=2)}),
                _document("mem_b", {"shared": _freq(decision=2), "wordb": _freq(primary=1)}),
            )
        }
        terms = {"shared", "worda", "wordb"}
        with store.write(SCOPE_A) as unit:
            _index_with_rows(unit, documents.values())
        store.close()
        reopen: Callable[[], Store] = request.getfixturevalue("reopen")
        for round_ in ("c", "d"):
            again = reopen()
            try:
                added = _document(f"mem_{round_}", {"shared": _freq(evidence=3), f"word{round_}": _freq(primary=2)})
                with again.write(SCOPE_A) as unit:
                    _index_with_rows(unit, [added])
                documents[added.record_id] = added
                terms.update(added.terms)
                with again.read(SCOPE_A) as reader:
                    _check_index(reader, documents.values(), sorted(terms))
                gone, changed = ("mem_a", "mem_b") if round_ == "c" else ("mem_c", "mem_d")
                reindexed = _document(changed, {"shared": _freq(citations=1), f"new{round_}": _freq(context=4)})
                with again.write(SCOPE_A) as unit:
                    unit.unindex(gone)
                    unit.index_document(reindexed)
                del documents[gone]
                documents[changed] = reindexed
                terms.update(reindexed.terms)
                with again.read(SCOPE_A) as reader:
                    _check_index(reader, documents.values(), sorted(terms))
                    assert list(reader.indexed_ids()) == sorted(documents)
            finally:
                again.close()
