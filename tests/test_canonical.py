"""Canonical JSON, digests, record ids, instants and cursors against golden vectors and properties.

The golden vectors in ``tests/vectors/canonical.json`` were derived without ``engram_memory``
(see ``tests/vectors/README.md``); every expectation that can be re-derived cheaply is re-derived
here too, from hashlib and literal domain strings, before the library is compared with it.
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
import re
import unicodedata
from datetime import UTC, datetime, timedelta, timezone
from decimal import Decimal
from pathlib import Path
from typing import Any, cast

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from engram_memory.canonical import (
    MAX_CURSOR,
    MAX_SAFE_INTEGER,
    ZERO_DIGEST,
    CanonicalError,
    Domain,
    canonical_bytes,
    digest,
    digest_bytes,
    epoch_ms,
    format_cursor,
    format_instant,
    from_epoch_ms,
    is_digest,
    is_instant,
    parse_cursor,
    parse_instant,
    receipt_digest,
    record_id_from_digest,
)

ROOT = Path(__file__).resolve().parent.parent
VECTORS: dict[str, Any] = json.loads(
    (Path(__file__).resolve().parent / "vectors" / "canonical.json").read_text(encoding="utf-8")
)
CONTRACT_DOC = (ROOT / "docs" / "contract.md").read_text(encoding="utf-8")

CANONICAL_CASES: list[dict[str, Any]] = VECTORS["canonical"]
CASES_BY_NAME: dict[str, dict[str, Any]] = {case["name"]: case for case in CANONICAL_CASES}

# Literal domain strings of the reference engine (engine-notes §3.2, §3.3), written out here so
# that a typo in ``Domain`` cannot hide behind a test that reads ``Domain`` for its expectation.
LITERAL_DOMAINS: dict[str, str] = {
    "PAYLOAD": "graphify-memory/payload/v2\0",
    "RECORD": "graphify-memory/record/v2\0",
    "ASSERTED_TRUST": "graphify-memory/asserted-trust/v1\0",
    "CAPTURE_IDENTITY": "graphify-memory/capture-identity/v1\0",
    "PENDING_CONTEXT": "graphify-memory/pending-context/v1\0",
    "ADMISSION_DECISION": "graphify-memory/admission-decision/v1\0",
    "ADMISSION_PENDING": "graphify-memory/admission-pending/v1\0",
    "JOURNAL_EVENT": "graphify-memory/memory-journal-event/v1\0",
    "JOURNAL_INTENT": "graphify-memory/memory-journal-intent/v1\0",
    "FOLD_STATE": "graphify-memory/memory-fold-state/v1\0",
    "TRANSACTION": "graphify-memory/canonical-transaction/v1\0",
    "RANK_RECEIPT": "graphify-memory/rank-receipt/v1\0",
    "RECALL_PACKET": "graphify-memory/recall-packet/v1\0",
    "KEY_DESTRUCTION": "graphify-memory/key-destruction/v1\0",
}

# Receipt kinds the reference hashes under ``graphify-memory/<kind>/v1\0`` (engine-notes §3.2-§3.3).
REFERENCE_RECEIPT_KINDS: frozenset[str] = frozenset(
    {
        "authorization-allowed",
        "authorization-denied",
        "authorization-revalidation",
        "authorization-resource",
        "policy-evidence",
        "admission-decision",
        "capture-identity",
        "pending-context",
        "asserted-trust",
        "capture-content",
        "event",
        "admission-pending",
        "projection-batch",
        "memory-journal-event",
        "memory-journal-intent",
        "memory-fold-state",
        "accepted-lexical",
        "projection-outbox",
        "canonical-transaction",
        "retention-expiry",
        "accepted-eligibility",
        "accepted-snapshot",
        "revalidation-eligibility",
        "revalidation-packet",
        "recall-profile-config",
        "recall-candidates",
        "recall-ordered",
        "recall-request",
        "recall-redaction",
        "rank-receipt",
        "recall-packet",
        "operational-capability",
        "capability-descriptor",
        "recovery-checkpoint",
        "checkpoint-blob-root",
        "sealed-candidate",
        "key-destruction",
    }
)

RECORD_ID_RE = re.compile(r"mem_[a-z2-7]{52}")
MIN_EPOCH_MS = -62_135_596_800_000  # 0001-01-01T00:00:00.000Z
MAX_EPOCH_MS = 253_402_300_799_999  # 9999-12-31T23:59:59.999Z


def _hashlib_digest(domain_literal: str, canonical: bytes) -> str:
    return "sha256:" + hashlib.sha256(domain_literal.encode("utf-8") + canonical).hexdigest()


def _utf16_key(text: str) -> bytes:
    return text.encode("utf-16-be")


def _strict_equal(left: Any, right: Any) -> bool:
    """Structural equality that also compares JSON types (1 is not 1.0, True is not 1)."""
    if type(left) is not type(right):
        return False
    if isinstance(left, dict):
        return left.keys() == right.keys() and all(_strict_equal(left[k], right[k]) for k in left)
    if isinstance(left, list):
        return len(left) == len(right) and all(map(_strict_equal, left, right))
    if isinstance(left, float):
        return left == right and math.copysign(1.0, left) == math.copysign(1.0, right)
    return bool(left == right)


def _es_number(value: float) -> str:
    """ECMAScript Number::toString for a finite, non-integral double (independent of rfc8785)."""
    if value < 0:
        return "-" + _es_number(-value)
    sign, digit_tuple, exponent = Decimal(repr(value)).normalize().as_tuple()
    assert sign == 0
    assert isinstance(exponent, int)
    digits = "".join(map(str, digit_tuple))
    k = len(digits)
    n = exponent + k
    if k <= n <= 21:
        return digits + "0" * (n - k)
    if 0 < n <= 21:
        return digits[:n] + "." + digits[n:]
    if -6 < n <= 0:
        return "0." + "0" * -n + digits
    e = n - 1
    mantissa = digits if k == 1 else digits[0] + "." + digits[1:]
    return f"{mantissa}e{'+' if e >= 0 else '-'}{abs(e)}"


def _expected_value(value: Any) -> Any:
    """What json.loads(canonical_bytes(value)) must give: NFC strings, integral floats as ints."""
    if isinstance(value, str):
        return unicodedata.normalize("NFC", value)
    if isinstance(value, dict):
        return {unicodedata.normalize("NFC", k): _expected_value(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_expected_value(v) for v in value]
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def _canonical_float(value: float) -> bool:
    negative_zero = value == 0 and math.copysign(1.0, value) < 0
    unsafe_integral = value.is_integer() and abs(value) > MAX_SAFE_INTEGER
    return not negative_zero and not unsafe_integral


def _nfc_unique_keys(mapping: dict[str, Any]) -> bool:
    return len({unicodedata.normalize("NFC", key) for key in mapping}) == len(mapping)


NFC_SENSITIVE_TEXT = st.text(
    alphabet=st.sampled_from(
        [
            *("e", "\u0301", "\u00e9", "\u1100", "\u1161", "\u11a8", "\uac01", "\ufb33"),
            *("\U0001f600", "\uff61", "\ue000", "a", "Z", "\n", '"', "\\", "\x00", "\u2028"),
        ]
    ),
    max_size=6,
)
ANY_TEXT = st.text(max_size=12) | NFC_SENSITIVE_TEXT
CANONICAL_FLOATS = st.floats(allow_nan=False, allow_infinity=False).filter(_canonical_float)
JSON_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-MAX_SAFE_INTEGER, max_value=MAX_SAFE_INTEGER)
    | CANONICAL_FLOATS
    | ANY_TEXT
)
JSON_VALUES: st.SearchStrategy[Any] = st.recursive(
    JSON_SCALARS,
    lambda children: (
        st.lists(children, max_size=5) | st.dictionaries(ANY_TEXT, children, max_size=5).filter(_nfc_unique_keys)
    ),
    max_leaves=25,
)


# --------------------------------------------------------------------------- vector file sanity


def test_vector_file_is_self_consistent() -> None:
    assert len(CANONICAL_CASES) >= 30
    assert len(CASES_BY_NAME) == len(CANONICAL_CASES), "vector names must be unique"
    for name, literal in VECTORS["domains"].items():
        assert LITERAL_DOMAINS[name] == literal
    for case in CANONICAL_CASES:
        expected = case["canonical_utf8"].encode("utf-8")
        assert bytes.fromhex(case["canonical_hex"]) == expected, case["name"]
        for domain_name, expected_digest in case.get("digests", {}).items():
            assert _hashlib_digest(LITERAL_DOMAINS[domain_name], expected) == expected_digest


def test_vector_file_keeps_float_inputs_as_floats() -> None:
    # the point of these vectors is that a JSON 1.0 reaches canonical_bytes as a float
    assert isinstance(CASES_BY_NAME["integral_float_one"]["input"], float)
    assert all(isinstance(x, float) for x in CASES_BY_NAME["integral_floats"]["input"])
    assert isinstance(CASES_BY_NAME["integer_one"]["input"], int)


def test_utf16_vectors_really_differ_from_code_point_order() -> None:
    for name in ("key_order_utf16_pair", "key_order_utf16_not_code_point"):
        keys = list(CASES_BY_NAME[name]["input"])
        assert sorted(keys) != sorted(keys, key=_utf16_key), name
    pair = CASES_BY_NAME["key_order_utf16_pair"]
    assert pair["input"] == {"\uff61": 1, "\U0001f600": 2}
    assert pair["canonical_hex"] == "7b22f09f9880223a322c22efbda1223a317d"


def test_nfc_and_nfd_vectors_are_byte_identical() -> None:
    pairs = [
        ("nfc_precomposed_e", "nfd_decomposed_e"),
        ("nfc_key_and_value_precomposed", "nfd_key_and_value"),
        ("nfc_hangul_syllable", "nfd_hangul_jamo"),
    ]
    for nfc_name, nfd_name in pairs:
        nfc_case, nfd_case = CASES_BY_NAME[nfc_name], CASES_BY_NAME[nfd_name]
        assert nfc_case["input"] != nfd_case["input"]
        assert nfc_case["canonical_hex"] == nfd_case["canonical_hex"]
        for domain_name, value in nfd_case["digests"].items():
            assert nfc_case["digests"][domain_name] == value
    assert CASES_BY_NAME["nfd_decomposed_e"]["input"] == "e\u0301"
    assert CASES_BY_NAME["nfc_precomposed_e"]["canonical_hex"] == "22c3a922"


# --------------------------------------------------------------------------- canonical bytes


@pytest.mark.parametrize("case", CANONICAL_CASES, ids=lambda case: case["name"])
def test_canonical_bytes_vectors(case: dict[str, Any]) -> None:
    assert canonical_bytes(case["input"]) == bytes.fromhex(case["canonical_hex"])


@pytest.mark.parametrize("case", [c for c in CANONICAL_CASES if "digests" in c], ids=lambda case: case["name"])
def test_digest_vectors(case: dict[str, Any]) -> None:
    for domain_name, expected in case["digests"].items():
        domain = Domain[domain_name]
        assert digest(domain, case["input"]) == expected
        assert digest_bytes(domain, bytes.fromhex(case["canonical_hex"])) == expected


def test_same_bytes_under_different_domains_differ() -> None:
    digests = CASES_BY_NAME["empty_object"]["digests"]
    assert digests["PAYLOAD"] != digests["RECORD"]
    assert CASES_BY_NAME["integral_float_one"]["digests"] == CASES_BY_NAME["integer_one"]["digests"]


def test_candidate_id_vector() -> None:
    case = CASES_BY_NAME["capture_identity"]
    capture_digest = digest(Domain.CAPTURE_IDENTITY, case["input"])
    assert "candidate_" + capture_digest.removeprefix("sha256:") == case["candidate_id"]
    assert re.fullmatch(r"candidate_[0-9a-f]{64}", case["candidate_id"])


def test_record_vector_derives_its_record_id() -> None:
    case = CASES_BY_NAME["record_without_ids"]
    assert record_id_from_digest(digest(Domain.RECORD, case["input"])) == case["record_id"]


@pytest.mark.parametrize(
    "value",
    [
        pytest.param(2**53, id="int_2**53"),
        pytest.param(-(2**53), id="int_-(2**53)"),
        pytest.param(2**64, id="int_2**64"),
        pytest.param([1, {"a": 2**53}], id="nested_unsafe_int"),
        pytest.param([2**53], id="unsafe_int_in_array"),
        pytest.param((-(2**53),), id="unsafe_negative_int_in_tuple"),
        pytest.param([[1, 2**64]], id="unsafe_int_in_nested_array"),
        pytest.param(9007199254740992.0, id="float_2**53"),
        pytest.param(1e21, id="float_1e21_integral_unsafe"),
        pytest.param(-1e300, id="float_-1e300_integral_unsafe"),
        pytest.param(math.nan, id="nan"),
        pytest.param(math.inf, id="inf"),
        pytest.param(-math.inf, id="-inf"),
        pytest.param(-0.0, id="negative_zero"),
        pytest.param({"a": [-0.0]}, id="nested_negative_zero"),
        pytest.param("\ud800", id="lone_high_surrogate"),
        pytest.param("a\udfffb", id="lone_low_surrogate"),
        pytest.param({"\ud800": 1}, id="lone_surrogate_key"),
        pytest.param({"e\u0301": 1, "\u00e9": 2}, id="duplicate_key_after_nfc"),
        pytest.param({"\u00e9": 1, "e\u0301": 2}, id="duplicate_key_after_nfc_reversed"),
        pytest.param([{"x": {"\u212b": 1, "\u00c5": 2}}], id="nested_duplicate_key_angstrom"),
        pytest.param({1: "a"}, id="non_string_key"),
        pytest.param(b"bytes", id="bytes"),
        pytest.param({1, 2}, id="set"),
    ],
)
def test_rejections_raise_canonical_error(value: Any) -> None:
    with pytest.raises(CanonicalError):
        canonical_bytes(value)
    with pytest.raises(CanonicalError):
        digest(Domain.PAYLOAD, value)


def test_canonical_error_is_a_value_error() -> None:
    assert issubclass(CanonicalError, ValueError)


def test_booleans_are_not_numbers() -> None:
    assert canonical_bytes([True, False, 1, 0]) == b"[true,false,1,0]"


def test_tuples_serialise_as_arrays() -> None:
    assert canonical_bytes((1, ("a", None))) == b'[1,["a",null]]'


def test_input_is_not_mutated() -> None:
    value = {"e\u0301": ["e\u0301", 1.0]}
    canonical_bytes(value)
    assert value == {"e\u0301": ["e\u0301", 1.0]}
    assert isinstance(value["e\u0301"][1], float)


@given(JSON_VALUES)
def test_canonical_bytes_is_idempotent(value: Any) -> None:
    once = canonical_bytes(value)
    assert canonical_bytes(json.loads(once)) == once


@given(JSON_VALUES)
def test_canonical_bytes_parse_back_to_the_normalised_value(value: Any) -> None:
    assert _strict_equal(json.loads(canonical_bytes(value)), _expected_value(value))


@given(JSON_VALUES)
def test_object_keys_are_sorted_by_utf16_code_units(value: Any) -> None:
    def check(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        keys = [key for key, _ in pairs]
        assert keys == sorted(keys, key=_utf16_key)
        assert len(set(keys)) == len(keys)
        return dict(pairs)

    json.loads(canonical_bytes(value), object_pairs_hook=check)


@given(st.dictionaries(ANY_TEXT, JSON_SCALARS, max_size=8).filter(_nfc_unique_keys))
def test_key_insertion_order_is_irrelevant(mapping: dict[str, Any]) -> None:
    reversed_mapping = dict(reversed(list(mapping.items())))
    assert canonical_bytes(reversed_mapping) == canonical_bytes(mapping)


@given(CANONICAL_FLOATS.filter(lambda x: not x.is_integer()))
@example(1e-7)
@example(1e-6)
@example(5e-324)
@example(4503599627370495.5)
@example(-1.5e-7)
def test_non_integral_floats_use_ecmascript_formatting(value: float) -> None:
    text = canonical_bytes(value).decode("ascii")
    assert text == _es_number(value)
    assert float(text) == value
    assert "+" not in text
    assert re.fullmatch(r"-?(0|[1-9][0-9]*)(\.[0-9]+)?(e-[1-9][0-9]*)?", text)


@given(st.integers(min_value=-MAX_SAFE_INTEGER, max_value=MAX_SAFE_INTEGER))
def test_integral_floats_serialise_like_integers(value: int) -> None:
    assert float(value) == value  # every safe integer is exactly representable
    assert canonical_bytes(float(value)) == canonical_bytes(value) == str(value).encode("ascii")


@given(JSON_VALUES, st.sampled_from(list(Domain)))
def test_digest_is_sha256_of_domain_and_canonical_bytes(value: Any, domain: Domain) -> None:
    expected = "sha256:" + hashlib.sha256(domain.value.encode() + canonical_bytes(value)).hexdigest()
    assert digest(domain, value) == expected
    assert is_digest(expected)


# --------------------------------------------------------------------------- domains


def test_domain_strings_are_nul_terminated_unique_and_ascii() -> None:
    values = [member.value for member in Domain.__members__.values()]
    assert len(values) == len(set(values)), "an alias would silently merge two domains"
    assert len(Domain.__members__) == len(list(Domain))
    for name, member in Domain.__members__.items():
        value = member.value
        assert isinstance(value, str)
        assert value.endswith("\0"), name
        assert value.count("\0") == 1, name
        assert value.isascii(), name
        assert member.prefix == value.encode("utf-8")


def test_domain_constants_equal_the_reference_literals() -> None:
    for name, literal in LITERAL_DOMAINS.items():
        assert Domain[name].value == literal, name
    assert Domain.PAYLOAD.value == "graphify-memory/payload/v2\0"
    assert Domain.RECORD.value == "graphify-memory/record/v2\0"


def test_receipt_domains_follow_the_kind_pattern() -> None:
    own_kinds: set[str] = set()
    for name, member in Domain.__members__.items():
        if name in {"PAYLOAD", "RECORD"}:
            continue
        match = re.fullmatch(r"(graphify-memory|engram-memory)/([a-z0-9]+(?:-[a-z0-9]+)*)/v1\0", member.value)
        assert match is not None, name
        prefix, kind = match.groups()
        if prefix == "graphify-memory":
            assert kind in REFERENCE_RECEIPT_KINDS, f"{name}: {kind} is not a reference receipt kind"
        else:
            assert kind not in REFERENCE_RECEIPT_KINDS, f"{name}: {kind} shadows a reference kind"
            own_kinds.add(kind)
    assert own_kinds, "engram-memory's own receipt kinds are expected"


def _doc_section(title: str) -> str:
    match = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", CONTRACT_DOC, re.MULTILINE | re.DOTALL)
    assert match is not None, f"docs/contract.md has no '## {title}' section"
    return match.group(1)


def test_every_domain_member_is_documented() -> None:
    section = _doc_section("Digest domains")
    rows = re.findall(r"^\| `([A-Z_]+)` \| `([^`]+)` \|", section, re.MULTILINE)
    documented = {name: text.replace("\\0", "\0") for name, text in rows}
    assert len(documented) == len(rows), "a domain is documented twice"
    assert documented == {name: member.value for name, member in Domain.__members__.items()}


def test_documented_golden_digests_match_the_vector_file() -> None:
    section = _doc_section("Golden digests")
    rows = re.findall(
        r"^\| `([a-z0-9_]+)` \| `([^`]+)` \| `([^`]+)` \| `([A-Z_]+)` \| `(sha256:[0-9a-f]{64})` \|$",
        section,
        re.MULTILINE,
    )
    assert len(rows) >= 5
    for name, input_json, canonical_text, domain_name, documented_digest in rows:
        case = CASES_BY_NAME[name]
        assert _strict_equal(json.loads(input_json), case["input"]), name
        assert canonical_text == case["canonical_utf8"], name
        assert case["digests"][domain_name] == documented_digest, name
        assert digest(Domain[domain_name], case["input"]) == documented_digest, name


# --------------------------------------------------------------------------- receipts


@pytest.mark.parametrize("case", VECTORS["receipts"], ids=lambda case: case["name"])
def test_receipt_digest_vectors(case: dict[str, Any]) -> None:
    body = case["body"]
    before = json.dumps(body, sort_keys=True)
    assert receipt_digest(Domain[case["domain"]], body, case["field"]) == case["digest"]
    assert json.dumps(body, sort_keys=True) == before, "the body must not be mutated"


def test_receipt_digest_excludes_exactly_its_own_field() -> None:
    body: dict[str, Any] = {
        "receipt_digest": "sha256:" + "1" * 64,
        "record_digest": "sha256:" + "2" * 64,
        "event_digest": "sha256:" + "3" * 64,
        "cursor": "7",
    }
    base = receipt_digest(Domain.TRANSACTION, body)
    without_own = {k: v for k, v in body.items() if k != "receipt_digest"}
    assert base == _hashlib_digest(LITERAL_DOMAINS["TRANSACTION"], canonical_bytes(without_own))
    assert receipt_digest(Domain.TRANSACTION, without_own) == base
    assert receipt_digest(Domain.TRANSACTION, {**body, "receipt_digest": "anything"}) == base
    for key in ("record_digest", "event_digest", "cursor"):
        assert receipt_digest(Domain.TRANSACTION, {**body, key: "changed"}) != base, key
    # naming another field excludes that one instead, and binds receipt_digest
    other = receipt_digest(Domain.TRANSACTION, body, "event_digest")
    assert other == digest(Domain.TRANSACTION, {k: v for k, v in body.items() if k != "event_digest"})
    assert receipt_digest(Domain.TRANSACTION, {**body, "receipt_digest": "x"}, "event_digest") != other


@given(st.dictionaries(st.text(max_size=8), JSON_SCALARS, max_size=6).filter(_nfc_unique_keys), JSON_SCALARS)
def test_receipt_digest_ignores_the_value_of_its_own_field(body: dict[str, Any], own: Any) -> None:
    rest = {k: v for k, v in body.items() if k != "receipt_digest"}
    assert receipt_digest(Domain.READ_RECEIPT, {**rest, "receipt_digest": own}) == digest(Domain.READ_RECEIPT, rest)


# --------------------------------------------------------------------------- digests and ids


def test_is_digest() -> None:
    assert is_digest("sha256:" + "0123456789abcdef" * 4)
    assert is_digest(ZERO_DIGEST)
    assert ZERO_DIGEST == "sha256:" + "0" * 64
    for bad in (
        "sha256:" + "A" * 64,
        "sha256:" + "0" * 63,
        "sha256:" + "0" * 65,
        "SHA256:" + "0" * 64,
        "0" * 64,
        "sha256:" + "0" * 64 + "\n",
        "sha256:" + "g" * 64,
        "",
    ):
        assert not is_digest(bad), bad
    assert not is_digest(None)
    assert not is_digest(b"sha256:" + b"0" * 64)


@pytest.mark.parametrize("case", VECTORS["record_ids"], ids=lambda case: case["name"])
def test_record_id_vectors(case: dict[str, Any]) -> None:
    record_id = record_id_from_digest(case["digest"])
    assert record_id == case["record_id"]
    assert RECORD_ID_RE.fullmatch(record_id)
    # independent inverse: upper-case, re-pad to a multiple of eight, decode
    raw = base64.b32decode(record_id.removeprefix("mem_").upper() + "====")
    assert raw == bytes.fromhex(case["digest"].removeprefix("sha256:"))


@given(st.binary(min_size=32, max_size=32))
def test_record_id_is_lower_case_unpadded_base32(raw: bytes) -> None:
    record_id = record_id_from_digest("sha256:" + raw.hex())
    assert RECORD_ID_RE.fullmatch(record_id)
    assert base64.b32decode(record_id[4:].upper() + "====") == raw


@pytest.mark.parametrize(
    "bad",
    ["", "sha256:" + "0" * 63, "sha256:" + "A" * 64, "0" * 64, "mem_" + "a" * 52, "sha256:" + "0" * 64 + " "],
)
def test_record_id_rejects_malformed_digests(bad: str) -> None:
    with pytest.raises(ValueError, match="digest"):
        record_id_from_digest(bad)


def test_numeric_constants() -> None:
    assert MAX_SAFE_INTEGER == 9_007_199_254_740_991
    assert MAX_CURSOR == 18_446_744_073_709_551_615


# --------------------------------------------------------------------------- instants

MS_PRECISION_DATETIMES = st.datetimes(
    min_value=datetime(1, 1, 1),  # noqa: DTZ001 - hypothesis bounds are naive by design
    max_value=datetime(9999, 12, 31, 23, 59, 59, 999_000),  # noqa: DTZ001
    timezones=st.just(UTC),
).map(lambda moment: moment.replace(microsecond=moment.microsecond // 1000 * 1000))

FIXED_OFFSETS = st.integers(min_value=-(24 * 60 - 1), max_value=24 * 60 - 1).map(
    lambda minutes: timezone(timedelta(minutes=minutes))
)


@pytest.mark.parametrize("case", VECTORS["instants"], ids=lambda case: case["name"])
def test_instant_vectors(case: dict[str, Any]) -> None:
    moment = from_epoch_ms(case["epoch_ms"])
    assert format_instant(moment) == case["instant"]
    assert parse_instant(case["instant"]) == moment
    assert epoch_ms(parse_instant(case["instant"])) == case["epoch_ms"]
    assert is_instant(case["instant"])


@pytest.mark.parametrize("case", VECTORS["instant_formatting"], ids=lambda case: case["name"])
def test_instant_formatting_vectors(case: dict[str, Any]) -> None:
    moment = datetime.fromisoformat(case["datetime"])
    assert moment.tzinfo is not None
    assert format_instant(moment) == case["instant"]


@given(MS_PRECISION_DATETIMES)
@example(datetime(1, 1, 1, tzinfo=UTC))
@example(datetime(999, 12, 31, 23, 59, 59, 999_000, tzinfo=UTC))
@example(datetime(9999, 12, 31, 23, 59, 59, 999_000, tzinfo=UTC))
def test_instant_round_trip_is_exact(moment: datetime) -> None:
    text = format_instant(moment)
    assert re.fullmatch(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{3}Z", text)
    parsed = parse_instant(text)
    assert parsed == moment
    assert parsed.utcoffset() == timedelta(0)
    assert format_instant(parsed) == text


@given(
    st.datetimes(
        min_value=datetime(2, 1, 1),  # noqa: DTZ001
        max_value=datetime(9998, 12, 31),  # noqa: DTZ001
        timezones=FIXED_OFFSETS,
    )
)
def test_instants_with_offsets_format_in_utc(moment: datetime) -> None:
    truncated = moment.replace(microsecond=moment.microsecond // 1000 * 1000)
    parsed = parse_instant(format_instant(moment))
    assert parsed == truncated
    assert parsed.tzinfo is not None
    assert parsed.utcoffset() == timedelta(0)


def test_format_instant_rejects_naive_datetimes() -> None:
    with pytest.raises(ValueError, match="aware"):
        format_instant(datetime(2026, 1, 1))  # noqa: DTZ001


@pytest.mark.parametrize(
    "text",
    [
        "2026-02-30T00:00:00.000Z",
        "2026-02-29T00:00:00.000Z",
        "2026-13-01T00:00:00.000Z",
        "2026-00-01T00:00:00.000Z",
        "2026-01-00T00:00:00.000Z",
        "2026-01-01T24:00:00.000Z",
        "2026-01-01T00:60:00.000Z",
        "2026-01-01T23:59:60.000Z",
        "0000-01-01T00:00:00.000Z",
        "2026-01-01T00:00:00Z",
        "2026-01-01T00:00:00.0Z",
        "2026-01-01T00:00:00.00Z",
        "2026-01-01T00:00:00.0000Z",
        "2026-01-01T00:00:00.000000Z",
        "2026-01-01 00:00:00.000Z",
        "2026-01-01t00:00:00.000Z",
        "2026-01-01T00:00:00.000z",
        "2026-01-01T00:00:00.000",
        "2026-01-01T00:00:00.000+00:00",
        "2026-01-01T00:00:00.000+0000",
        "2026-01-01T02:00:00.000+02:00",
        "2026-01-01T00:00:00.000-05:00",
        "2026-01-01T00:00:00.000Z ",
        " 2026-01-01T00:00:00.000Z",
        "2026-01-01T00:00:00.000Z\n",
        "+2026-01-01T00:00:00.000Z",
        "12026-01-01T00:00:00.000Z",
        "2026-1-01T00:00:00.000Z",
        "\uff12026-01-01T00:00:00.000Z",
        "2026-01-01T00:00:00.\u0661\u0662\u0663Z",
        "2026-01-01",
        "",
    ],
)
def test_parse_instant_rejects(text: str) -> None:
    with pytest.raises(ValueError, match="instant"):
        parse_instant(text)
    assert not is_instant(text)


@pytest.mark.parametrize("value", [None, 0, 1767225600000, b"2026-01-01T00:00:00.000Z"])
def test_parse_instant_rejects_non_strings(value: Any) -> None:
    # outside the typed API: any exception will do, but never a datetime
    with pytest.raises((ValueError, TypeError)):
        parse_instant(cast("str", value))
    assert not is_instant(value)


@given(st.from_regex(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z", fullmatch=True))
def test_parse_instant_accepts_only_canonical_text(text: str) -> None:
    try:
        parsed = parse_instant(text)
    except ValueError:
        assert not is_instant(text)
    else:
        assert format_instant(parsed) == text
        assert text.isascii()


@given(st.integers(min_value=MIN_EPOCH_MS, max_value=MAX_EPOCH_MS))
def test_epoch_ms_and_from_epoch_ms_are_inverse(millis: int) -> None:
    moment = from_epoch_ms(millis)
    assert moment.utcoffset() == timedelta(0)
    assert epoch_ms(moment) == millis
    assert from_epoch_ms(epoch_ms(moment)) == moment


@given(MS_PRECISION_DATETIMES)
def test_from_epoch_ms_inverts_epoch_ms(moment: datetime) -> None:
    assert from_epoch_ms(epoch_ms(moment)) == moment


def test_epoch_ms_known_values() -> None:
    assert epoch_ms(datetime(1970, 1, 1, tzinfo=UTC)) == 0
    assert epoch_ms(datetime(2026, 1, 1, tzinfo=UTC)) == 1_767_225_600_000
    assert epoch_ms(datetime(2026, 1, 1, 2, tzinfo=timezone(timedelta(hours=2)))) == 1_767_225_600_000
    # floor, consistent with format_instant's truncation
    assert epoch_ms(datetime(1969, 12, 31, 23, 59, 59, 999_500, tzinfo=UTC)) == -1
    assert epoch_ms(datetime(1970, 1, 1, 0, 0, 0, 999, tzinfo=UTC)) == 0


def test_epoch_ms_rejects_naive_datetimes() -> None:
    # a naive datetime would be read in the machine's local time zone: not deterministic
    with pytest.raises(ValueError, match="aware"):
        epoch_ms(datetime(2026, 1, 1))  # noqa: DTZ001


# --------------------------------------------------------------------------- cursors


@pytest.mark.parametrize("case", VECTORS["cursors"], ids=lambda case: case["cursor"])
def test_cursor_vectors(case: dict[str, Any]) -> None:
    assert format_cursor(case["position"]) == case["cursor"]
    assert parse_cursor(case["cursor"]) == case["position"]


def test_cursor_bounds() -> None:
    assert parse_cursor("0") == 0
    assert parse_cursor("1") == 1
    assert parse_cursor(str(2**64 - 1)) == 2**64 - 1
    assert format_cursor(0) == "0"
    assert format_cursor(2**64 - 1) == "18446744073709551615"


@pytest.mark.parametrize(
    "text",
    [
        "01",
        "00",
        "-1",
        "-0",
        "+1",
        "1.0",
        "1e3",
        " 1",
        "1 ",
        "1\n",
        "0x1",
        "1_000",
        str(2**64),
        str(2**70),
        "",
        "\uff11",
        "\u0661",
        "abc",
    ],
)
def test_parse_cursor_rejects(text: str) -> None:
    with pytest.raises(ValueError, match="cursor"):
        parse_cursor(text)


@pytest.mark.parametrize("value", [None, 1, b"1"])
def test_parse_cursor_rejects_non_strings(value: Any) -> None:
    # outside the typed API: any exception will do, but never a position
    with pytest.raises((ValueError, TypeError)):
        parse_cursor(cast("str", value))


@pytest.mark.parametrize("position", [-1, 2**64, True, False])
def test_format_cursor_rejects(position: Any) -> None:
    with pytest.raises(ValueError, match="cursor"):
        format_cursor(cast("int", position))


@pytest.mark.parametrize("position", [1.0, 1.5, 0.0])
def test_format_cursor_never_returns_a_non_canonical_cursor(position: Any) -> None:
    # outside the typed API, but a float must not come back as the cursor "1.0"
    with pytest.raises((ValueError, TypeError)):
        format_cursor(cast("int", position))


@given(st.integers(min_value=0, max_value=MAX_CURSOR))
@example(0)
@example(MAX_CURSOR)
def test_cursor_round_trip(position: int) -> None:
    text = format_cursor(position)
    assert re.fullmatch(r"0|[1-9][0-9]*", text)
    assert parse_cursor(text) == position


@given(st.integers(min_value=MAX_CURSOR + 1))
def test_cursors_beyond_64_bits_are_rejected(position: int) -> None:
    with pytest.raises(ValueError, match="cursor"):
        parse_cursor(str(position))
    with pytest.raises(ValueError, match="cursor"):
        format_cursor(position)
