"""``SQLiteStore``: the durable reference Store, on the standard library's ``sqlite3``.

Semantics are exactly those of :class:`~engram_memory.stores.memory.InMemoryStore` (same
orderings, same :class:`~engram_memory.errors.StoreConflictError` cases); what SQLite adds is
durability, several threads and several processes on one file.

Layout (see :mod:`._schema` for the DDL): scopes are interned to a small integer; journal events,
idempotency rows, candidates and records are ordinary tables keyed by (scope, id); tombstones,
consumed confirmations and doomed keys are ``WITHOUT ROWID`` key-only tables. The lexical index
lives in the same database and is updated in the same transaction as the state: a ``documents``
table that numbers each indexed record (an ``INTEGER PRIMARY KEY``) and holds its field lengths and
eligibility inputs; a ``document_terms`` table with the list of each document's term keys (for
``unindex``); a ``postings`` table clustered on (scope, term key, document number) whose rows carry
only the occurrence key (``field:tf:length`` of the fields holding the term), so a term's postings
are one range scan of small rows; and a per-scope ``index_stats`` row maintained incrementally.

Terms are never stored in clear: the postings key is a keyed BLAKE2b digest (16 bytes) of the term
under a key derived from the store secret. A term is distinctive content, and a B-tree keeps copies
of keys in its interior pages that ``secure_delete`` does not scrub when a row is deleted, so a
plaintext term of a forgotten record could otherwise outlive ``forget``. The secret is in the same
file, so the digests keep a term from being read, not from being confirmed by someone who holds
the file and guesses it. A unit that removes a record from the index therefore also checkpoints
and truncates the write-ahead log after its commit (see ``_scrub_wal``), so the old pages leave
the log and the main file holds them zeroed.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import secrets
import sqlite3
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from types import TracebackType
from typing import Any, Final, Literal, Self, cast, get_args

from engram_memory.errors import ErrorCode, StoreConflictError, StoreCorruptError, StoreUnavailableError
from engram_memory.ports import (
    FIELDS,
    CandidateRow,
    CandidateState,
    EligibleDocument,
    IdempotencyRow,
    IndexedDocument,
    IndexEntry,
    IndexStats,
    JournalEvent,
    Posting,
    RecordRow,
    RecordState,
    SealedEnvelope,
    TermPostings,
    occurrence_fields,
    occurrence_keys,
)
from engram_memory.stores._locking import check_busy_timeout
from engram_memory.stores.sqlite._errors import (
    MigrationLedgerError,
    SchemaVersionError,
    commit_failure,
    translate,
    translated,
)
from engram_memory.stores.sqlite._files import (
    check_current_schema,
    connect_read_only,
    create_private,
    integrity_problems,
    read_only_uri,
    truncate_left_over_wal,
)
from engram_memory.stores.sqlite._schema import STORE_SCHEMA, enter_wal, migrate, schema_version

_log = logging.getLogger("engram_memory")

__all__ = ["MigrationLedgerError", "SQLiteStore", "SchemaVersionError"]

Synchronous = Literal["FULL", "NORMAL"]

MIN_SQLITE: Final = (3, 37, 0)
"""``STRICT`` tables need SQLite 3.37."""
_PAGE: Final = 256
"""Rows fetched per query by the iterating readers (events, candidates, records, indexed ids)."""
_MAX_IDLE: Final = 8
"""Idle connections kept for reuse."""
_TERM_BYTES: Final = 16
_SECRET_NAME: Final = "store_secret"  # noqa: S105 - a row name, not a secret
_CANDIDATE_STATES: Final = frozenset(get_args(CandidateState))
_RECORD_STATES: Final = frozenset(get_args(RecordState))
_NFIELDS: Final = len(FIELDS)

_CANDIDATE_COLUMNS: Final = (
    "candidate_id, state, created_cursor, record_digest, key_ref, nonce, ciphertext,"
    " policy_id, policy_version, record_id, outcome"
)
_RECORD_COLUMNS: Final = (
    "record_id, state, record_digest, payload_digest, key_ref, nonce, ciphertext,"
    " recorded_cursor, accepted_cursor, valid_from, valid_to, expires_at_ms, trust_valid"
)
_LENGTHS: Final = "len_primary, len_decision, len_evidence, len_context, len_citations"
_DOC_LENGTHS: Final = ", ".join(f"d.len_{f}" for f in FIELDS)
_INDEX_ENTRIES: Final = (
    "SELECT CAST(doc AS TEXT), record_id, state, trust_valid, valid_from, valid_to, expires_at_ms FROM records"
    " WHERE doc IN (SELECT value FROM json_each(?)) AND doc IS NOT NULL AND scope_id = ?"
)
"""Hits to rows, the document numbers passed as one JSON array of integers (``_document_numbers``).

One prepared statement for any count; each row comes back under its own key (the number's decimal
spelling). ``records_by_document`` covers the lookup (``doc IS NOT NULL`` lets the partial index
serve). Integers, not strings: an array of strings costs a text-to-integer comparison per probe,
which made this lookup 2.5-4 times slower.
"""
_ELIGIBLE_ROWS: Final = (
    " FROM records"
    " WHERE doc IN (SELECT value FROM json_each(?1)) AND doc IS NOT NULL AND scope_id = ?2"
    " AND state = 'accepted_current' AND trust_valid = 1 AND valid_from <= ?3"
    " AND (valid_to IS NULL OR ?3 <= valid_to) AND (expires_at_ms IS NULL OR ?4 < expires_at_ms)"
)
"""The rows of ``_INDEX_ENTRIES`` that the read eligibility rule (``ranking.eligibility``) keeps, judged in SQL."""
_ELIGIBLE_DOCUMENTS: Final = (
    "SELECT group_concat(doc, ','), group_concat(record_id, ','), group_concat(ifnull(valid_to, ''), ',')"
    + _ELIGIBLE_ROWS
)
"""The eligible rows as one row of three aligned lists (one ``group_concat`` each, over the same rows).

Document numbers, record ids, and ``valid_to`` (empty for none): far cheaper than one Python row
per hit. Numbers never hold the separator; a record id that does makes its list longer than the
numbers', and the caller then reads the rows one by one (``_ELIGIBLE_DOCUMENT_ROWS``).
"""
_ELIGIBLE_DOCUMENT_ROWS: Final = "SELECT CAST(doc AS TEXT), record_id, valid_to" + _ELIGIBLE_ROWS
_new_eligible: Final = cast(
    "Callable[[tuple[str, str, int | None]], EligibleDocument]", functools.partial(tuple.__new__, EligibleDocument)
)
"""``EligibleDocument._make`` without its Python-level length check (one call per hit)."""
_BIND_IDEMPOTENCY: Final = (
    "INSERT INTO idempotency (scope_id, principal, key, intent_digest, response) VALUES (?, ?, ?, ?, ?)"
    " ON CONFLICT (scope_id, principal, key) DO UPDATE SET response = excluded.response"
    " WHERE length(idempotency.response) = 0 AND idempotency.intent_digest = excluded.intent_digest"
)
"""A new binding, or the settling of a provisional one (empty response) to the same intent."""
_TOTALS: Final = "total_primary, total_decision, total_evidence, total_context, total_citations"
_INDEX_STATS: Final = (
    f"INSERT INTO index_stats (scope_id, documents, {_TOTALS}) VALUES (?, 1, ?, ?, ?, ?, ?)"  # noqa: S608
    " ON CONFLICT (scope_id) DO UPDATE SET documents = documents + 1, "
    + ", ".join(f"total_{f} = total_{f} + excluded.total_{f}" for f in FIELDS)
)
_UNINDEX_STATS: Final = (
    "UPDATE index_stats SET documents = documents - 1, "  # noqa: S608
    + ", ".join(f"total_{f} = total_{f} - ?" for f in FIELDS)
    + " WHERE scope_id = ?"
)


def _seed_secret(conn: sqlite3.Connection) -> None:
    conn.execute("INSERT INTO meta (name, value) VALUES (?, ?)", (_SECRET_NAME, secrets.token_bytes(32)))


def _sealed(key_ref: str | None, nonce: bytes | None, ciphertext: bytes | None) -> SealedEnvelope | None:
    if key_ref is None or nonce is None or ciphertext is None:
        return None
    return SealedEnvelope(key_ref=key_ref, nonce=nonce, ciphertext=ciphertext)


def _unsealed(sealed: SealedEnvelope | None) -> tuple[str | None, bytes | None, bytes | None]:
    if sealed is None:
        return None, None, None
    return sealed.key_ref, sealed.nonce, sealed.ciphertext


def _candidate(row: Sequence[Any]) -> CandidateRow:
    if row[1] not in _CANDIDATE_STATES:
        raise StoreCorruptError(ErrorCode.JOURNAL_CORRUPT, "unknown candidate state in the store")
    return CandidateRow(
        candidate_id=row[0],
        state=cast("CandidateState", row[1]),
        created_cursor=row[2],
        record_digest=row[3],
        sealed=_sealed(row[4], row[5], row[6]),
        policy_id=row[7],
        policy_version=row[8],
        record_id=row[9],
        outcome=row[10],
    )


def _record(row: Sequence[Any]) -> RecordRow:
    if row[1] not in _RECORD_STATES:
        raise StoreCorruptError(ErrorCode.JOURNAL_CORRUPT, "unknown record state in the store")
    return RecordRow(
        record_id=row[0],
        state=cast("RecordState", row[1]),
        record_digest=row[2],
        payload_digest=row[3],
        sealed=_sealed(row[4], row[5], row[6]),
        recorded_cursor=row[7],
        accepted_cursor=row[8],
        valid_from=row[9],
        valid_to=row[10],
        expires_at_ms=row[11],
        trust_valid=bool(row[12]),
    )


def _record_values(row: RecordRow) -> tuple[Any, ...]:
    """The values of ``_RECORD_COLUMNS`` for ``row``, in that order."""
    return (
        row.record_id,
        row.state,
        row.record_digest,
        row.payload_digest,
        *_unsealed(row.sealed),
        row.recorded_cursor,
        row.accepted_cursor,
        row.valid_from,
        row.valid_to,
        row.expires_at_ms,
        int(row.trust_valid),
    )


_MAX_DOCUMENT: Final = str(2**63 - 1)
"""The largest ``INTEGER PRIMARY KEY`` (19 digits): a longer or larger decimal names no document."""


def _is_document_number(key: str) -> bool:
    """Whether ``key`` is how ``term_postings`` spells a document number: canonical ASCII decimal, in range."""
    return (
        key.isascii()
        and key.isdigit()
        and (key[0] != "0" or key == "0")
        and (len(key) < len(_MAX_DOCUMENT) or (len(key) == len(_MAX_DOCUMENT) and key <= _MAX_DOCUMENT))
    )


def _document_numbers(documents: Sequence[str]) -> str | None:
    """The keys that can name a document, as a JSON array of integers (``None`` when there is none).

    Any other spelling of a number (signed, padded, zero-led, exponent, non-ASCII digits) names no
    document, as the port requires; since only canonical decimals pass, each number's decimal
    spelling, which the lookups return, is the key that was asked.
    """
    kept = [key for key in documents if _is_document_number(key)]
    return "[" + ",".join(kept) + "]" if kept else None


@functools.cache
def _sqlite_has_json_each() -> bool:
    """Whether the linked SQLite has the JSON functions (built in since 3.38; an option before)."""
    probe = sqlite3.connect(":memory:")
    try:
        probe.execute("SELECT count(*) FROM json_each('[]')").fetchone()
    except sqlite3.OperationalError:
        return False
    finally:
        probe.close()
    return True


class _View:
    """A read view of one scope on one connection, inside one transaction (a WAL snapshot)."""

    def __init__(self, store: SQLiteStore, conn: sqlite3.Connection, scope: str) -> None:
        self._store = store
        self._conn: sqlite3.Connection | None = conn
        self._scope = scope
        self._scope_id: int | None = None

    # -- plumbing

    def _live(self) -> sqlite3.Connection:
        if self._conn is None:
            raise StoreUnavailableError("store view used outside its with block")
        return self._conn

    def _close(self) -> None:
        self._conn = None

    def _sid(self) -> int | None:
        if self._scope_id is None:
            self._scope_id = self._store._lookup_scope(self._live(), self._scope)  # noqa: SLF001
        return self._scope_id

    def _one(self, sql: str, params: Sequence[Any]) -> Any:
        try:
            return self._live().execute(sql, params).fetchone()
        except sqlite3.Error as exc:
            raise translate(exc, "read") from exc

    def _all(self, sql: str, params: Sequence[Any]) -> list[Any]:
        try:
            return self._live().execute(sql, params).fetchall()
        except sqlite3.Error as exc:
            raise translate(exc, "read") from exc

    def _pages(self, first: str, following: str, start: Any = None) -> Iterator[Any]:
        """Rows in key order, ``_PAGE`` at a time (keyset pagination on the row's first column)."""
        sid = self._sid()
        if sid is None:
            return
        sql, args = (first, (sid, _PAGE)) if start is None else (following, (sid, start, _PAGE))
        while True:
            rows = self._all(sql, args)
            yield from rows
            if len(rows) < _PAGE:
                return
            sql, args = following, (sid, rows[-1][0], _PAGE)

    # -- StoreReader

    def high_water(self) -> int:
        """The scope's last journal cursor, ``0`` when the journal is empty."""
        head = self._head()
        return 0 if head is None else int(head[0])

    def last_event_digest(self) -> str | None:
        """The ``event_digest`` of the last event, ``None`` when the journal is empty."""
        head = self._head()
        return None if head is None else str(head[1])

    def _head(self) -> tuple[int, str] | None:
        sid = self._sid()
        if sid is None:
            return None
        row = self._one(
            "SELECT cursor, event_digest FROM events WHERE scope_id = ? ORDER BY cursor DESC LIMIT 1", (sid,)
        )
        return None if row is None else (row[0], row[1])

    def events(self, after: int = 0) -> Iterator[JournalEvent]:
        """Journal events with ``cursor > after`` in cursor order."""
        sql = "SELECT cursor, event_digest, body FROM events WHERE scope_id = ? AND cursor > ? ORDER BY cursor LIMIT ?"
        for row in self._pages(sql, sql, start=max(after, 0)):
            yield JournalEvent(cursor=row[0], event_digest=row[1], body=row[2])

    def idempotency(self, principal: str, key: str) -> IdempotencyRow | None:
        """The row bound to (principal, key) in this scope, or ``None``."""
        sid = self._sid()
        if sid is None:
            return None
        row = self._one(
            "SELECT intent_digest, response FROM idempotency WHERE scope_id = ? AND principal = ? AND key = ?",
            (sid, principal, key),
        )
        return None if row is None else IdempotencyRow(intent_digest=row[0], response=row[1])

    def candidate(self, candidate_id: str) -> CandidateRow | None:
        """The candidate's control row in this scope, or ``None``."""
        sid = self._sid()
        if sid is None:
            return None
        row = self._one(
            f"SELECT {_CANDIDATE_COLUMNS} FROM candidates WHERE scope_id = ? AND candidate_id = ?",  # noqa: S608
            (sid, candidate_id),
        )
        return None if row is None else _candidate(row)

    def record(self, record_id: str) -> RecordRow | None:
        """The record row in this scope, or ``None``."""
        sid = self._sid()
        if sid is None:
            return None
        row = self._one(
            f"SELECT {_RECORD_COLUMNS} FROM records WHERE scope_id = ? AND record_id = ?",  # noqa: S608
            (sid, record_id),
        )
        return None if row is None else _record(row)

    def candidates(self) -> Iterator[CandidateRow]:
        """Every candidate row of the scope, ordered by candidate id."""
        base = f"SELECT {_CANDIDATE_COLUMNS} FROM candidates WHERE scope_id = ?"  # noqa: S608
        first = base + " ORDER BY candidate_id LIMIT ?"
        following = base + " AND candidate_id > ? ORDER BY candidate_id LIMIT ?"
        for row in self._pages(first, following):
            yield _candidate(row)

    def records(self) -> Iterator[RecordRow]:
        """Every record row of the scope, ordered by record id."""
        base = f"SELECT {_RECORD_COLUMNS} FROM records WHERE scope_id = ?"  # noqa: S608
        first = base + " ORDER BY record_id LIMIT ?"
        following = base + " AND record_id > ? ORDER BY record_id LIMIT ?"
        for row in self._pages(first, following):
            yield _record(row)

    def is_tombstoned_payload(self, payload_digest: str) -> bool:
        """Whether a tombstoned record of this scope had this payload digest."""
        sid = self._sid()
        if sid is None:
            return False
        sql = "SELECT 1 FROM tombstones WHERE scope_id = ? AND payload_digest = ?"
        return self._one(sql, (sid, payload_digest)) is not None

    def confirmation_used(self, confirmation_id: str) -> bool:
        """Whether a confirmation id was already consumed in this scope."""
        sid = self._sid()
        if sid is None:
            return False
        sql = "SELECT 1 FROM confirmations WHERE scope_id = ? AND confirmation_id = ?"
        return self._one(sql, (sid, confirmation_id)) is not None

    def index_stats(self) -> IndexStats:
        """Statistics over the indexed documents of the scope."""
        sid = self._sid()
        row = None
        if sid is not None:
            row = self._one(f"SELECT documents, {_TOTALS} FROM index_stats WHERE scope_id = ?", (sid,))  # noqa: S608
        if row is None:
            return IndexStats(documents=0, total_lengths=(0,) * _NFIELDS)
        return IndexStats(documents=row[0], total_lengths=tuple(row[1:]))

    def postings(self, term: str) -> Sequence[Posting]:
        """Every indexed record of the scope containing ``term``, ordered by record id."""
        sid = self._sid()
        if sid is None:
            return []
        rows = self._all(
            f"SELECT d.record_id, p.occurrence, {_DOC_LENGTHS}, d.valid_from, d.valid_to, d.expires_at_ms"  # noqa: S608
            " FROM postings AS p JOIN documents AS d ON d.doc = p.doc"
            " WHERE p.scope_id = ? AND p.term = ? ORDER BY d.record_id",
            (sid, self._store._term_key(term)),  # noqa: SLF001
        )
        return [
            Posting(
                record_id=row[0],
                frequencies=occurrence_fields(row[1])[0],
                lengths=tuple(row[2:7]),
                valid_from=row[7],
                valid_to=row[8],
                expires_at_ms=row[9],
            )
            for row in rows
        ]

    def term_postings(self, term: str) -> TermPostings:
        """Document keys (decimal document numbers) and occurrence keys of the documents holding ``term``.

        One row per term: two ``group_concat`` of the same scan (so aligned), split in Python —
        much cheaper than one Python row per posting.
        """
        sid = self._sid()
        row = None
        if sid is not None:
            row = self._one(
                "SELECT group_concat(doc, ','), group_concat(occurrence, ';') FROM postings"
                " WHERE scope_id = ? AND term = ?",
                (sid, self._store._term_key(term)),  # noqa: SLF001
            )
        if row is None or row[0] is None:
            return [], []
        return row[0].split(","), row[1].split(";")

    def index_entries(self, documents: Sequence[str]) -> dict[str, IndexEntry]:
        """These document keys resolved to their record rows (other scopes' keys, or not numbers, are absent).

        One statement whatever the count: one lookup per key in ``records_by_document``, the
        partial index of indexed rows that covers their eligibility inputs.
        """
        sid = self._sid()
        numbers = _document_numbers(documents)
        if sid is None or numbers is None:
            return {}
        rows = self._all(_INDEX_ENTRIES, (numbers, sid))
        found = {
            key: IndexEntry(record_id, state, trust == 1, valid_from, valid_to, expires_at_ms)
            for key, record_id, state, trust, valid_from, valid_to, expires_at_ms in rows
        }
        if not {entry.state for entry in found.values()} <= _RECORD_STATES:
            raise StoreCorruptError(ErrorCode.JOURNAL_CORRUPT, "unknown record state in the store")
        return found

    def eligible_documents(self, documents: Sequence[str], *, valid_as_of: int, now_ms: int) -> list[EligibleDocument]:
        """The eligible ones of these document keys; the rule is judged in the lookup (``_ELIGIBLE_DOCUMENTS``)."""
        sid = self._sid()
        numbers = _document_numbers(documents)
        if sid is None or numbers is None:
            return []
        params = (numbers, sid, valid_as_of, now_ms)
        found, record_ids, valid_tos = self._one(_ELIGIBLE_DOCUMENTS, params)
        if found is None:
            return []
        keys = found.split(",")
        ids = record_ids.split(",")
        if len(ids) != len(keys):  # a record id holds a comma
            return [_new_eligible(row) for row in self._all(_ELIGIBLE_DOCUMENT_ROWS, params)]
        ends = [int(value) if value else None for value in valid_tos.split(",")]
        return list(map(_new_eligible, zip(keys, ids, ends, strict=True)))

    def indexed_ids(self) -> Iterator[str]:
        """Ids of every indexed record of the scope, ordered."""
        first = "SELECT record_id FROM documents WHERE scope_id = ? ORDER BY record_id LIMIT ?"
        following = "SELECT record_id FROM documents WHERE scope_id = ? AND record_id > ? ORDER BY record_id LIMIT ?"
        for row in self._pages(first, following):
            yield row[0]

    def doomed_keys(self) -> list[str]:
        """Key refs whose destruction was committed but not yet confirmed by the vault."""
        sid = self._sid()
        if sid is None:
            return []
        rows = self._all("SELECT key_ref FROM doomed_keys WHERE scope_id = ? ORDER BY key_ref", (sid,))
        return [row[0] for row in rows]


class _Unit(_View):
    """A unit of work: one ``BEGIN IMMEDIATE`` transaction on one scope."""

    created_scope: bool = False
    erased_index: bool = False
    """Whether the unit removed a record from the index (its old pages must leave the WAL)."""

    def _sid_for_write(self) -> int:
        sid = self._sid()
        if sid is None:
            conn = self._live()
            cursor = conn.execute("INSERT INTO scopes (scope) VALUES (?)", (self._scope,))
            sid = self._scope_id = cast("int", cursor.lastrowid)
            self.created_scope = True
        return sid

    def _run(self, sql: str, params: Sequence[Any]) -> sqlite3.Cursor:
        return self._live().execute(sql, params)

    @translated("append_event")
    def append_event(self, event: JournalEvent) -> None:
        """Append the next event (``StoreConflictError`` unless ``cursor == high_water() + 1``)."""
        if event.cursor != self.high_water() + 1:
            raise StoreConflictError("journal cursor is not the next one")
        self._run(
            "INSERT INTO events (scope_id, cursor, event_digest, body) VALUES (?, ?, ?, ?)",
            (self._sid_for_write(), event.cursor, event.event_digest, event.body),
        )

    @translated("put_idempotency")
    def put_idempotency(self, principal: str, key: str, row: IdempotencyRow) -> None:
        """Bind (principal, key); only a provisional binding to the same intent is overwritten.

        Raises ``StoreConflictError`` for any other existing binding.
        """
        bound = self._run(_BIND_IDEMPOTENCY, (self._sid_for_write(), principal, key, row.intent_digest, row.response))
        if bound.rowcount != 1:  # the existing row is settled, or bound to another intent: left as it is
            raise StoreConflictError("idempotency key already bound")

    @translated("put_candidate")
    def put_candidate(self, row: CandidateRow) -> None:
        """Insert or replace a candidate's control row."""
        self._run(
            f"INSERT INTO candidates (scope_id, {_CANDIDATE_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"  # noqa: S608
            " ON CONFLICT (scope_id, candidate_id) DO UPDATE SET state = excluded.state,"
            " created_cursor = excluded.created_cursor, record_digest = excluded.record_digest,"
            " key_ref = excluded.key_ref, nonce = excluded.nonce, ciphertext = excluded.ciphertext,"
            " policy_id = excluded.policy_id, policy_version = excluded.policy_version,"
            " record_id = excluded.record_id, outcome = excluded.outcome",
            (
                self._sid_for_write(),
                row.candidate_id,
                row.state,
                row.created_cursor,
                row.record_digest,
                *_unsealed(row.sealed),
                row.policy_id,
                row.policy_version,
                row.record_id,
                row.outcome,
            ),
        )

    @translated("put_record")
    def put_record(self, row: RecordRow) -> None:
        """Insert or replace a record row."""
        self._run(
            f"INSERT INTO records (scope_id, {_RECORD_COLUMNS}, doc)"  # noqa: S608
            " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14,"
            " (SELECT doc FROM documents WHERE scope_id = ?1 AND record_id = ?2))"
            " ON CONFLICT (scope_id, record_id) DO UPDATE SET state = excluded.state,"
            " record_digest = excluded.record_digest, payload_digest = excluded.payload_digest,"
            " key_ref = excluded.key_ref, nonce = excluded.nonce, ciphertext = excluded.ciphertext,"
            " recorded_cursor = excluded.recorded_cursor, accepted_cursor = excluded.accepted_cursor,"
            " valid_from = excluded.valid_from, valid_to = excluded.valid_to,"
            " expires_at_ms = excluded.expires_at_ms, trust_valid = excluded.trust_valid",
            (self._sid_for_write(), *_record_values(row)),
        )

    @translated("add_tombstone")
    def add_tombstone(self, payload_digest: str) -> None:
        """Remember that a record with this payload digest was tombstoned in the scope."""
        self._run(
            "INSERT OR IGNORE INTO tombstones (scope_id, payload_digest) VALUES (?, ?)",
            (self._sid_for_write(), payload_digest),
        )

    def consume_confirmation(self, confirmation_id: str) -> None:
        """Mark a confirmation id used (``StoreConflictError`` if it already was)."""
        try:
            self._run(
                "INSERT INTO confirmations (scope_id, confirmation_id) VALUES (?, ?)",
                (self._sid_for_write(), confirmation_id),
            )
        except sqlite3.IntegrityError as exc:
            raise StoreConflictError("confirmation already consumed") from exc
        except sqlite3.Error as exc:
            raise translate(exc, "consume_confirmation") from exc

    @translated("index_document")
    def index_document(self, document: IndexedDocument) -> None:
        """Add a record to the scope's lexical index (replacing an older entry)."""
        self._unindex(document.record_id)
        sid = self._sid_for_write()
        lengths = document.lengths
        term_key = self._store._term_key  # noqa: SLF001
        keyed = sorted([(term_key(term), occurrence) for term, occurrence in occurrence_keys(document).items()])
        conn = self._live()
        cursor = conn.execute(
            f"INSERT INTO documents (scope_id, record_id, {_LENGTHS}, valid_from, valid_to, expires_at_ms)"  # noqa: S608
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (sid, document.record_id, *lengths, document.valid_from, document.valid_to, document.expires_at_ms),
        )
        doc = cursor.lastrowid
        conn.execute("UPDATE records SET doc = ? WHERE scope_id = ? AND record_id = ?", (doc, sid, document.record_id))
        conn.execute(
            "INSERT INTO document_terms (doc, term_count, term_keys) VALUES (?, ?, ?)",
            (doc, len(keyed), b"".join(key for key, _ in keyed)),
        )
        conn.executemany(
            "INSERT INTO postings (scope_id, term, doc, occurrence) VALUES (?, ?, ?, ?)",
            [(sid, key, doc, occurrence) for key, occurrence in keyed],
        )
        conn.execute(_INDEX_STATS, (sid, *lengths))

    @translated("unindex")
    def unindex(self, record_id: str) -> None:
        """Remove every trace of a record from the scope's lexical index (no-op if absent)."""
        self._unindex(record_id)
        self.erased_index = True

    def _unindex(self, record_id: str) -> None:
        sid = self._sid()
        if sid is None:
            return
        conn = self._live()
        row = conn.execute(
            f"SELECT d.doc, {_DOC_LENGTHS}, t.term_keys FROM documents AS d"  # noqa: S608
            " JOIN document_terms AS t ON t.doc = d.doc WHERE d.scope_id = ? AND d.record_id = ?",
            (sid, record_id),
        ).fetchone()
        if row is None:
            return
        doc, lengths, keys = row[0], tuple(row[1 : 1 + _NFIELDS]), row[1 + _NFIELDS]
        conn.executemany(
            "DELETE FROM postings WHERE scope_id = ? AND term = ? AND doc = ?",
            [(sid, keys[i : i + _TERM_BYTES], doc) for i in range(0, len(keys), _TERM_BYTES)],
        )
        conn.execute("DELETE FROM document_terms WHERE doc = ?", (doc,))
        conn.execute("DELETE FROM documents WHERE doc = ?", (doc,))
        conn.execute("UPDATE records SET doc = NULL WHERE scope_id = ? AND record_id = ?", (sid, record_id))
        conn.execute(_UNINDEX_STATS, (*lengths, sid))

    @translated("doom_key")
    def doom_key(self, key_ref: str) -> None:
        """Record that ``key_ref`` must be destroyed."""
        self._run(
            "INSERT OR IGNORE INTO doomed_keys (scope_id, key_ref) VALUES (?, ?)", (self._sid_for_write(), key_ref)
        )

    @translated("clear_doomed_key")
    def clear_doomed_key(self, key_ref: str) -> None:
        """Forget a doomed key once the vault destroyed it."""
        sid = self._sid()
        if sid is not None:
            self._run("DELETE FROM doomed_keys WHERE scope_id = ? AND key_ref = ?", (sid, key_ref))


class SQLiteStore:
    """The durable reference :class:`~engram_memory.ports.Store`, one SQLite file.

    Args:
        path: the database file (created with its schema if missing; an older schema is upgraded
            on open in one transaction; a newer one is refused with :class:`SchemaVersionError`).
        synchronous: ``"FULL"`` (default) makes every committed unit of work durable before
            :meth:`write` returns (one fsync of the write-ahead log per commit). ``"NORMAL"`` skips
            that fsync: the database stays consistent after a power loss or OS crash, but the last
            commits before it may be rolled back — and with them idempotency rows, so a retried
            mutation would then run again instead of replaying. A crash of the process alone loses
            nothing in either mode.
        busy_timeout_ms: how long a reader or writer waits for a lock held by another connection
            (thread or process) before :class:`~engram_memory.errors.StoreUnavailableError`.
        read_only: open an existing file at the current schema for reading only, creating,
            migrating, checkpointing and writing nothing (every write raises
            ``StoreUnavailableError``; an older schema is refused with
            :class:`MigrationLedgerError`). While the file has a ``-wal`` (another process has it
            open, or one was killed) reads go through it under SQLite's reader locks and need its
            ``-shm`` file; without one the file is read ``immutable`` (no lock, no file created),
            which is correct only while nothing writes it: a caller that may race a writer checks
            that the file did not change while it read (``engram-memory verify`` does).

    The file runs in WAL mode (readers never block the writer, each :meth:`read` sees one
    consistent snapshot) with ``secure_delete=ON`` (deleted rows are zeroed), ``foreign_keys=ON``
    and ``STRICT`` tables. Writers take the write lock up front (``BEGIN IMMEDIATE``); writers of one
    process also queue on a process-local lock. Connections are pooled, one per concurrent user, so
    the store is safe to share between threads, and several processes may open the same file.
    A :meth:`write` opened on a thread that already has a unit of work of this store open (any
    scope) could only wait for itself: it raises ``StoreUnavailableError`` at once, touching
    nothing, and the open unit goes on; a write inside a read is fine. After :meth:`close`,
    :meth:`read`, :meth:`write` and :meth:`scopes` raise ``StoreUnavailableError``.
    Every ``sqlite3`` exception is translated into a port error (see :mod:`._errors`).
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        synchronous: Synchronous = "FULL",
        busy_timeout_ms: int = 5000,
        read_only: bool = False,
    ) -> None:
        if synchronous not in {"FULL", "NORMAL"}:
            raise ValueError("synchronous must be 'FULL' or 'NORMAL'")
        check_busy_timeout(busy_timeout_ms)
        self._path = os.fspath(path)
        if self._path in {"", ":memory:"}:
            raise ValueError("SQLiteStore needs a file path (use InMemoryStore for a transient store)")
        if sqlite3.sqlite_version_info < MIN_SQLITE:
            raise StoreUnavailableError("SQLiteStore needs SQLite 3.37 or newer (STRICT tables)")
        if not _sqlite_has_json_each():
            raise StoreUnavailableError("SQLiteStore needs SQLite's JSON functions (json_each)")
        self._synchronous: Synchronous = synchronous
        self._busy_timeout_ms = busy_timeout_ms
        self._pool: list[sqlite3.Connection] = []
        self._pool_lock = threading.Lock()
        self._owners: dict[int, int] = {}  # id(connection) -> the process that opened it
        self._inherited: list[sqlite3.Connection] = []  # a parent's, in a forked child: kept, never used
        self._writer_lock = threading.Lock()
        # the thread inside ``write``: set by the holder of ``_writer_lock`` once it has the lock and
        # cleared before it lets go, so a thread finds its own id here exactly while its unit is open
        self._writer_thread: int | None = None
        self._closed = False
        self._scope_ids: dict[str, int] = {}
        # how every connection opens in read-only mode (decided once: see ``read_only_uri``)
        self._read_only_uri = read_only_uri(self._path) if read_only else None
        if not read_only:
            create_private(self._path)
        conn = self._connect()
        try:
            self._secret: bytes = self._first_open(conn)
        except BaseException:
            conn.close()
            raise
        self._term_secret = hashlib.blake2b(
            b"engram-memory/lexical-term-key/v1", key=self._secret, digest_size=32
        ).digest()
        self._release(conn)

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return f"SQLiteStore({Path(self._path).name!r}, synchronous={self._synchronous!r}, {state})"

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.close()

    # ------------------------------------------------------------------ connections

    def _connect(self) -> sqlite3.Connection:
        if self._read_only_uri is not None:
            try:
                conn = connect_read_only(
                    self._read_only_uri, busy_timeout_ms=self._busy_timeout_ms, cached_statements=256
                )
            except sqlite3.Error as exc:
                raise translate(exc, "open") from exc
            self._owners[id(conn)] = os.getpid()
            return conn
        try:
            conn = sqlite3.connect(
                self._path,
                timeout=self._busy_timeout_ms / 1000,
                isolation_level=None,
                check_same_thread=False,
                cached_statements=256,
            )
        except sqlite3.Error as exc:
            raise translate(exc, "open") from exc
        try:
            conn.execute(f"PRAGMA busy_timeout = {self._busy_timeout_ms}")
            enter_wal(conn, STORE_SCHEMA, busy_timeout_ms=self._busy_timeout_ms)  # nothing written to a foreign file
            conn.execute(f"PRAGMA synchronous = {self._synchronous}")
            conn.execute("PRAGMA secure_delete = ON")
            conn.execute("PRAGMA foreign_keys = ON")
            conn.execute("PRAGMA trusted_schema = OFF")
        except sqlite3.Error as exc:
            conn.close()
            raise translate(exc, "open") from exc
        except BaseException:
            conn.close()
            raise
        self._owners[id(conn)] = os.getpid()
        return conn

    def _first_open(self, conn: sqlite3.Connection) -> bytes:
        """Check (or migrate) the schema, read the store secret and, read-write, truncate a left-over log."""
        try:
            self._check_or_migrate(conn)
            row = conn.execute("SELECT value FROM meta WHERE name = ?", (_SECRET_NAME,)).fetchone()
        except sqlite3.Error as exc:
            raise translate(exc, "open") from exc
        if row is None or len(row[0]) != 32:  # noqa: PLR2004
            raise StoreCorruptError(ErrorCode.JOURNAL_CORRUPT, "store secret is missing")
        if self._read_only_uri is None:  # a crash may have left an erasure's old pages in the log
            truncate_left_over_wal(conn, busy_timeout_ms=self._busy_timeout_ms)
        secret: bytes = row[0]
        return secret

    def _check_or_migrate(self, conn: sqlite3.Connection) -> None:
        """Bring the file to the current schema; in read-only mode, refuse any other (reading only)."""
        if self._read_only_uri is not None:
            check_current_schema(conn, STORE_SCHEMA)
        else:
            migrate(conn, STORE_SCHEMA, seed=_seed_secret)

    def _owned(self, conn: sqlite3.Connection) -> bool:
        """Whether this process opened ``conn`` (SQLite forbids using a connection across ``fork``)."""
        return self._owners.get(id(conn)) == os.getpid()

    def _acquire(self) -> sqlite3.Connection:
        with self._pool_lock:
            if self._closed:
                raise StoreUnavailableError("the store is closed")
            while self._pool:
                conn = self._pool.pop()
                if self._owned(conn):
                    return conn
                self._inherited.append(conn)  # a forked child never touches its parent's connections
        return self._connect()

    def _release(self, conn: sqlite3.Connection, healthy: bool = True) -> None:
        with self._pool_lock:
            if not self._owned(conn):
                self._inherited.append(conn)
                return
            if healthy and not self._closed and not conn.in_transaction and len(self._pool) < _MAX_IDLE:
                self._pool.append(conn)
                return
            self._owners.pop(id(conn), None)
        with suppress(sqlite3.Error):
            conn.close()

    def _lookup_scope(self, conn: sqlite3.Connection, scope: str) -> int | None:
        sid = self._scope_ids.get(scope)
        if sid is not None:
            return sid
        try:
            row = conn.execute("SELECT scope_id FROM scopes WHERE scope = ?", (scope,)).fetchone()
        except sqlite3.Error as exc:
            raise translate(exc, "read") from exc
        if row is None:
            return None
        # only committed ids are cached: scope rows are never deleted, so the id is final
        self._scope_ids[scope] = row[0]
        return int(row[0])

    def _term_key(self, term: str) -> bytes:
        return hashlib.blake2b(term.encode("utf-8"), key=self._term_secret, digest_size=_TERM_BYTES).digest()

    # ------------------------------------------------------------------ Store

    @contextmanager
    def read(self, scope: str) -> Iterator[_View]:
        """A consistent read view of ``scope`` (a deferred transaction: one WAL snapshot)."""
        conn = self._acquire()
        healthy = True
        try:
            try:
                conn.execute("BEGIN")
            except sqlite3.Error as exc:
                healthy = False
                raise translate(exc, "begin read") from exc
            view = _View(self, conn, scope)
            try:
                yield view
            finally:
                view._close()  # noqa: SLF001
                try:
                    conn.execute("ROLLBACK")
                except sqlite3.Error:
                    healthy = False
        finally:
            self._release(conn, healthy)

    @contextmanager
    def write(self, scope: str) -> Iterator[_Unit]:
        """A unit of work on ``scope``: ``BEGIN IMMEDIATE`` … ``COMMIT``; an exception rolls back.

        Raises:
            StoreUnavailableError: this thread already has a unit of work of this store open (at
                once, before anything is touched), the store is closed, the write lock was not
                obtained within the busy timeout, or the commit failed with nothing written.
            StoreOutcomeUnknownError: the commit failed and may or may not have happened.
        """
        with self._writing():
            conn = self._acquire()
            healthy = True
            try:
                try:
                    conn.execute("BEGIN IMMEDIATE")
                except sqlite3.Error as exc:
                    healthy = not conn.in_transaction
                    raise translate(exc, "begin write") from exc
                unit = _Unit(self, conn, scope)
                try:
                    yield unit
                except BaseException:
                    unit._close()  # noqa: SLF001
                    try:
                        conn.execute("ROLLBACK")
                    except sqlite3.Error:
                        healthy = False
                    raise
                unit._close()  # noqa: SLF001
                self._commit(conn)
                if unit.created_scope and unit._scope_id is not None:  # noqa: SLF001
                    self._scope_ids[scope] = unit._scope_id  # noqa: SLF001
                if unit.erased_index:
                    healthy = self._scrub_wal(conn)
            except BaseException:
                healthy = healthy and not conn.in_transaction
                raise
            finally:
                self._release(conn, healthy)

    @contextmanager
    def _writing(self) -> Iterator[None]:
        """Hold the process's writer lock, naming this thread as its holder.

        Raises:
            StoreUnavailableError: this thread already holds it (waiting would wait for ourselves:
                refused at once), or another thread held it for the whole busy timeout.
        """
        thread = threading.get_ident()
        if self._writer_thread == thread:
            raise StoreUnavailableError("a unit of work is open on this thread")
        if not self._writer_lock.acquire(timeout=self._busy_timeout_ms / 1000):
            raise StoreUnavailableError("another writer of this process holds the store")
        self._writer_thread = thread
        try:
            yield
        finally:
            self._writer_thread = None
            self._writer_lock.release()

    def _scrub_wal(self, conn: sqlite3.Connection) -> bool:
        """Checkpoint and truncate the write-ahead log after a commit that erased index entries.

        The WAL keeps the page images from before the erasure (postings under the record's keyed
        term digests) until it is overwritten; truncating it leaves the pages only in the main file,
        where ``secure_delete`` has zeroed them. Best effort and never blocking: a reader or another
        process's writer still using the WAL makes it a no-op, logged, and the next erasure,
        :meth:`compact` or the last connection's close truncates it. Returns whether ``conn`` may
        go back to the pool (its busy timeout restored).
        """
        try:
            conn.execute("PRAGMA busy_timeout = 0")
            busy = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0]
        except sqlite3.Error:
            busy = 1
        if busy:
            _log.warning("write-ahead log in use after an erasure; it is truncated later")
        try:
            conn.execute(f"PRAGMA busy_timeout = {self._busy_timeout_ms}")
        except sqlite3.Error:
            return False
        return True

    @staticmethod
    def _commit(conn: sqlite3.Connection) -> None:
        try:
            conn.execute("COMMIT")
        except sqlite3.Error as exc:
            still_open = conn.in_transaction
            if still_open:
                with suppress(sqlite3.Error):
                    conn.execute("ROLLBACK")
            raise commit_failure(exc, still_in_transaction=still_open) from exc

    def scopes(self) -> list[str]:
        """Every scope key with at least one journal event, sorted."""
        with self.read("") as view:
            conn = view._live()  # noqa: SLF001
            try:
                rows = conn.execute(
                    "SELECT scope FROM scopes AS s"
                    " WHERE EXISTS (SELECT 1 FROM events AS e WHERE e.scope_id = s.scope_id) ORDER BY scope"
                ).fetchall()
            except sqlite3.Error as exc:
                raise translate(exc, "scopes") from exc
        return [row[0] for row in rows]

    def secret(self) -> bytes:
        """The per-store MAC secret (32 random bytes created with the database)."""
        return self._secret

    def close(self) -> None:
        """Close every idle connection; connections in use close when released. Idempotent.

        Afterwards :meth:`read`, :meth:`write` and :meth:`scopes` raise ``StoreUnavailableError``
        (a view or unit already open finishes normally); :meth:`secret` still answers.
        """
        with self._pool_lock:
            self._closed = True
            idle, self._pool = self._pool, []
            idle = [conn for conn in idle if self._owned(conn)]  # a parent's stay untouched
            for conn in idle:
                self._owners.pop(id(conn), None)
        for conn in idle:
            with suppress(sqlite3.Error):
                conn.close()

    # ------------------------------------------------------------------ maintenance

    def compact(self) -> None:
        """Rebuild the file (``VACUUM``) and truncate the write-ahead log to zero bytes.

        ``secure_delete`` zeroes deleted rows, but a B-tree keeps copies of some keys in its
        interior pages after the rows are gone, and the WAL keeps old page images until it is
        overwritten. For this store those remnants are ids, digests, keyed term digests (which
        whoever holds the file can test against guessed words) and sealed ciphertexts whose keys
        are destroyed, never plaintext; ``compact`` removes them too (for example after a scope
        is erased). It takes the write lock for the whole rebuild.

        Raises:
            StoreUnavailableError: called inside a unit of work of this thread (at once), the lock
                was not obtained, or a reader kept the WAL in use (the file is rebuilt; retry to
                truncate the WAL).
        """
        with self._writing():
            conn = self._acquire()
            try:
                conn.execute("PRAGMA temp_store = MEMORY")  # no temporary copy of the database on disk
                conn.execute("VACUUM")
                busy = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0]
                conn.execute("PRAGMA temp_store = DEFAULT")
            except sqlite3.Error as exc:
                raise translate(exc, "compact") from exc
            finally:
                self._release(conn, healthy=not conn.in_transaction)
        if busy:
            raise StoreUnavailableError("compacted, but a reader still uses the write-ahead log; retry")

    # ------------------------------------------------------------------ diagnostics

    @property
    def path(self) -> str:
        """The database file."""
        return self._path

    def schema_version(self) -> int:
        """The file's schema version (``PRAGMA user_version``)."""
        return int(self._inspect(schema_version))

    def pragmas(self) -> dict[str, int | str]:
        """The effective settings of a store connection (for operators and tests)."""

        def read(conn: sqlite3.Connection) -> dict[str, int | str]:
            names = ("journal_mode", "synchronous", "secure_delete", "foreign_keys", "busy_timeout")
            return {name: conn.execute(f"PRAGMA {name}").fetchone()[0] for name in names}

        return cast("dict[str, int | str]", self._inspect(read))

    def check_integrity(self) -> list[str]:
        """The damage SQLite's ``PRAGMA integrity_check`` finds in the file: one text per problem, ``[]`` if none.

        Costly: it reads every page of the file (run it from maintenance, not on a request path).
        It writes nothing (a read-only store runs it too) and checks SQLite's own structures
        (B-trees, index entries, free pages), not the journal: ``MemoryAdmin.verify`` does that,
        and its verdicts mean little on a file this finds damaged. The texts are SQLite's (table and
        index names, row numbers), never stored values.

        Raises:
            StoreUnavailableError: the store is closed, the file is locked past the busy timeout or
                cannot be read.
        """
        return cast("list[str]", self._inspect(integrity_problems))

    def _inspect(self, probe: Callable[[sqlite3.Connection], Any]) -> Any:
        conn = self._acquire()
        try:
            return probe(conn)
        except sqlite3.Error as exc:
            raise translate(exc, "inspect") from exc
        finally:
            self._release(conn)
