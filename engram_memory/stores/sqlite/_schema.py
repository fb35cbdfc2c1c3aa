"""Versioned, transactional schema migrations for the SQLite store (and the SQLite key vault).

A database carries three marks:

* ``PRAGMA application_id`` — which kind of engram-memory file it is (store or key vault), so a
  foreign SQLite file or the wrong kind of file is refused instead of being "upgraded";
* ``PRAGMA user_version`` — the schema version, written in the same transaction as the migrations;
* the ``schema_migrations`` ledger — one row per applied migration with its name and a checksum of
  its statements; a ledger that disagrees with the migrations this library ships is refused.

:func:`migrate` upgrades an older database inside one ``BEGIN IMMEDIATE`` transaction (a failure
leaves the file exactly as it was), refuses a newer one with :class:`SchemaVersionError`, and does
nothing but read when the file is current. Migrations are append-only: a released migration's
statements never change (their checksum is in every database created since).
"""

from __future__ import annotations

import hashlib
import sqlite3
import time
from collections.abc import Callable

import attrs

from engram_memory.errors import StoreUnavailableError
from engram_memory.stores.sqlite._errors import MigrationLedgerError, SchemaVersionError, is_busy

__all__ = [
    "STORE_APPLICATION_ID",
    "STORE_SCHEMA",
    "Migration",
    "SchemaSpec",
    "migrate",
    "schema_version",
]

STORE_APPLICATION_ID = 0x456E_4753
"""``PRAGMA application_id`` of an engram-memory store database ("EnGS")."""

_LEDGER = """
CREATE TABLE schema_migrations (
    version INTEGER PRIMARY KEY CHECK (version > 0),
    name TEXT NOT NULL,
    checksum TEXT NOT NULL
) STRICT
"""


@attrs.frozen
class Migration:
    """One schema step: ``sql`` holds ``;``-separated statements run in order in one transaction."""

    version: int
    name: str
    sql: str

    @property
    def statements(self) -> list[str]:
        """The statements of ``sql`` (no statement of ours contains a ``;`` inside a literal)."""
        return [statement.strip() for statement in self.sql.split(";") if statement.strip()]

    @property
    def checksum(self) -> str:
        """``sha256:`` hex digest of the name and SQL text (recorded in the ledger)."""
        text = self.name + "\0" + self.sql
        return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()


@attrs.frozen
class SchemaSpec:
    """The migrations of one kind of database, numbered 1..n without gaps."""

    kind: str
    application_id: int
    migrations: tuple[Migration, ...]

    def __attrs_post_init__(self) -> None:
        if [m.version for m in self.migrations] != list(range(1, len(self.migrations) + 1)):
            raise ValueError("migrations must be numbered 1..n")

    @property
    def latest(self) -> int:
        """The newest schema version."""
        return len(self.migrations)


# Released migrations are frozen: never edit their text (the checksum is in every database).

_STATE_V1 = Migration(
    1,
    "journal-and-state",
    """
CREATE TABLE meta (
    name TEXT PRIMARY KEY,
    value BLOB NOT NULL
) STRICT, WITHOUT ROWID;

-- scopes are interned: every other table carries the small integer, never the 71-character key
CREATE TABLE scopes (
    scope_id INTEGER PRIMARY KEY,
    scope TEXT NOT NULL UNIQUE
) STRICT;

CREATE TABLE events (
    scope_id INTEGER NOT NULL REFERENCES scopes (scope_id),
    cursor INTEGER NOT NULL CHECK (cursor > 0),
    event_digest TEXT NOT NULL,
    body BLOB NOT NULL,
    PRIMARY KEY (scope_id, cursor)
) STRICT;

CREATE TABLE idempotency (
    scope_id INTEGER NOT NULL REFERENCES scopes (scope_id),
    principal TEXT NOT NULL,
    key TEXT NOT NULL,
    intent_digest TEXT NOT NULL,
    response BLOB NOT NULL,
    PRIMARY KEY (scope_id, principal, key)
) STRICT;

CREATE TABLE candidates (
    scope_id INTEGER NOT NULL REFERENCES scopes (scope_id),
    candidate_id TEXT NOT NULL,
    state TEXT NOT NULL CHECK (state IN ('pending', 'rejected', 'withdrawn', 'admitted')),
    created_cursor INTEGER NOT NULL,
    record_digest TEXT NOT NULL,
    key_ref TEXT,
    nonce BLOB,
    ciphertext BLOB,
    policy_id TEXT NOT NULL,
    policy_version TEXT NOT NULL,
    record_id TEXT,
    outcome BLOB,
    PRIMARY KEY (scope_id, candidate_id),
    CHECK ((key_ref IS NULL) = (nonce IS NULL) AND (nonce IS NULL) = (ciphertext IS NULL))
) STRICT;

CREATE TABLE records (
    scope_id INTEGER NOT NULL REFERENCES scopes (scope_id),
    record_id TEXT NOT NULL,
    state TEXT NOT NULL CHECK (state IN ('accepted_current', 'accepted_disputed', 'historical', 'expired',
                                         'trust_invalid', 'tombstoned')),
    record_digest TEXT NOT NULL,
    payload_digest TEXT NOT NULL,
    key_ref TEXT,
    nonce BLOB,
    ciphertext BLOB,
    recorded_cursor INTEGER NOT NULL,
    accepted_cursor INTEGER NOT NULL,
    valid_from INTEGER NOT NULL,
    valid_to INTEGER,
    expires_at_ms INTEGER,
    trust_valid INTEGER NOT NULL CHECK (trust_valid IN (0, 1)),
    PRIMARY KEY (scope_id, record_id),
    CHECK ((key_ref IS NULL) = (nonce IS NULL) AND (nonce IS NULL) = (ciphertext IS NULL))
) STRICT;

CREATE TABLE tombstones (
    scope_id INTEGER NOT NULL REFERENCES scopes (scope_id),
    payload_digest TEXT NOT NULL,
    PRIMARY KEY (scope_id, payload_digest)
) STRICT, WITHOUT ROWID;

CREATE TABLE confirmations (
    scope_id INTEGER NOT NULL REFERENCES scopes (scope_id),
    confirmation_id TEXT NOT NULL,
    PRIMARY KEY (scope_id, confirmation_id)
) STRICT, WITHOUT ROWID;

CREATE TABLE doomed_keys (
    scope_id INTEGER NOT NULL REFERENCES scopes (scope_id),
    key_ref TEXT NOT NULL,
    PRIMARY KEY (scope_id, key_ref)
) STRICT, WITHOUT ROWID;
""",
)

_INDEX_V2 = Migration(
    2,
    "lexical-index",
    """
-- one row per indexed record, whose term_keys concatenates its postings' term keys (16 bytes each)
CREATE TABLE documents (
    scope_id INTEGER NOT NULL REFERENCES scopes (scope_id),
    record_id TEXT NOT NULL,
    len_primary INTEGER NOT NULL,
    len_decision INTEGER NOT NULL,
    len_evidence INTEGER NOT NULL,
    len_context INTEGER NOT NULL,
    len_citations INTEGER NOT NULL,
    term_count INTEGER NOT NULL,
    term_keys BLOB NOT NULL,
    PRIMARY KEY (scope_id, record_id)
) STRICT;

-- clustered on (scope, term key, record id): postings(term) is one range scan with no join, and each
-- row carries the term frequencies, the document's field lengths and its eligibility inputs
CREATE TABLE postings (
    scope_id INTEGER NOT NULL,
    term BLOB NOT NULL,
    record_id TEXT NOT NULL,
    tf_primary INTEGER NOT NULL,
    tf_decision INTEGER NOT NULL,
    tf_evidence INTEGER NOT NULL,
    tf_context INTEGER NOT NULL,
    tf_citations INTEGER NOT NULL,
    len_primary INTEGER NOT NULL,
    len_decision INTEGER NOT NULL,
    len_evidence INTEGER NOT NULL,
    len_context INTEGER NOT NULL,
    len_citations INTEGER NOT NULL,
    valid_from INTEGER NOT NULL,
    valid_to INTEGER,
    expires_at_ms INTEGER,
    PRIMARY KEY (scope_id, term, record_id)
) STRICT, WITHOUT ROWID;

CREATE TABLE index_stats (
    scope_id INTEGER PRIMARY KEY REFERENCES scopes (scope_id),
    documents INTEGER NOT NULL CHECK (documents >= 0),
    total_primary INTEGER NOT NULL,
    total_decision INTEGER NOT NULL,
    total_evidence INTEGER NOT NULL,
    total_context INTEGER NOT NULL,
    total_citations INTEGER NOT NULL
) STRICT;
""",
)

_NUMBERED_INDEX_V3 = Migration(
    3,
    "numbered-lexical-index",
    """
-- documents get a number (an INTEGER PRIMARY KEY, which VACUUM keeps) and hold the eligibility inputs once;
-- their term keys (only unindex reads them) live apart, so a search's lookups read small rows
CREATE TABLE numbered_documents (
    doc INTEGER PRIMARY KEY,
    scope_id INTEGER NOT NULL REFERENCES scopes (scope_id),
    record_id TEXT NOT NULL,
    len_primary INTEGER NOT NULL,
    len_decision INTEGER NOT NULL,
    len_evidence INTEGER NOT NULL,
    len_context INTEGER NOT NULL,
    len_citations INTEGER NOT NULL,
    valid_from INTEGER NOT NULL,
    valid_to INTEGER,
    expires_at_ms INTEGER,
    UNIQUE (scope_id, record_id)
) STRICT;

-- the concatenated term keys (16 bytes each) of a document's postings, for unindex
CREATE TABLE document_terms (
    doc INTEGER PRIMARY KEY,
    term_count INTEGER NOT NULL,
    term_keys BLOB NOT NULL
) STRICT;

-- the eligibility inputs of a document are those copied into its postings (every copy is the same).
-- A document without terms has no posting: its record row supplies them.
INSERT INTO numbered_documents (
    scope_id, record_id, len_primary, len_decision, len_evidence, len_context, len_citations,
    valid_from, valid_to, expires_at_ms
)
SELECT d.scope_id, d.record_id, d.len_primary, d.len_decision, d.len_evidence, d.len_context, d.len_citations,
       coalesce(p.valid_from, r.valid_from, 0),
       iif(p.record_id IS NULL, r.valid_to, p.valid_to),
       iif(p.record_id IS NULL, r.expires_at_ms, p.expires_at_ms)
FROM documents AS d
LEFT JOIN postings AS p ON p.scope_id = d.scope_id AND p.term = substr(d.term_keys, 1, 16) AND p.record_id = d.record_id
LEFT JOIN records AS r ON r.scope_id = d.scope_id AND r.record_id = d.record_id
ORDER BY d.scope_id, d.record_id;

INSERT INTO document_terms (doc, term_count, term_keys)
SELECT n.doc, d.term_count, d.term_keys
FROM documents AS d
JOIN numbered_documents AS n ON n.scope_id = d.scope_id AND n.record_id = d.record_id;

-- a posting is (scope, term key, document number) and the occurrence key "field:tf:length,..." of the
-- fields holding the term (ports.occurrence_key): no record id, no per-field columns
CREATE TABLE numbered_postings (
    scope_id INTEGER NOT NULL,
    term BLOB NOT NULL,
    doc INTEGER NOT NULL,
    occurrence TEXT NOT NULL,
    PRIMARY KEY (scope_id, term, doc)
) STRICT, WITHOUT ROWID;

INSERT INTO numbered_postings (scope_id, term, doc, occurrence)
SELECT p.scope_id, p.term, n.doc, substr(
    iif(p.tf_primary > 0, printf(',0:%d:%d', p.tf_primary, p.len_primary), '')
    || iif(p.tf_decision > 0, printf(',1:%d:%d', p.tf_decision, p.len_decision), '')
    || iif(p.tf_evidence > 0, printf(',2:%d:%d', p.tf_evidence, p.len_evidence), '')
    || iif(p.tf_context > 0, printf(',3:%d:%d', p.tf_context, p.len_context), '')
    || iif(p.tf_citations > 0, printf(',4:%d:%d', p.tf_citations, p.len_citations), ''), 2)
FROM postings AS p
JOIN numbered_documents AS n ON n.scope_id = p.scope_id AND n.record_id = p.record_id;

DROP TABLE postings;
DROP TABLE documents;
ALTER TABLE numbered_postings RENAME TO postings;
ALTER TABLE numbered_documents RENAME TO documents;

-- a search re-checks its hits' record rows: this index answers that without reading the (large) rows
CREATE INDEX records_eligibility ON records (
    scope_id, record_id, state, trust_valid, valid_from, valid_to, expires_at_ms
)
""",
)

_RECORD_DOCUMENT_V4 = Migration(
    4,
    "records-name-their-document",
    """
-- a record row names its index document (NULL while not indexed), and one partial index over the
-- indexed rows, keyed by document and covering their eligibility inputs, resolves a search hit in one lookup
ALTER TABLE records ADD COLUMN doc INTEGER;

UPDATE records SET doc = (
    SELECT d.doc FROM documents AS d WHERE d.scope_id = records.scope_id AND d.record_id = records.record_id
);

DROP INDEX records_eligibility;

CREATE INDEX records_by_document ON records (
    doc, scope_id, record_id, state, trust_valid, valid_from, valid_to, expires_at_ms
) WHERE doc IS NOT NULL
""",
)

STORE_SCHEMA = SchemaSpec(
    kind="store",
    application_id=STORE_APPLICATION_ID,
    migrations=(_STATE_V1, _INDEX_V2, _NUMBERED_INDEX_V3, _RECORD_DOCUMENT_V4),
)
"""The store's migrations: 1 = journal and state tables, 2 = the lexical index, 3 = numbered documents,
4 = records name their document."""


def schema_version(conn: sqlite3.Connection) -> int:
    """The file's ``PRAGMA user_version``."""
    value: int = conn.execute("PRAGMA user_version").fetchone()[0]
    return value


def _check(conn: sqlite3.Connection, spec: SchemaSpec) -> int:
    """Validate the file's marks and ledger against ``spec``; return its schema version.

    A negative version (no library writes one: a damaged header) and a schema or ledger that
    cannot be decoded (a damaged page) are :class:`MigrationLedgerError`, as a foreign file is.
    """
    try:
        return _check_marks(conn, spec)
    except (UnicodeDecodeError, sqlite3.DataError) as exc:
        # a damaged schema text: SQLite's error message quotes it, and sqlite3 fails to decode that message
        raise _unreadable(spec, None) from exc


def _check_marks(conn: sqlite3.Connection, spec: SchemaSpec) -> int:
    """:func:`_check` itself; a damaged page may raise ``UnicodeDecodeError`` or ``sqlite3.DataError``."""
    version = schema_version(conn)
    application_id: int = conn.execute("PRAGMA application_id").fetchone()[0]
    if version < 0:
        raise MigrationLedgerError(
            f"{spec.kind} schema version {version} is impossible: the file is damaged or not an engram-memory "
            f"{spec.kind} database",
            found=version,
            supported=spec.latest,
        )
    if version == 0:
        objects = conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]
        if objects or application_id not in {0, spec.application_id}:
            raise MigrationLedgerError(f"not an engram-memory {spec.kind} database", found=0, supported=spec.latest)
        return 0
    if application_id != spec.application_id:
        raise MigrationLedgerError(f"not an engram-memory {spec.kind} database", found=version, supported=spec.latest)
    if version > spec.latest:
        raise SchemaVersionError(
            f"{spec.kind} schema version {version} is newer than this library supports ({spec.latest})",
            found=version,
            supported=spec.latest,
        )
    ledger = _ledger(conn, spec, version)
    expected = [(m.version, m.name, m.checksum) for m in spec.migrations[:version]]
    if ledger != expected:
        raise MigrationLedgerError(
            f"schema ledger does not match the shipped {spec.kind} migrations", found=version, supported=spec.latest
        )
    return version


def _ledger(conn: sqlite3.Connection, spec: SchemaSpec, version: int) -> list[tuple[object, ...]]:
    """The ``schema_migrations`` rows; :class:`MigrationLedgerError` if the table is missing or undecodable.

    The text is read as bytes and decoded here: a damaged page can hold text that is not UTF-8,
    which ``sqlite3`` would report as an ``OperationalError`` quoting the bytes.
    """
    try:
        rows = conn.execute(
            "SELECT version, CAST(name AS BLOB), CAST(checksum AS BLOB) FROM schema_migrations ORDER BY version"
        ).fetchall()
    except sqlite3.OperationalError as exc:
        raise MigrationLedgerError("schema ledger is missing", found=version, supported=spec.latest) from exc
    try:
        return [
            (number, bytes(name).decode("utf-8"), bytes(checksum).decode("utf-8")) for number, name, checksum in rows
        ]
    except (UnicodeDecodeError, TypeError) as exc:  # TypeError: a NULL where the schema forbids one
        raise _unreadable(spec, version) from exc


def _unreadable(spec: SchemaSpec, version: int | None) -> MigrationLedgerError:
    return MigrationLedgerError(
        f"schema ledger is unreadable: the {spec.kind} file is damaged", found=version, supported=spec.latest
    )


def enter_wal(conn: sqlite3.Connection, spec: SchemaSpec, *, busy_timeout_ms: int) -> None:
    """Check, reading only, that the file is empty or a ``spec.kind`` database; then switch it to WAL.

    A file that is not ours is refused before anything is written to it (switching to WAL rewrites
    its header and creates the ``-wal`` and ``-shm`` files). The switch waits up to
    ``busy_timeout_ms`` for a file another connection is opening: SQLite does not apply its busy
    timeout to it.

    Raises:
        MigrationLedgerError: a foreign file or ledger (:class:`SchemaVersionError`: a newer one).
        StoreUnavailableError: the file cannot run in WAL mode.
        sqlite3.Error: the caller translates it.
    """
    conn.execute("BEGIN")
    try:
        _check(conn, spec)
    finally:
        conn.execute("ROLLBACK")
    if str(_switch_to_wal(conn, busy_timeout_ms)).lower() != "wal":
        raise StoreUnavailableError(f"the {spec.kind} file cannot run in WAL mode")


def _switch_to_wal(conn: sqlite3.Connection, busy_timeout_ms: int) -> object:
    """``PRAGMA journal_mode = WAL``, retried while the file is busy, for up to ``busy_timeout_ms``."""
    deadline = time.monotonic() + busy_timeout_ms / 1000
    while True:
        try:
            return conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
        except sqlite3.OperationalError as exc:
            if not is_busy(exc) or time.monotonic() >= deadline:
                raise
            time.sleep(0.005)


def migrate(
    conn: sqlite3.Connection,
    spec: SchemaSpec,
    *,
    target: int | None = None,
    seed: Callable[[sqlite3.Connection], None] | None = None,
) -> int:
    """Bring the database to ``target`` (default: the latest version); return the version reached.

    ``conn`` must be in autocommit mode (``isolation_level=None``) with no open transaction.
    ``seed`` runs once, in the transaction that creates the schema from version 0 (for example to
    store a random secret). A database already at or past ``target`` is only read.

    Raises:
        SchemaVersionError: the file is newer than ``spec``.
        MigrationLedgerError: a foreign file, or a ledger that disagrees with ``spec``.
        sqlite3.Error: the caller translates it (see :mod:`._errors`).
    """
    goal = spec.latest if target is None else target
    if not 0 <= goal <= spec.latest:
        raise ValueError("target outside the known migrations")
    conn.execute("BEGIN")
    try:
        version = _check(conn, spec)
    finally:
        conn.execute("ROLLBACK")
    if version >= goal:
        return version
    conn.execute("BEGIN IMMEDIATE")
    try:
        version = _check(conn, spec)  # again, under the write lock: another process may have migrated
        if version == 0:
            conn.execute(_LEDGER)
        for migration in spec.migrations[version:goal]:
            for statement in migration.statements:
                conn.execute(statement)
            conn.execute(
                "INSERT INTO schema_migrations (version, name, checksum) VALUES (?, ?, ?)",
                (migration.version, migration.name, migration.checksum),
            )
        if version == 0 and seed is not None:
            seed(conn)
        conn.execute(f"PRAGMA application_id = {int(spec.application_id)}")
        conn.execute(f"PRAGMA user_version = {max(version, goal)}")
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    return max(version, goal)
