"""Canonical JSON, digests, identifiers, instants and cursors.

This is the only module that turns values into bytes for hashing. Canonical bytes are RFC 8785
(JCS) over NFC-normalised input; a digest is ``"sha256:" + hex(sha256(domain || canonical))``
where every domain is a NUL-terminated constant defined here and nowhere else.

The domain strings keep the ``graphify-memory`` prefix of the reference engine on purpose: they
are interoperability constants, and persisted digests must not change.
"""

from __future__ import annotations

import base64
import enum
import functools
import hashlib
import json
import math
import re
import unicodedata
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any, Final

import rfc8785

__all__ = [
    "MAX_CURSOR",
    "MAX_SAFE_INTEGER",
    "ZERO_DIGEST",
    "CanonicalError",
    "Domain",
    "canonical_array",
    "canonical_bytes",
    "canonical_object",
    "canonical_plain",
    "digest",
    "digest_bytes",
    "epoch_ms",
    "format_cursor",
    "format_instant",
    "from_epoch_ms",
    "has_utf8_form",
    "is_digest",
    "is_instant",
    "nfc",
    "parse_cursor",
    "parse_instant",
    "parse_plain",
    "receipt_digest",
    "record_id_from_digest",
    "sealed_receipt",
]

MAX_SAFE_INTEGER: Final = 2**53 - 1
"""The largest integer every JSON peer represents exactly (ECMAScript ``Number.MAX_SAFE_INTEGER``)."""

MAX_CURSOR: Final = 2**64 - 1
"""Journal cursors are unsigned 64-bit decimal strings."""

ZERO_DIGEST: Final = "sha256:" + "0" * 64
"""The ``previous_event_digest`` of the first journal event of a scope."""

_DIGEST_RE: Final = re.compile(r"sha256:[0-9a-f]{64}")
_INSTANT_RE: Final = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z")
_CURSOR_RE: Final = re.compile(r"0|[1-9][0-9]*")
_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)


class CanonicalError(ValueError):
    """A value cannot be canonicalised (lone surrogate, duplicate key after NFC, unsafe number)."""


class Domain(enum.Enum):
    r"""Digest domains: each value is the exact domain string, NUL terminator included.

    ``PAYLOAD`` and ``RECORD`` are the reference's versioned content domains; the receipt kinds
    shared with the reference hash under ``graphify-memory/<kind>/v1\\0`` and engram-memory's own
    kinds under ``engram-memory/<kind>/v1\\0``.
    """

    PAYLOAD = "graphify-memory/payload/v2\0"
    RECORD = "graphify-memory/record/v2\0"
    # receipt kinds shared with the reference engine (a few are reserved: kept for interoperability,
    # not used here — see docs/contract.md)
    CAPTURE_IDENTITY = "graphify-memory/capture-identity/v1\0"
    PENDING_CONTEXT = "graphify-memory/pending-context/v1\0"
    ASSERTED_TRUST = "graphify-memory/asserted-trust/v1\0"
    ADMISSION_DECISION = "graphify-memory/admission-decision/v1\0"
    ADMISSION_PENDING = "graphify-memory/admission-pending/v1\0"
    POLICY_EVIDENCE = "graphify-memory/policy-evidence/v1\0"
    AUTHORIZATION_RESOURCE = "graphify-memory/authorization-resource/v1\0"
    AUTHORIZATION_ALLOWED = "graphify-memory/authorization-allowed/v1\0"
    AUTHORIZATION_REVALIDATION = "graphify-memory/authorization-revalidation/v1\0"
    JOURNAL_EVENT = "graphify-memory/memory-journal-event/v1\0"
    JOURNAL_INTENT = "graphify-memory/memory-journal-intent/v1\0"
    FOLD_STATE = "graphify-memory/memory-fold-state/v1\0"
    TRANSACTION = "graphify-memory/canonical-transaction/v1\0"
    RECALL_PROFILE_CONFIG = "graphify-memory/recall-profile-config/v1\0"
    RECALL_CANDIDATES = "graphify-memory/recall-candidates/v1\0"
    RECALL_ORDERED = "graphify-memory/recall-ordered/v1\0"
    RECALL_REQUEST = "graphify-memory/recall-request/v1\0"
    RECALL_REDACTION = "graphify-memory/recall-redaction/v1\0"
    RANK_RECEIPT = "graphify-memory/rank-receipt/v1\0"
    RECALL_PACKET = "graphify-memory/recall-packet/v1\0"
    ACCEPTED_SNAPSHOT = "graphify-memory/accepted-snapshot/v1\0"
    ACCEPTED_ELIGIBILITY = "graphify-memory/accepted-eligibility/v1\0"
    REVALIDATION_PACKET = "graphify-memory/revalidation-packet/v1\0"
    KEY_DESTRUCTION = "graphify-memory/key-destruction/v1\0"
    # engram-memory's own receipt kinds (the reference has no equivalent)
    SCOPE_KEY = "engram-memory/scope-key/v1\0"
    OPERATION = "engram-memory/operation/v1\0"
    IDEMPOTENCY_INTENT = "engram-memory/idempotency-intent/v1\0"
    RECORD_CONTEXT = "engram-memory/record-context/v1\0"
    AUTHORIZATION = "engram-memory/authorization/v1\0"
    PAGE_CURSOR = "engram-memory/page-cursor/v1\0"
    READ_RECEIPT = "engram-memory/read-receipt/v1\0"
    GET_PACKET = "engram-memory/get-packet/v1\0"
    SEARCH_RESPONSE = "engram-memory/search-response/v1\0"
    COVERAGE = "engram-memory/coverage/v1\0"

    @property
    def prefix(self) -> bytes:
        """The domain as UTF-8 bytes, ready to be prepended to canonical bytes."""
        return _PREFIXES[self]


_PREFIXES: Final = {domain: domain.value.encode("utf-8") for domain in Domain}


def nfc(text: str) -> str:
    """Return ``text`` in Unicode normalisation form C."""
    return unicodedata.normalize("NFC", text)


def _normalise(value: Any) -> Any:  # noqa: C901 - one branch per JSON type
    """NFC-normalise every string and key, rejecting what JCS peers cannot agree on."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise CanonicalError("lone surrogate in string") from exc
        return nfc(value)
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise CanonicalError("object keys must be strings")
            norm_key = _normalise(key)
            if norm_key in out:
                raise CanonicalError("duplicate object key after NFC normalisation")
            out[norm_key] = _normalise(item)
        return out
    if isinstance(value, list | tuple):
        return [_normalise(item) for item in value]
    if isinstance(value, float) and value.is_integer():
        if value == 0 and str(value).startswith("-"):
            raise CanonicalError("negative zero has no canonical form")
        integral = int(value)
        if abs(integral) > MAX_SAFE_INTEGER:
            raise CanonicalError("integral number beyond the safe integer range")
        return integral
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > MAX_SAFE_INTEGER:
        raise CanonicalError("integer beyond the safe integer range")
    return value


_PLAIN_ENCODER: Final = json.JSONEncoder(
    ensure_ascii=False, check_circular=False, separators=(",", ":"), sort_keys=True, allow_nan=False
)
"""Only given plain values: the scan (or the parser) has already refused cycles by recursing."""


def _one_shot_encoder() -> Callable[[Any], str]:
    """``_PLAIN_ENCODER.encode``, with the C encoder it builds on every call built once instead.

    Falls back to ``_PLAIN_ENCODER.encode`` when the C encoder is missing or does not answer as
    ``encode`` does on a probe value.
    """
    make = getattr(json.encoder, "c_make_encoder", None)
    if make is None:  # pragma: no cover - CPython has it
        return _PLAIN_ENCODER.encode
    probe = {"b": [1, 2.5, 'x\n"\\é', None, False], "a": {"z": True, "": []}}
    try:
        enc = _PLAIN_ENCODER  # the arguments JSONEncoder.iterencode passes (no markers: no cycle check)
        built = make(
            None,
            enc.default,
            json.encoder.encode_basestring,
            enc.indent,
            enc.key_separator,
            enc.item_separator,
            enc.sort_keys,
            enc.skipkeys,
            enc.allow_nan,
        )
        if "".join(built(probe, 0)) != _PLAIN_ENCODER.encode(probe):  # pragma: no cover - checked at import
            return _PLAIN_ENCODER.encode
    except Exception:  # noqa: BLE001 # pragma: no cover - another interpreter's C encoder
        return _PLAIN_ENCODER.encode
    return lambda value: "".join(built(value, 0))


_PLAIN_ENCODE: Final = _one_shot_encoder()
_PLAIN_FLOAT_RANGE: Final = (1e-4, 1e16)
_NOT_PLAIN: Final = 0
_PLAIN: Final = 1
_INTEGRAL: Final = 3
"""Plain once its integral floats are written as integers (what :func:`_normalise` does).

``_PLAIN | _INTEGRAL == _INTEGRAL``: the answer for a container is the bitwise or of its items'.
"""
_STR_ONLY: Final = frozenset({str})
_BULK_STRINGS: Final = 16


def _plain_text(text: str) -> bool:
    """Whether a non-ASCII string is NFC and has no lone surrogate."""
    return has_utf8_form(text) and unicodedata.is_normalized("NFC", text)


def _scan_float(value: float) -> int:
    if value.is_integer():
        if value == 0 and math.copysign(1.0, value) < 0:
            return _NOT_PLAIN
        return _INTEGRAL if -MAX_SAFE_INTEGER <= value <= MAX_SAFE_INTEGER else _NOT_PLAIN
    low, high = _PLAIN_FLOAT_RANGE
    return _PLAIN if low <= abs(value) < high else _NOT_PLAIN


def _scan_leaf(item: Any, kind: type) -> int:
    """:func:`_scan` of a value that is not a ``str``, ``int`` or ``None``/``bool`` (checked inline)."""
    if kind is dict:
        return _scan_object(item)
    if kind is list or kind is tuple:
        return _scan_items(item)
    if kind is float:
        return _scan_float(item)
    return _NOT_PLAIN


def _scan_object(value: dict[Any, Any]) -> int:
    # The leaf checks here and in _scan_items are the same, written out twice on purpose: this is
    # the inner loop of every canonicalisation, and a call per member would cost more than the check.
    state = _PLAIN
    for key, item in value.items():
        if type(key) is not str or not key.isascii():
            return _NOT_PLAIN
        kind = type(item)
        if kind is str:
            if item.isascii() or _plain_text(item):
                continue
            return _NOT_PLAIN
        if kind is int:
            if -MAX_SAFE_INTEGER <= item <= MAX_SAFE_INTEGER:
                continue
            return _NOT_PLAIN
        if item is None or item is True or item is False:
            continue
        inner = _scan_leaf(item, kind)
        if inner == _NOT_PLAIN:
            return _NOT_PLAIN
        state |= inner
    return state


def _scan_items(items: list[Any] | tuple[Any, ...]) -> int:
    if len(items) > _BULK_STRINGS and set(map(type, items)) == _STR_ONLY and "".join(items).isascii():
        return _PLAIN
    state = _PLAIN
    for item in items:
        kind = type(item)
        if kind is str:
            if item.isascii() or _plain_text(item):
                continue
            return _NOT_PLAIN
        if kind is int:
            if -MAX_SAFE_INTEGER <= item <= MAX_SAFE_INTEGER:
                continue
            return _NOT_PLAIN
        if item is None or item is True or item is False:
            continue
        inner = _scan_leaf(item, kind)
        if inner == _NOT_PLAIN:
            return _NOT_PLAIN
        state |= inner
    return state


def _scan(value: Any) -> int:
    """Whether ``json`` writes ``value`` exactly as RFC 8785 would (so the fast path is exact).

    ``_PLAIN``: ``None``, booleans, safe integers, non-integral floats whose shortest form has no
    exponent in both languages (1e-4 ≤ |x| < 1e16), NFC strings without lone surrogates, lists
    and tuples of plain values, and objects with ASCII ``str`` keys (ASCII sorts the same by code
    point and by UTF-16 code unit) and plain values. ``_INTEGRAL``: the same, but with integral
    floats (not ``-0``) within the safe integer range, which RFC 8785 writes as integers.
    Otherwise ``_NOT_PLAIN``.
    """
    kind = type(value)
    if kind is str:
        return _PLAIN if value.isascii() or _plain_text(value) else _NOT_PLAIN
    if kind is int:
        return _PLAIN if -MAX_SAFE_INTEGER <= value <= MAX_SAFE_INTEGER else _NOT_PLAIN
    if value is None or value is True or value is False:
        return _PLAIN
    return _scan_leaf(value, kind)


def _is_plain(value: Any) -> bool:
    """Whether :func:`canonical_bytes` takes the fast path for ``value``."""
    return _scan(value) != _NOT_PLAIN


def _integral(value: Any) -> Any:
    """``value`` with its integral floats as integers (only called on ``_INTEGRAL`` values)."""
    kind = type(value)
    if kind is float and value.is_integer():
        return int(value)
    if kind is dict:
        return {key: _integral(item) for key, item in value.items()}
    if kind is list or kind is tuple:
        return [_integral(item) for item in value]
    return value


def has_utf8_form(text: str) -> bool:
    """Whether ``text`` encodes to UTF-8: it holds no lone surrogate (as ``surrogateescape`` leaves)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def canonical_bytes(value: Any) -> bytes:
    """Return the RFC 8785 bytes of ``value`` after NFC normalisation.

    Integral floats serialise as integers (``1.0`` → ``1``), object keys sort by UTF-16 code
    units, and strings and keys are NFC-normalised first. Values that the standard ``json``
    encoder writes in canonical form (once integral floats are integers) take a fast path with
    identical output.

    Raises:
        CanonicalError: a lone surrogate, a duplicate key after NFC, ``-0``, NaN or infinity, or
            an integer outside ±(2**53 − 1).
    """
    state = _scan(value)
    if state == _PLAIN:
        return _PLAIN_ENCODE(value).encode("utf-8")
    if state == _INTEGRAL:
        return _PLAIN_ENCODE(_integral(value)).encode("utf-8")
    try:
        return rfc8785.dumps(_normalise(value))
    except rfc8785.CanonicalizationError as exc:
        raise CanonicalError("value has no canonical JSON form") from exc


class _NotPlainError(ValueError):
    """A parsed number that the fast path does not write as RFC 8785 does."""


def _plain_int(text: str) -> int:
    value = int(text)
    if not -MAX_SAFE_INTEGER <= value <= MAX_SAFE_INTEGER:
        raise _NotPlainError(text)
    return value


def _plain_float(text: str) -> float:
    value = float(text)
    if _scan_float(value) != _PLAIN:
        raise _NotPlainError(text)
    return value


def _no_constant(text: str) -> Any:
    raise _NotPlainError(text)


_PLAIN_DECODER: Final = json.JSONDecoder(parse_int=_plain_int, parse_float=_plain_float, parse_constant=_no_constant)


def parse_plain(data: bytes) -> tuple[Any, bool]:
    r"""``json.loads(data)``, and whether the value is known plain.

    Known plain when ``data`` is ASCII without ``\u`` escapes (so every string and key is ASCII)
    and every number is a safe integer or a plain non-integral float: then
    :func:`canonical_plain` of the value, or of any part of it, equals :func:`canonical_bytes`.

    Raises:
        ValueError: ``data`` is not JSON (as ``json.loads``).
    """
    if data.isascii() and b"\\u" not in data:
        try:
            return _PLAIN_DECODER.decode(data.decode("ascii")), True
        except ValueError:
            pass  # not plain, or not JSON: json.loads decides
    return json.loads(data), False


def canonical_plain(value: Any) -> bytes:
    """:func:`canonical_bytes` of a value :func:`parse_plain` reported plain (or of a part of it).

    Skips the plain-value scan; only for values known plain.
    """
    return _PLAIN_ENCODE(value).encode("utf-8")


@functools.lru_cache(maxsize=1024)
def _member_prefix(key: str) -> bytes:
    return canonical_bytes(key) + b":"


def canonical_object(members: Mapping[str, bytes]) -> bytes:
    """The RFC 8785 bytes of an object from the canonical bytes of its member values.

    Equal to ``canonical_bytes`` of the object when every ``members[key]`` is ``canonical_bytes``
    of that member's value. Keys must be ASCII (they sort alike by code point and UTF-16 unit).

    Raises:
        CanonicalError: a key that is not an ASCII ``str``.
    """
    if members and (set(map(type, members)) != _STR_ONLY or not "".join(members).isascii()):
        raise CanonicalError("object keys must be ASCII strings")
    return b"{" + b",".join([_member_prefix(key) + members[key] for key in sorted(members)]) + b"}"


def canonical_array(items: Iterable[bytes]) -> bytes:
    """The RFC 8785 bytes of an array from the canonical bytes of its items."""
    return b"[" + b",".join(items) + b"]"


def digest_bytes(domain: Domain, canonical: bytes) -> str:
    """Digest bytes that are already canonical (lets callers canonicalise a value once)."""
    hasher = hashlib.sha256(_PREFIXES[domain])
    hasher.update(canonical)
    return "sha256:" + hasher.hexdigest()


def digest(domain: Domain, value: Any) -> str:
    """Return ``"sha256:" + hex(sha256(domain || canonical_bytes(value)))``."""
    return digest_bytes(domain, canonical_bytes(value))


def receipt_digest(domain: Domain, body: dict[str, Any], field: str = "receipt_digest") -> str:
    """Digest a receipt over every key except its own digest ``field``."""
    return digest(domain, {key: item for key, item in body.items() if key != field})


def sealed_receipt(domain: Domain, body: dict[str, Any], field: str = "receipt_digest") -> tuple[str, bytes]:
    """:func:`receipt_digest` of ``body``, and the canonical bytes of ``body`` with it as ``field``.

    Canonicalises once: ``body`` with a zero-digest placeholder as ``field``, whose member is cut
    out for the digest and then replaced by the real one (when it occurs once; else twice).

    Raises:
        CanonicalError: ``body`` has no canonical form.
    """
    others = {key: item for key, item in body.items() if key != field}
    placeholder = _member_prefix(field) + canonical_bytes(ZERO_DIGEST)
    with_placeholder = canonical_bytes({**others, field: ZERO_DIGEST})
    start = with_placeholder.find(placeholder)
    if not field.isascii() or start < 0 or with_placeholder.find(placeholder, start + 1) >= 0:
        value = digest(domain, others)
        return value, canonical_bytes({**others, field: value})
    end = start + len(placeholder)
    head, tail = with_placeholder[:start], with_placeholder[end:]
    if head.endswith(b","):
        value = digest_bytes(domain, head[:-1] + tail)
    else:
        value = digest_bytes(domain, head + tail[1:] if tail.startswith(b",") else head + tail)
    return value, head + _member_prefix(field) + canonical_bytes(value) + tail


def is_digest(value: object) -> bool:
    """Whether ``value`` is ``sha256:`` followed by 64 lower-case hex digits."""
    return isinstance(value, str) and _DIGEST_RE.fullmatch(value) is not None


def record_id_from_digest(record_digest: str) -> str:
    """Return ``"mem_"`` + the lower-case, unpadded base32 of the 32 digest bytes.

    Raises:
        ValueError: ``record_digest`` is not a well-formed digest.
    """
    if not is_digest(record_digest):
        raise ValueError("not a sha256 digest")
    raw = bytes.fromhex(record_digest.removeprefix("sha256:"))
    return "mem_" + base64.b32encode(raw).decode("ascii").rstrip("=").lower()


def format_instant(moment: datetime) -> str:
    """Format an aware datetime as ``YYYY-MM-DDTHH:mm:ss.sssZ`` (UTC, milliseconds, truncated).

    Raises:
        ValueError: ``moment`` is naive.
    """
    if moment.tzinfo is None or moment.utcoffset() is None:
        raise ValueError("instants must be timezone-aware")
    u = moment.astimezone(UTC)
    return (
        f"{u.year:04d}-{u.month:02d}-{u.day:02d}T{u.hour:02d}:{u.minute:02d}:{u.second:02d}."
        f"{u.microsecond // 1000:03d}Z"
    )


def parse_instant(text: str) -> datetime:
    """Parse a canonical instant; the inverse of :func:`format_instant`.

    Raises:
        ValueError: the text is not exactly ``YYYY-MM-DDTHH:mm:ss.sssZ`` or names no real moment
            (Feb 30, hour 24, year 0000).
    """
    if type(text) is not str or _INSTANT_RE.fullmatch(text) is None:
        raise ValueError("not a canonical instant")
    try:
        parsed = datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC)
    except ValueError as exc:
        raise ValueError("not a canonical instant") from exc
    if format_instant(parsed) != text:
        raise ValueError("not a canonical instant")
    return parsed


def is_instant(text: object) -> bool:
    """Whether ``text`` is a canonical instant string."""
    if not isinstance(text, str):
        return False
    try:
        parse_instant(text)
    except ValueError:
        return False
    return True


def epoch_ms(moment: datetime) -> int:
    """Milliseconds since the Unix epoch of an aware datetime (floor).

    Raises:
        ValueError: ``moment`` is naive.
    """
    if moment.tzinfo is None or moment.utcoffset() is None:
        raise ValueError("instants must be timezone-aware")
    delta = moment.astimezone(UTC) - _EPOCH
    return delta // timedelta(milliseconds=1)


def from_epoch_ms(millis: int) -> datetime:
    """The aware UTC datetime of ``millis`` since the Unix epoch."""
    return _EPOCH + timedelta(milliseconds=millis)


def format_cursor(position: int) -> str:
    """Format a journal position as a canonical decimal cursor.

    Raises:
        ValueError: outside ``0 .. 2**64 − 1``.
    """
    if type(position) is not int or not 0 <= position <= MAX_CURSOR:
        raise ValueError("cursor out of range")
    return str(position)


def parse_cursor(text: str) -> int:
    """Parse a canonical decimal cursor (no sign, no leading zeros, at most 2**64 − 1).

    Raises:
        ValueError: the text is not a canonical cursor.
    """
    if type(text) is not str or _CURSOR_RE.fullmatch(text) is None:
        raise ValueError("not a canonical cursor")
    value = int(text)
    if value > MAX_CURSOR:
        raise ValueError("cursor out of range")
    return value
