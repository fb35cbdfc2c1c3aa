"""Bounds of the founding contract and the attrs validators that enforce them.

Every validator raises :class:`~engram_memory.errors.EngramError` with a JSON pointer relative to
the object being built (``/field``); the wire parser prefixes the path of the enclosing objects.
Byte bounds are UTF-8 bytes, never characters.
"""

from __future__ import annotations

import itertools
import re
import typing
from collections.abc import Callable, Sequence
from typing import Any, Final

import attrs

from engram_memory.canonical import MAX_SAFE_INTEGER, is_digest, is_instant, nfc
from engram_memory.errors import EngramError, ErrorCode

__all__ = [
    "ATTESTATION_MAX_BYTES",
    "COMPONENTS_MAX",
    "FAMILY_REFS_MAX",
    "IDEMPOTENCY_KEY_BYTES",
    "ITEM_BOUNDS",
    "LIMIT_DEFAULT",
    "LIMIT_RANGE",
    "LIST_MAX",
    "MAX_ARGUMENT_BYTES",
    "OPAQUE_BYTES",
    "PACKET_BYTES_DEFAULT",
    "PACKET_BYTES_RANGE",
    "QUERY_BYTES",
    "RECORD_ID_PATTERN",
    "TEXT_BYTES",
    "digest_field",
    "each",
    "free_text",
    "idempotency_key",
    "instant",
    "int_range",
    "item_bounds",
    "item_count",
    "literal_member",
    "nfc_text",
    "one_of",
    "opaque_ref",
    "record_id",
    "safe_int",
    "sorted_unique",
    "text_bytes",
    "too_many_items",
    "unique_items",
    "verbatim_ref",
]

MAX_ARGUMENT_BYTES: Final = 1_048_576
"""The serialised argument object, in UTF-8 bytes."""
OPAQUE_BYTES: Final = (1, 512)
IDEMPOTENCY_KEY_BYTES: Final = (16, 256)
TEXT_BYTES: Final = (1, 65_536)
QUERY_BYTES: Final = (1, 8_192)
ATTESTATION_MAX_BYTES: Final = 4_096
LIMIT_RANGE: Final = (1, 50)
LIMIT_DEFAULT: Final = 10
PACKET_BYTES_RANGE: Final = (4_096, 1_048_576)
PACKET_BYTES_DEFAULT: Final = 65_536
COMPONENTS_MAX: Final = 64
LIST_MAX: Final = 256
"""Citations per payload, citation ids per component and per evidence bundle."""
FAMILY_REFS_MAX: Final = 64
RECORD_ID_PATTERN: Final = r"^mem_[a-z2-7]+$"
_RECORD_ID_RE: Final = re.compile(RECORD_ID_PATTERN)

Validator = Callable[[Any, "attrs.Attribute[Any]", Any], None]


def _fail(attribute: attrs.Attribute[Any], detail: str, code: ErrorCode = ErrorCode.INVALID_SCHEMA) -> EngramError:
    return EngramError(code, pointer="/" + attribute.name, detail=detail)


def text_bytes(attribute: attrs.Attribute[Any], value: Any) -> bytes:
    """The UTF-8 bytes of a string field's value.

    The JSON parser refuses other types and lone surrogates before a field is built; this is the
    same refusal for arguments built directly from Python (the typed API).

    Raises:
        EngramError: ``INVALID_SCHEMA`` at ``/field`` if ``value`` is not a ``str`` or holds a
            lone surrogate.
    """
    if type(value) is not str:
        raise _fail(attribute, "expected a string")
    try:
        return value.encode("utf-8")
    except UnicodeEncodeError:
        raise _fail(attribute, "string holds a lone surrogate") from None


def _absent(attribute: attrs.Attribute[Any], value: Any) -> bool:
    """Whether an optional field is left out (``None``); ``None`` for a required field is ``INVALID_SCHEMA``."""
    if value is not None:
        return False
    if attribute.default is attrs.NOTHING:
        raise _fail(attribute, "a required field is missing")
    return True


def nfc_text(value: Any) -> Any:
    """Converter: a string in NFC; any other value unchanged, for the field's validator to refuse."""
    return nfc(value) if type(value) is str else value


def _byte_bounds(low: int, high: int, *, require_nfc: bool) -> Validator:
    def check(_inst: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
        if _absent(attribute, value):
            return
        encoded = text_bytes(attribute, value)
        if require_nfc and nfc(value) != value:
            raise _fail(attribute, "string is not NFC")
        size = len(encoded) if require_nfc else len(nfc(value).encode("utf-8"))
        if not low <= size <= high:
            raise _fail(attribute, f"string is {size} UTF-8 bytes, allowed {low}..{high}")

    return check


opaque_ref: Final = _byte_bounds(*OPAQUE_BYTES, require_nfc=True)
"""An opaque ref: already NFC, 1..512 UTF-8 bytes."""
idempotency_key: Final = _byte_bounds(*IDEMPOTENCY_KEY_BYTES, require_nfc=True)
"""An idempotency key: already NFC, 16..256 UTF-8 bytes."""


def verbatim_ref(_inst: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    """A value copied exactly as returned (candidate_id, page_cursor): 1..512 UTF-8 bytes."""
    if _absent(attribute, value):
        return
    if not OPAQUE_BYTES[0] <= len(text_bytes(attribute, value)) <= OPAQUE_BYTES[1]:
        raise _fail(attribute, "copied value has an impossible length")


def free_text(low: int, high: int) -> Validator:
    """Free text (query, component text): NFC-normalised, then ``low..high`` UTF-8 bytes."""
    return _byte_bounds(low, high, require_nfc=False)


def record_id(_inst: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    """A record id as returned: ``^mem_[a-z2-7]+$``, at most 512 bytes."""
    _absent(attribute, value)
    text_bytes(attribute, value)
    if _RECORD_ID_RE.fullmatch(value) is None or len(value) > OPAQUE_BYTES[1]:
        raise _fail(attribute, "record_id does not match ^mem_[a-z2-7]+$")


def digest_field(_inst: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    """``sha256:`` + 64 lower-case hex digits, else ``INVALID_DIGEST`` (``INVALID_SCHEMA`` if not a string)."""
    _absent(attribute, value)
    text_bytes(attribute, value)
    if not is_digest(value):
        raise _fail(attribute, "malformed digest", ErrorCode.INVALID_DIGEST)


def instant(_inst: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    """A canonical ``YYYY-MM-DDTHH:mm:ss.sssZ`` instant that round-trips exactly."""
    if _absent(attribute, value):
        return
    text_bytes(attribute, value)
    if not is_instant(value):
        raise _fail(attribute, "not a canonical instant")


def _require_int(attribute: attrs.Attribute[Any], value: Any) -> None:
    if type(value) is not int:  # a bool is not an integer, nor is 2.0 once past the parser
        raise _fail(attribute, "expected an integer")


def safe_int(_inst: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    """An ``int`` (not a ``bool``) within ±(2**53 − 1)."""
    _require_int(attribute, value)
    if abs(value) > MAX_SAFE_INTEGER:
        raise _fail(attribute, "integer outside the safe range")


def int_range(low: int, high: int) -> Validator:
    """An ``int`` (not a ``bool``) within ``low..high``."""

    def check(_inst: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
        _require_int(attribute, value)
        if not low <= value <= high:
            raise _fail(attribute, f"integer outside {low}..{high}")

    return check


def literal_member(options: Sequence[Any], value: Any) -> bool:
    """Whether ``value`` is one of ``options`` and of the same type (``True`` is not ``1``)."""
    return any(type(value) is type(option) and value == option for option in options)


def one_of(literal: Any) -> Validator:
    """One of the constants of ``literal`` (a ``Literal[...]`` type: the field's own annotation)."""
    options = typing.get_args(literal)

    def check(_inst: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
        if not literal_member(options, value):
            raise _fail(attribute, "value is not one of the allowed constants")

    return check


def as_items(value: Any) -> Any:
    """Converter: a ``list`` or ``tuple`` as a tuple; any other value unchanged, for the validator to refuse.

    (``tuple`` itself would turn a string into its characters and fail on a number.)
    """
    return tuple(value) if type(value) in {list, tuple} else value


def items_of(item_type: type | None = None) -> Validator:
    """An array (a tuple once converted by :func:`as_items`), each item an ``item_type`` if given."""

    def check(_inst: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
        if type(value) is not tuple:
            raise _fail(attribute, "expected an array")
        if item_type is not None:
            for index, item in enumerate(value):
                if not isinstance(item, item_type):
                    raise EngramError(
                        ErrorCode.INVALID_SCHEMA, pointer=f"/{attribute.name}/{index}", detail="expected an object"
                    )

    return check


def instance(cls: type, *, optional: bool = False) -> Validator:
    """An instance of ``cls``: the nested arguments of the typed API; ``None`` too if ``optional``."""

    def check(_inst: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
        if value is None and optional:
            return
        if not isinstance(value, cls):
            raise _fail(attribute, "expected an object" if value is not None else "a required field is missing")

    return check


ITEM_BOUNDS: Final = "engram_memory.wire.item_bounds"
"""Field metadata key: an array field's ``(fewest, most)`` items (see :func:`item_bounds`)."""


def item_bounds(low: int, high: int) -> dict[str, tuple[int, int]]:
    """The metadata of an array field of ``low..high`` items, which :func:`item_count` checks.

    The JSON converter reads it too, and refuses an array over ``high`` items before it
    structures any of them: an argument under 1 MiB can hold hundreds of thousands of items,
    each costly to refuse one by one.
    """
    return {ITEM_BOUNDS: (low, high)}


def too_many_items(count: int, high: int) -> str:
    """The detail of an array over its bound (the converter's and :func:`item_count`'s)."""
    return f"list has {count} items, allowed at most {high}"


def item_count(_inst: Any, attribute: attrs.Attribute[Any], value: Sequence[Any]) -> None:
    """An array within its field's :func:`item_bounds`."""
    low, high = attribute.metadata[ITEM_BOUNDS]
    if len(value) > high:
        raise _fail(attribute, too_many_items(len(value), high))
    if len(value) < low:
        raise _fail(attribute, f"list has {len(value)} items, allowed at least {low}")


def each(item_validator: Validator) -> Validator:
    """Apply ``item_validator`` to every item, reporting the item's own pointer (``/field/3``)."""

    def check(inst: Any, attribute: attrs.Attribute[Any], value: Sequence[Any]) -> None:
        for index, item in enumerate(value):
            try:
                item_validator(inst, attribute, item)
            except EngramError as exc:
                raise EngramError(exc.code, pointer=f"/{attribute.name}/{index}", detail="item invalid") from exc

    return check


def unique_items(_inst: Any, attribute: attrs.Attribute[Any], value: Sequence[Any]) -> None:
    """No item appears twice."""
    if len(set(value)) != len(value):
        raise _fail(attribute, "items are not unique")


def sorted_unique(_inst: Any, attribute: attrs.Attribute[Any], value: Sequence[str]) -> None:
    """Strictly ascending in UTF-16 code-unit order (the order JCS peers compare strings in)."""
    keys = [item.encode("utf-16-be") for item in value]
    if any(a >= b for a, b in itertools.pairwise(keys)):
        raise _fail(attribute, "items are not strictly ascending")
