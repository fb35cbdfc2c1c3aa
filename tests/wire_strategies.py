"""Hypothesis strategies for tool arguments: valid objects and near-valid mutations of them.

The field knowledge here is written from the founding contract, independently of
``engram_memory.wire.args`` and ``engram_memory.wire.schemas``, so that tests comparing the two
catch drift in either.

* :func:`valid_arguments` draws argument objects the parser must accept. Cross-references of a
  capture are always consistent and ``family_refs`` always strictly ascending, because those rules
  are not expressible in JSON Schema.
* :func:`near_valid_arguments` draws ``(arguments, label)``: either a valid object (label
  ``"valid"``) or one mutation of it (extra property, missing field, ``null``, wrong type, bool or
  string for an integer, an integer or a string one past a bound, a non-NFC string, a list that is
  empty, too long or has a duplicate, a malformed digest, record id or instant). Every mutation of a
  cross-referenced value also breaks a rule the schema *can* express, so schema and parser must
  agree on every drawn object.
* :func:`sample_output_value` builds a well-formed success ``value`` for each tool.
"""

from __future__ import annotations

import copy
import unicodedata
from collections.abc import Callable, Iterator
from datetime import datetime
from typing import Any, Final

from hypothesis import strategies as st

__all__ = [
    "EURO",
    "MAX_SAFE",
    "TOOLS",
    "near_valid_arguments",
    "sample_output_value",
    "sized",
    "under_bytes",
    "utf16_sorted",
    "valid_arguments",
]

Json = Any
Path = tuple[str | int, ...]
Mutation = Callable[[Json], None]

TOOLS: Final = (
    "engram_memory_search",
    "engram_memory_get",
    "engram_memory_capture",
    "engram_memory_request_admission",
    "engram_memory_withdraw",
    "engram_memory_forget",
)
MAX_SAFE: Final = 2**53 - 1
EURO: Final = "\u20ac"  # 3 UTF-8 bytes
EMOJI: Final = "\U0001f600"  # 4 UTF-8 bytes
COMPOSES_3_TO_2: Final = "U\u0308\u0304"  # NFC: U+01D5, 2 bytes from 3 code points
_BASE32: Final = "abcdefghijklmnopqrstuvwxyz234567"
_HEX: Final = "0123456789abcdef"

# --------------------------------------------------------------------------- contract knowledge

_REF: Final = (1, 512, "required")
STRING_BYTES: Final[dict[str, tuple[int, int, str | None]]] = {
    **dict.fromkeys(
        (
            "purpose_ref",
            "component_id",
            "primary_component_id",
            "citation_id",
            "source_ref",
            "scheme",
            "value",
            "evidence_ref",
            "reason_ref",
            "type_ref",
            "citation_ids[]",
            "family_refs[]",
        ),
        _REF,
    ),
    "idempotency_key": (16, 256, "required"),
    "query": (1, 8192, "normalise"),
    "text": (1, 65_536, "normalise"),
    "candidate_id": (1, 512, None),
    "page_cursor": (1, 512, None),
    "attestation": (0, 4096, None),
}
"""UTF-8 byte bounds and NFC handling of every byte-bounded string (``name[]``: list items)."""

INT_BOUNDS: Final[dict[str, tuple[int, int]]] = {
    "limit": (1, 50),
    "max_packet_bytes": (4096, 1_048_576),
    "t": (-MAX_SAFE, MAX_SAFE),
    "t_end": (-MAX_SAFE, MAX_SAFE),
    "at": (-MAX_SAFE, MAX_SAFE),
    "schema_version": (2, 2),
}
LIST_BOUNDS: Final[dict[str, tuple[int, int]]] = {
    "components": (1, 64),
    "citations": (1, 256),
    "citation_ids": (1, 256),
    "family_refs": (0, 64),
}
DIGEST_FIELDS: Final = frozenset({"content_digest", "evidence_digest"})
INSTANT_FIELDS: Final = frozenset({"observed_at", "expires_at"})
ENUM_FIELDS: Final = frozenset({"kind", "derivative_rule", "minimum_channels", "network"})

_EXTRA_KEYS: Final = ("extra", "tenant", "confirmed", "scope", "Query", "x-extra", "")

BAD_DIGESTS: Final = (
    "sha256:" + "A" * 64,
    "sha256:" + "a" * 63,
    "sha256:" + "a" * 65,
    "a" * 64,
    "SHA256:" + "a" * 64,
    "sha256:" + "g" * 64,
    "sha256:" + "a" * 64 + "\n",
    "",
)
BAD_INSTANTS: Final = (
    "2026-01-01T00:00:00Z",
    "2026-02-30T00:00:00.000Z",
    "2026-01-01T00:00:00.000+00:00",
    "2026-01-01T00:00:00.000z",
    "2026-01-01 00:00:00.000Z",
    "2026-01-01T24:00:00.000Z",
    "2026-01-01T00:00:60.000Z",
    "2026-13-01T00:00:00.000Z",
    "0000-01-01T00:00:00.000Z",
    "2026-01-01T00:00:00.0000Z",
    "2026-01-01T00:00:00.000Z\n",
    "\u0662\u0660\u0662\u0666-01-01T00:00:00.000Z",
    "",
)
BAD_RECORD_IDS: Final = (
    "mem_",
    "MEM_abc",
    "mem_ABC",
    "mem_abc1",
    "mem_abc\n",
    "rec_abc",
    "mem_" + "a" * 509,
    "",
)


def sized(n_bytes: int, last: str = EURO) -> str:
    """A string of exactly ``n_bytes`` UTF-8 bytes, ending with ``last`` when it fits.

    With a multi-byte ``last`` the character count is below the byte count, which is what tells a
    byte bound from a character bound.
    """
    width = len(last.encode("utf-8"))
    if n_bytes >= width:
        return "a" * (n_bytes - width) + last
    return "a" * n_bytes


def under_bytes(n_bytes: int) -> str:
    """A string of exactly ``n_bytes`` bytes made mostly of 3-byte characters (few code points)."""
    return EURO * (n_bytes // 3) + "a" * (n_bytes % 3)


def utf16_sorted(items: list[str]) -> list[str]:
    """Sort strings by UTF-16 code units, the order ``family_refs`` must be in."""
    return sorted(items, key=lambda item: item.encode("utf-16-be"))


def utf8_len(text: str) -> int:
    return len(text.encode("utf-8"))


def _nfc(text: str) -> str:
    return unicodedata.normalize("NFC", text)


# --------------------------------------------------------------------------- scalar strategies

_CHARS: Final = st.characters(exclude_categories=["Cs"])  # never a lone surrogate


def _within(low: int, high: int) -> Callable[[str], bool]:
    return lambda text: low <= utf8_len(text) <= high


def refs() -> st.SearchStrategy[str]:
    """Opaque refs: NFC, 1..512 UTF-8 bytes (edges included)."""
    drawn = st.text(_CHARS, min_size=1, max_size=12).map(_nfc).filter(_within(1, 512))
    edges = st.sampled_from(["a", "\u00e9", sized(512), EMOJI * 128, sized(511) + "b"])
    return st.one_of(drawn, edges)


def idempotency_keys() -> st.SearchStrategy[str]:
    drawn = st.text(_CHARS, min_size=16, max_size=24).map(_nfc).filter(_within(16, 256))
    edges = st.sampled_from([sized(16), sized(256), EMOJI * 4, EMOJI * 64, EURO * 6])
    return st.one_of(drawn, edges)


def free_text(high: int) -> st.SearchStrategy[str]:
    """Free text whose NFC form is 1..``high`` bytes; often sent decomposed (NFD)."""
    raw = st.text(_CHARS, min_size=1, max_size=16)
    drawn = st.one_of(raw, raw.map(lambda t: unicodedata.normalize("NFD", t)))
    edges = st.sampled_from(["x", sized(high), COMPOSES_3_TO_2 * (high // 2), "e\u0301" * (high // 2)])
    return st.one_of(drawn.filter(lambda t: 1 <= utf8_len(_nfc(t)) <= high), edges)


def verbatim() -> st.SearchStrategy[str]:
    """Values copied as returned (candidate_id, page_cursor): 1..512 bytes, NFC or not."""
    drawn = st.text(_CHARS, min_size=1, max_size=16).filter(_within(1, 512))
    return st.one_of(drawn, st.sampled_from(["candidate_0", "e\u0301", sized(512)]))


def attestations() -> st.SearchStrategy[str]:
    drawn = st.text(_CHARS, max_size=16).filter(_within(0, 4096))
    return st.one_of(drawn, st.sampled_from(["", sized(4096), "e\u0301"]))


def record_ids() -> st.SearchStrategy[str]:
    drawn = st.text(_BASE32, min_size=1, max_size=60).map(lambda s: "mem_" + s)
    return st.one_of(drawn, st.just("mem_" + "a" * 508))


def digests() -> st.SearchStrategy[str]:
    return st.text(_HEX, min_size=64, max_size=64).map(lambda s: "sha256:" + s)


def instants() -> st.SearchStrategy[str]:
    """Canonical instants of real moments, years 0001..9999, always zero-padded."""
    moments = st.datetimes(max_value=datetime(9999, 12, 31, 23, 59, 59, 999_000))  # noqa: DTZ001 - naive, read as UTC
    drawn = moments.map(
        lambda d: (
            f"{d.year:04d}-{d.month:02d}-{d.day:02d}T{d.hour:02d}:{d.minute:02d}:"
            f"{d.second:02d}.{d.microsecond // 1000:03d}Z"
        )
    )
    edges = ["2024-02-29T23:59:59.999Z", "9999-12-31T23:59:59.999Z", "0001-01-01T00:00:00.000Z"]
    return st.one_of(drawn, st.sampled_from(edges))


def integers(low: int, high: int) -> st.SearchStrategy[int | float]:
    """Integers in ``low..high``, edges included, sometimes written as integral floats (10.0)."""
    plain = st.one_of(st.integers(low, high), st.sampled_from([low, high]))
    return st.one_of(plain, plain.filter(lambda v: abs(v) <= 2**53).map(float))


def _maybe(draw: st.DrawFn, target: dict[str, Json], key: str, strategy: st.SearchStrategy[Any]) -> None:
    if draw(st.booleans()):
        target[key] = draw(strategy)


# --------------------------------------------------------------------------- argument objects


@st.composite
def search_arguments(draw: st.DrawFn) -> dict[str, Json]:
    out: dict[str, Json] = {"query": draw(free_text(8192)), "purpose_ref": draw(refs())}
    _maybe(draw, out, "limit", integers(1, 50))
    _maybe(draw, out, "max_packet_bytes", integers(4096, 1_048_576))
    if draw(st.booleans()):
        policy: dict[str, Json] = {}
        _maybe(draw, policy, "minimum_channels", st.sampled_from(["lexical", "lexical_and_semantic"]))
        _maybe(draw, policy, "network", st.sampled_from(["forbid", "allow"]))
        out["capability_policy"] = policy
    _maybe(draw, out, "page_cursor", verbatim())
    return out


@st.composite
def get_arguments(draw: st.DrawFn) -> dict[str, Json]:
    out: dict[str, Json] = {"record_id": draw(record_ids()), "purpose_ref": draw(refs())}
    _maybe(draw, out, "max_packet_bytes", integers(4096, 1_048_576))
    return out


def _fresh(prefix: str, taken: set[str]) -> Iterator[str]:
    index = 0
    while True:
        candidate = f"{prefix}{index}"
        index += 1
        if candidate not in taken:
            taken.add(candidate)
            yield candidate


def _citation(citation_id: str, draw: st.DrawFn | None = None) -> dict[str, Json]:
    if draw is None:
        return {
            "citation_id": citation_id,
            "source_ref": "src",
            "locator": {"scheme": "line", "value": "1"},
            "content_digest": "sha256:" + "0" * 64,
        }
    out: dict[str, Json] = {
        "citation_id": citation_id,
        "source_ref": draw(refs()),
        "locator": {"scheme": draw(refs()), "value": draw(refs())},
        "content_digest": draw(digests()),
    }
    _maybe(draw, out, "observed_at", instants())
    return out


@st.composite
def capture_arguments(draw: st.DrawFn) -> dict[str, Json]:
    """A capture whose cross-references are consistent; sometimes every list at its maximum."""
    citation_ids: list[str] = draw(st.lists(refs(), min_size=1, max_size=5, unique=True))
    component_ids: list[str] = draw(st.lists(refs(), min_size=1, max_size=4, unique=True))
    at_maximum = draw(st.integers(0, 9)) == 9  # rare, and never what shrinking moves towards
    if at_maximum:
        fresh = _fresh("cit-", set(citation_ids))
        citation_ids += [next(fresh) for _ in range(256 - len(citation_ids))]
        fresh = _fresh("comp-", set(component_ids))
        component_ids += [next(fresh) for _ in range(64 - len(component_ids))]
    citations = [_citation(cid, draw) for cid in citation_ids[:5]]
    citations += [_citation(cid) for cid in citation_ids[5:]]
    components: list[dict[str, Json]] = []
    for index, component_id in enumerate(component_ids):
        if at_maximum and index == 0:
            cited = list(citation_ids)
        elif index < 4:  # the drawn ones; the rest are padding
            cited = draw(st.lists(st.sampled_from(citation_ids[:5]), min_size=1, max_size=3, unique=True))
        else:
            cited = [citation_ids[0]]
        text = draw(free_text(65_536)) if index < 4 else "padding"
        kind = draw(st.sampled_from(["context", "decision", "evidence"]))
        components.append({"component_id": component_id, "kind": kind, "text": text, "citation_ids": cited})
    primary = draw(st.integers(0, min(len(components), 4) - 1))
    valid_t = draw(st.integers(-MAX_SAFE, MAX_SAFE))
    valid_time: dict[str, Json] = {"t": valid_t}
    _maybe(draw, valid_time, "t_end", st.integers(valid_t, MAX_SAFE))
    payload: dict[str, Json] = {
        "schema_version": draw(st.sampled_from([2, 2.0])),
        "purpose_ref": draw(refs()),
        "valid_time": valid_time,
        "components": components,
        "primary_component_id": components[primary]["component_id"],
        "primary_event": {
            "at": draw(integers(-MAX_SAFE, MAX_SAFE)),
            "type_ref": draw(refs()),
            "citation_id": draw(st.sampled_from(components[primary]["citation_ids"])),
        },
        "citations": citations,
    }
    if draw(st.booleans()):
        retention: dict[str, Json] = {"derivative_rule": draw(st.sampled_from(["retain", "make-ineligible"]))}
        _maybe(draw, retention, "expires_at", instants())
        payload["retention"] = retention
    if draw(st.booleans()):
        families = draw(st.lists(refs(), max_size=4, unique=True))
        if at_maximum:
            fresh = _fresh("fam-", set(families))
            families += [next(fresh) for _ in range(64 - len(families))]
        payload["reconciliation"] = {"family_refs": utf16_sorted(families)}
    evidence_citations = (
        list(citation_ids)
        if at_maximum
        else draw(st.lists(st.sampled_from(citation_ids), min_size=1, max_size=3, unique=True))
    )
    evidence: dict[str, Json] = {
        "evidence_ref": draw(refs()),
        "evidence_digest": draw(digests()),
        "citation_ids": evidence_citations,
    }
    _maybe(draw, evidence, "attestation", attestations())
    return {"idempotency_key": draw(idempotency_keys()), "payload": payload, "evidence": evidence}


@st.composite
def request_admission_arguments(draw: st.DrawFn) -> dict[str, Json]:
    return {"candidate_id": draw(verbatim()), "idempotency_key": draw(idempotency_keys())}


@st.composite
def withdraw_arguments(draw: st.DrawFn) -> dict[str, Json]:
    return {
        "candidate_id": draw(verbatim()),
        "idempotency_key": draw(idempotency_keys()),
        "reason_ref": draw(refs()),
    }


@st.composite
def forget_arguments(draw: st.DrawFn) -> dict[str, Json]:
    return {
        "record_id": draw(record_ids()),
        "idempotency_key": draw(idempotency_keys()),
        "reason_ref": draw(refs()),
    }


_VALID: Final[dict[str, Callable[[], st.SearchStrategy[dict[str, Json]]]]] = {
    "engram_memory_search": search_arguments,
    "engram_memory_get": get_arguments,
    "engram_memory_capture": capture_arguments,
    "engram_memory_request_admission": request_admission_arguments,
    "engram_memory_withdraw": withdraw_arguments,
    "engram_memory_forget": forget_arguments,
}


def valid_arguments(tool: str) -> st.SearchStrategy[dict[str, Json]]:
    """Argument objects of ``tool`` that the contract accepts."""
    return _VALID[tool]()


# --------------------------------------------------------------------------- mutations


def _walk(value: Json, path: Path = ()) -> Iterator[tuple[Path, Json]]:
    yield path, value
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _walk(item, (*path, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _walk(item, (*path, index))


def _field(path: Path) -> str | None:
    """The contract name of the value at ``path`` (``name[]`` for an item of a list of strings)."""
    if not path:
        return None
    last = path[-1]
    if isinstance(last, str):
        return last
    owner = path[-2] if len(path) > 1 else None
    return f"{owner}[]" if isinstance(owner, str) else None


def _container(root: Json, path: Path) -> Json:
    node = root
    for segment in path[:-1]:
        node = node[segment]
    return node


def _set(path: Path, value: Json) -> Mutation:
    def apply(root: Json) -> None:
        _container(root, path)[path[-1]] = copy.deepcopy(value)

    return apply


def _set_built(path: Path, build: Callable[[], Json]) -> Mutation:
    """Like :func:`_set`, but builds the (possibly large) value only when the mutation is applied."""

    def apply(root: Json) -> None:
        _container(root, path)[path[-1]] = build()

    return apply


def _delete(path: Path) -> Mutation:
    def apply(root: Json) -> None:
        del _container(root, path)[path[-1]]

    return apply


def _json_type(value: Json) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int) or (isinstance(value, float) and value.is_integer()):
        return "integer"
    return {float: "number", str: "string", list: "array", dict: "object"}.get(type(value), "null")


def _is_number(value: Json) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


_OTHER_TYPES: Final[tuple[Json, ...]] = (True, 7, 1.5, "s", [], {})


def _padding(items: list[Json], count: int) -> list[Json]:
    if not items or isinstance(items[0], str):
        fresh = _fresh("pad-", set(items) if items else set())
        return [next(fresh) for _ in range(count)]
    id_key = next(key for key in items[0] if key.endswith("_id"))
    fresh = _fresh("pad-", {item[id_key] for item in items})
    return [{**copy.deepcopy(items[0]), id_key: next(fresh)} for _ in range(count)]


def _extra_property(path: Path, _: str | None, value: Json) -> list[Mutation]:
    key = next(key for key in _EXTRA_KEYS if key not in value)
    return [_set((*path, key), "x")]


def _wrong_type(path: Path, _: str | None, value: Json) -> list[Mutation]:
    return [_set(path, other) for other in _OTHER_TYPES if _json_type(other) != _json_type(value)]


def _over_max(path: Path, name: str | None, _: Json) -> list[Mutation]:
    high = STRING_BYTES[str(name)][1]
    return [_set_built(path, lambda: sized(high + 1))]


def _under_min(path: Path, name: str | None, _: Json) -> list[Mutation]:
    low = STRING_BYTES[str(name)][0]
    return [_set_built(path, lambda: under_bytes(low - 1))]


def _integer_past(path: Path, name: str | None, _: Json) -> list[Mutation]:
    low, high = INT_BOUNDS[str(name)]
    return [_set(path, low - 1), _set(path, high + 1)]


def _too_long(path: Path, name: str | None, value: Json) -> list[Mutation]:
    high = LIST_BOUNDS[str(name)][1]
    return [_set_built(path, lambda: value + _padding(value, high + 1 - len(value)))]


def _each(bad_values: tuple[str, ...]) -> Callable[[Path, str | None, Json], list[Mutation]]:
    return lambda path, _name, _value: [_set(path, bad) for bad in bad_values]


def _byte_bounded(name: str | None, value: Json) -> bool:
    return isinstance(value, str) and name in STRING_BYTES


def _bounded_int(name: str | None, value: Json) -> bool:
    return _is_number(value) and name in INT_BOUNDS


def _bounded_list(name: str | None, value: Json) -> bool:
    return isinstance(value, list) and name in LIST_BOUNDS


Applies = Callable[[Path, str | None, Json], bool]
Builds = Callable[[Path, str | None, Json], list[Mutation]]

MUTATORS: Final[tuple[tuple[str, Applies, Builds], ...]] = (
    ("extra property", lambda _p, _n, v: isinstance(v, dict), _extra_property),
    ("removed field", lambda p, _n, _v: bool(p) and isinstance(p[-1], str), lambda p, _n, _v: [_delete(p)]),
    ("null", lambda p, _n, _v: bool(p), lambda p, _n, _v: [_set(p, None)]),
    ("wrong type", lambda p, _n, _v: bool(p), _wrong_type),
    ("one byte over the maximum", lambda _p, n, v: _byte_bounded(n, v), _over_max),
    (
        "one byte under the minimum",
        lambda _p, n, v: _byte_bounded(n, v) and STRING_BYTES[str(n)][0] > 0,
        _under_min,
    ),
    (
        "decomposed (non-NFC) text",
        lambda _p, n, v: _byte_bounded(n, v),
        lambda p, _n, v: [_set(p, "e\u0301" + v)],
    ),
    ("bad digest", lambda _p, n, v: isinstance(v, str) and n in DIGEST_FIELDS, _each(BAD_DIGESTS)),
    ("bad instant", lambda _p, n, v: isinstance(v, str) and n in INSTANT_FIELDS, _each(BAD_INSTANTS)),
    ("bad record id", lambda _p, n, v: isinstance(v, str) and n == "record_id", _each(BAD_RECORD_IDS)),
    (
        "not in the enum",
        lambda _p, n, v: isinstance(v, str) and n in ENUM_FIELDS,
        lambda p, _n, v: [_set(p, v + "x"), _set(p, v.upper())],
    ),
    ("integer one past a bound", lambda _p, n, v: _bounded_int(n, v), _integer_past),
    (
        "bool for an integer",
        lambda _p, n, v: _bounded_int(n, v),
        lambda p, _n, v: [_set(p, bool(int(v) % 2))],
    ),
    (
        "string for an integer",
        lambda _p, n, v: _bounded_int(n, v),
        lambda p, _n, v: [_set(p, str(int(v)))],
    ),
    ("fraction for an integer", lambda _p, n, v: _bounded_int(n, v), lambda p, _n, _v: [_set(p, 1.5)]),
    ("empty list", lambda _p, n, v: _bounded_list(n, v), lambda p, _n, _v: [_set(p, [])]),
    ("list one item too long", lambda _p, n, v: _bounded_list(n, v), _too_long),
    (
        "duplicate item",
        lambda _p, n, v: _bounded_list(n, v) and bool(v),
        lambda p, _n, v: [_set(p, [*v, v[0]])],
    ),
)
"""``(label, applies(path, name, value), builds(path, name, value))`` of every near-valid mutation."""


def mutations(path: Path, value: Json) -> list[tuple[str, Mutation]]:
    """Every near-valid mutation applicable to the node at ``path``."""
    name = _field(path)
    return [
        (label, mutate)
        for label, applies, builds in MUTATORS
        if applies(path, name, value)
        for mutate in builds(path, name, value)
    ]


@st.composite
def near_valid_arguments(draw: st.DrawFn, tool: str) -> tuple[dict[str, Json], str]:
    """``(arguments, label)``: a valid object of ``tool``, or one near-valid mutation of it.

    The kind of mutation is drawn first and its place second, so every kind is drawn about equally
    often however many nodes the object has.
    """
    arguments = draw(valid_arguments(tool))
    places: dict[str, list[tuple[Path, Json]]] = {}
    for path, value in _walk(arguments):
        name = _field(path)
        for label, applies, _ in MUTATORS:
            if applies(path, name, value):
                places.setdefault(label, []).append((path, value))
    label = draw(st.sampled_from([*(entry[0] for entry in MUTATORS if entry[0] in places), "valid"]))
    if label == "valid":
        return arguments, label
    path, value = draw(st.sampled_from(places[label]))
    builds = next(entry[2] for entry in MUTATORS if entry[0] == label)
    mutated = copy.deepcopy(arguments)
    draw(st.sampled_from(builds(path, _field(path), value)))(mutated)
    return mutated, label


# --------------------------------------------------------------------------- output samples

_D: Final = "sha256:" + "ab" * 32
_INSTANT: Final = "2026-01-02T03:04:05.678Z"


def _sample_record() -> dict[str, Json]:
    return {
        "schema_version": 2,
        "scope_ref": "scope-1",
        "purpose_ref": "purpose-1",
        "valid_time": {"t": 1_767_225_600_000},
        "components": [{"component_id": "k1", "kind": "decision", "text": "Use WAL.", "citation_ids": ["c1"]}],
        "primary_component_id": "k1",
        "primary_event": {"at": 1_767_225_600_000, "type_ref": "decided", "citation_id": "c1"},
        "citations": [
            {
                "citation_id": "c1",
                "source_ref": "adr-7",
                "locator": {"scheme": "line", "value": "3"},
                "content_digest": _D,
                "observed_at": _INSTANT,
            }
        ],
        "retention": {"derivative_rule": "make-ineligible"},
        "reconciliation": {"family_refs": []},
        "record_id": "mem_abcdefgh234567",
        "payload_digest": _D,
        "record_digest": _D,
        "recorded_at": _INSTANT,
        "recorded_cursor": "12",
        "authorization_receipt_digest": _D,
        "trust": {
            "class": "asserted",
            "evidence_digest": _D,
            "verifier_id": "host",
            "verifier_version": "1",
            "issued_at": _INSTANT,
            "revocation_epoch": "0",
            "receipt_digest": _D,
        },
    }


def _lifecycle(operation: str, from_state: str, to_state: str) -> dict[str, Json]:
    return {
        "event_id": "event-1",
        "operation": operation,
        "from_state": from_state,
        "to_state": to_state,
        "cursor": "7",
        "event_digest": _D,
        "authorization_receipt_digest": _D,
        "transaction_receipt_digest": _D,
    }


def sample_output_value(tool: str) -> dict[str, Json]:
    """A well-formed success ``value`` of ``tool`` with every optional field present."""
    if tool == "engram_memory_search":
        return {
            "records": [
                {
                    "record": _sample_record(),
                    "redacted_fields": ["/scope_ref", "/trust/verifier_id"],
                    "redaction_receipt_digest": _D,
                    "score": 0.75,
                    "rank": 1,
                }
            ],
            "rank_receipt": {
                "request_digest": _D,
                "authorization_receipt_digest": _D,
                "profile": "lexical",
                "profile_version": "1",
                "profile_config_digest": _D,
                "valid_as_of": 1_767_225_600_000,
                "system_as_of": "12",
                "snapshot_id": "snap-12",
                "snapshot_digest": _D,
                "candidate_count": 1,
                "candidate_ids_digest": _D,
                "scoring_formula_ref": "bm25",
                "ordered_ids_digest": _D,
                "revalidation_receipt_digest": _D,
                "projection_receipt_digests": [_D],
                "issued_at": _INSTANT,
                "receipt_digest": _D,
            },
            "next_page_cursor": "page-2",
            "response_digest": _D,
        }
    if tool == "engram_memory_get":
        return {
            "record": {"record_id": "mem_abcdefgh234567", "purpose_ref": "purpose-1"},
            "redacted_fields": ["/citations", "/components"],
            "redaction_receipt_digest": _D,
            "read_receipt": {
                "record_id": "mem_abcdefgh234567",
                "record_digest": _D,
                "valid_as_of": 1_767_225_600_000,
                "system_as_of": "12",
                "validated_through_cursor": "12",
                "authorization_receipt_digest": _D,
                "revalidation_receipt_digest": _D,
                "checked_at": _INSTANT,
                "receipt_digest": _D,
            },
            "packet_digest": _D,
        }
    if tool == "engram_memory_capture":
        return {
            "status": "committed_pending",
            "candidate_id": "candidate_0123",
            "record_digest": _D,
            "cursor": "3",
            "transaction_receipt_digest": _D,
        }
    if tool == "engram_memory_request_admission":
        return {
            "outcome": {
                "status": "accepted",
                "candidate_id": "candidate_0123",
                "record_id": "mem_abcdefgh234567",
                "cursor": "4",
                "decision_receipt_digest": _D,
                "transaction_receipt_digest": _D,
            },
            "replayed": False,
        }
    if tool == "engram_memory_withdraw":
        return {
            "receipt": _lifecycle("withdraw", "pending", "withdrawn"),
            "replayed": False,
            "key_destruction": "complete",
        }
    if tool == "engram_memory_forget":
        return {
            "receipt": _lifecycle("tombstone", "accepted_current", "tombstoned"),
            "replayed": True,
            "projection_invalidation": "complete",
            "coverage_receipt_digest": _D,
        }
    raise KeyError(tool)
