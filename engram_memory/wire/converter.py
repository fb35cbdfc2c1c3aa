"""The one strict cattrs converter, and the JSON-level parser built on it.

:func:`make_converter` builds a fresh converter (never cattrs' global one) that:

* forbids extra keys on every object, nested ones included;
* checks exact JSON types: ``"10"`` and ``true`` are not integers, ``1`` is not a string; an
  integral number written ``10.0`` *is* the integer 10 (JSON has one number type, and RFC 8785
  writes both as ``10``), but ``-0`` is refused;
* lets optional fields be absent but never ``null``;
* requires arrays for sequences and objects for nested classes;
* unstructures with optional fields omitted when absent, defaults filled in.

:func:`parse_args` adds the 1,048,576-byte cap and the nesting bound, and turns every cattrs
failure into one :class:`~engram_memory.errors.EngramError` with the JSON pointer of the first
offending field.
"""

from __future__ import annotations

import json
import math
import types
import typing
from collections.abc import Callable, Mapping
from typing import Any, Final, Literal, TypeVar, cast

import attrs
import cattrs
from cattrs.errors import AttributeValidationNote, ForbiddenExtraKeysError, IterableValidationNote
from cattrs.gen import make_dict_structure_fn, make_dict_unstructure_fn, override

from engram_memory.canonical import is_digest
from engram_memory.errors import EngramError, ErrorCode
from engram_memory.wire import args as a
from engram_memory.wire.limits import ITEM_BOUNDS, MAX_ARGUMENT_BYTES, literal_member, too_many_items

__all__ = [
    "ARGS_BY_TOOL",
    "MAX_NESTING",
    "MAX_RAW_JSON_BYTES",
    "TOOL_NAMES",
    "ToolArgs",
    "check_argument_bytes",
    "make_converter",
    "parse_args",
    "parse_json",
    "unstructure_args",
]

T = TypeVar("T")

ToolArgs = a.SearchArgs | a.GetArgs | a.CaptureArgs | a.RequestAdmissionArgs | a.WithdrawArgs | a.ForgetArgs

ARGS_BY_TOOL: Final[Mapping[str, type[Any]]] = types.MappingProxyType(
    {
        "engram_memory_search": a.SearchArgs,
        "engram_memory_get": a.GetArgs,
        "engram_memory_capture": a.CaptureArgs,
        "engram_memory_request_admission": a.RequestAdmissionArgs,
        "engram_memory_withdraw": a.WithdrawArgs,
        "engram_memory_forget": a.ForgetArgs,
    }
)
"""The six tools, in contract order, and their typed argument classes."""

TOOL_NAMES: Final = tuple(ARGS_BY_TOOL)


class _WireTypeError(TypeError):
    """A JSON value of the wrong type (the message names the expected JSON type)."""


def _exact_str(value: Any, _: type) -> str:
    if type(value) is not str:
        raise _WireTypeError("expected a string")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise _WireTypeError("lone surrogate in string") from exc
    return value


def _exact_int(value: Any, _: type) -> int:
    if type(value) is int:
        return value
    if type(value) is float and value.is_integer():
        if value == 0 and math.copysign(1.0, value) < 0:
            raise _WireTypeError("negative zero is not an integer")
        return int(value)
    raise _WireTypeError("expected an integer")


def _exact_bool(value: Any, _: type) -> bool:
    if type(value) is not bool:
        raise _WireTypeError("expected a boolean")
    return value


def _exact_float(value: Any, _: type) -> float:
    if type(value) not in (int, float):
        raise _WireTypeError("expected a number")
    return float(value)


def _is_optional(tp: Any) -> bool:
    origin = typing.get_origin(tp)
    return origin in (typing.Union, types.UnionType) and type(None) in typing.get_args(tp)


def _is_literal(tp: Any) -> bool:
    return typing.get_origin(tp) is Literal


def _is_homogeneous_tuple(tp: Any) -> bool:
    targs = typing.get_args(tp)
    return typing.get_origin(tp) is tuple and len(targs) == 2 and targs[1] is Ellipsis  # noqa: PLR2004


def make_converter() -> cattrs.Converter:  # noqa: C901 - one closure per registered hook
    """Build the strict converter used for every tool argument and result.

    A fresh instance each call; register nothing on it after the first ``structure`` (generated
    hooks are cached).
    """
    conv = cattrs.Converter(forbid_extra_keys=True, detailed_validation=True)
    conv.register_structure_hook(str, _exact_str)
    conv.register_structure_hook(int, _exact_int)
    conv.register_structure_hook(bool, _exact_bool)
    conv.register_structure_hook(float, _exact_float)

    def never_null(tp: Any) -> Callable[[Any, Any], Any]:
        (inner,) = (t for t in typing.get_args(tp) if t is not type(None))

        def hook(value: Any, _: Any) -> Any:
            if value is None:
                raise _WireTypeError("null is not allowed; omit the field instead")
            return conv.structure(value, inner)

        return hook

    def literal(tp: Any) -> Callable[[Any, Any], Any]:
        allowed = typing.get_args(tp)

        def hook(value: Any, _: Any) -> Any:
            if type(value) is float and any(type(option) is int for option in allowed):
                value = _exact_int(value, int)  # JSON may write the integer 2 as 2.0
            if not literal_member(allowed, value):
                raise _WireTypeError("value is not one of the allowed constants")
            return value

        return hook

    def strict_tuple(tp: Any) -> Callable[[Any, Any], Any]:
        (item_type, _) = typing.get_args(tp)

        def hook(value: Any, _: Any) -> Any:
            """The items in order; the first that fails ends it (the report names one leaf anyway).

            Going on would keep one exception, with its traceback, per failing item: with
            thousands of nested items, seconds and megabytes for the same answer.
            """
            if type(value) is not list:
                raise _WireTypeError("expected an array")
            items: list[Any] = []
            for index, item in enumerate(value):
                try:
                    items.append(conv.structure(item, item_type))
                except Exception as exc:  # noqa: BLE001 - any failure of the item, reported as its own
                    exc.__notes__ = [
                        *getattr(exc, "__notes__", []),
                        IterableValidationNote(f"@ index {index}", index, item_type),
                    ]
                    raise cattrs.IterableValidationError("array item invalid", [exc], tp) from None
            return tuple(items)

        return hook

    def strict_class(cl: type) -> Callable[[Any, Any], Any]:
        generated: Callable[[Any, Any], Any] = make_dict_structure_fn(cl, conv)
        most = [
            (field.name, field.metadata[ITEM_BOUNDS][1]) for field in attrs.fields(cl) if ITEM_BOUNDS in field.metadata
        ]

        def hook(value: Any, _: Any) -> Any:
            if type(value) is not dict:
                raise _WireTypeError("expected an object")
            for name, high in most:  # before any item is structured: refusing each one costs time and memory
                items = value.get(name)
                if type(items) is list and len(items) > high:
                    raise EngramError(
                        ErrorCode.INVALID_SCHEMA, pointer="/" + name, detail=too_many_items(len(items), high)
                    )
            return generated(value, cl)

        return hook

    def omit_absent(cl: type) -> Callable[[Any], dict[str, Any]]:
        overrides: dict[str, Any] = {
            field.name: override(omit_if_default=True) for field in attrs.fields(cl) if field.default is None
        }
        return make_dict_unstructure_fn(cl, conv, **overrides)

    conv.register_structure_hook_factory(_is_optional, never_null)
    conv.register_structure_hook_factory(_is_literal, literal)
    conv.register_structure_hook_factory(_is_homogeneous_tuple, strict_tuple)
    conv.register_structure_hook_factory(attrs.has, strict_class)
    conv.register_unstructure_hook_factory(attrs.has, omit_absent)
    return conv


_CONVERTER: Final = make_converter()


def _escape(segment: str) -> str:
    return segment.replace("~", "~0").replace("/", "~1")


def _locate(exc: BaseException, path: tuple[str, ...] = ()) -> tuple[BaseException, str]:
    """Find the first leaf failure of a cattrs exception group and its JSON pointer."""
    if isinstance(exc, BaseExceptionGroup):
        leaves = [_locate(sub, path + _segment(sub)) for sub in exc.exceptions]
        for leaf, pointer in leaves:
            if not (isinstance(leaf, EngramError) and leaf.code is ErrorCode.INVALID_DIGEST):
                return leaf, pointer
        return leaves[0]
    if isinstance(exc, ForbiddenExtraKeysError):
        extra = min(exc.extra_fields)
        return exc, "".join("/" + _escape(p) for p in (*path, extra))
    base = "".join("/" + _escape(p) for p in path)
    if isinstance(exc, EngramError) and exc.pointer:
        return exc, base + exc.pointer
    return exc, base


def _segment(exc: BaseException) -> tuple[str, ...]:
    for note in getattr(exc, "__notes__", ()):
        if isinstance(note, AttributeValidationNote):
            return (note.name,)
        if isinstance(note, IterableValidationNote):
            return (str(note.index),)
    return ()


MAX_NESTING: Final = 32
"""Arrays and objects nest at most this deep (the deepest argument schema nests 5 levels)."""
_CONTAINERS: Final = (dict, list, tuple)


def _shape_problem(value: Any) -> str | None:
    """Nesting deeper than :data:`MAX_NESTING`, or a non-string object key; walked without recursion."""
    pending: list[tuple[Any, int]] = [(value, 1)] if isinstance(value, _CONTAINERS) else []
    while pending:
        item, depth = pending.pop()
        if depth > MAX_NESTING:
            return "arguments nested too deeply"
        if isinstance(item, dict):
            if not all(type(key) is str for key in item):
                return "object key is not a string"
            item = item.values()
        pending.extend((child, depth + 1) for child in item if isinstance(child, _CONTAINERS))
    return None


def _compact_json(raw: Any) -> str | None:
    """The compact JSON text of ``raw`` as given (not normalised); ``None`` if it is not JSON."""
    try:
        return json.dumps(raw, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError):
        return None  # structuring reports the precise problem


def _serialised_size(raw: Any) -> int | None:
    """UTF-8 bytes of the compact JSON text of ``raw`` as given (not normalised); ``None`` if not JSON."""
    text = _compact_json(raw)
    return None if text is None else len(text.encode("utf-8", "surrogatepass"))


def _check_root_bounds(raw: Any) -> bool:
    """Refuse arguments too deep, with a non-string key, or over the byte bound; whether their text is ASCII."""
    problem = _shape_problem(raw)
    if problem is not None:
        raise EngramError(ErrorCode.INVALID_SCHEMA, pointer="", detail=problem)
    text = _compact_json(raw)
    if text is not None and len(text.encode("utf-8", "surrogatepass")) > MAX_ARGUMENT_BYTES:
        raise EngramError(ErrorCode.INVALID_SCHEMA, pointer="", detail="arguments over 1 MiB")
    return text is None or text.isascii()


def parse_args(cls: type[T], raw: Any) -> T:
    """Structure JSON arguments (already parsed) into ``cls`` with the strict converter.

    Raises:
        EngramError: ``INVALID_SCHEMA`` (or ``INVALID_DIGEST`` when the only problem is a
            malformed digest) with ``pointer`` set to the first offending field. Arguments whose
            compact JSON serialisation exceeds 1,048,576 UTF-8 bytes, as given or once their
            texts are in NFC (what :func:`check_argument_bytes` measures for the typed API), that
            nest deeper than :data:`MAX_NESTING`, or that have a non-string object key are
            ``INVALID_SCHEMA`` at the root.
    """
    if type(raw) is not dict:
        raise EngramError(ErrorCode.INVALID_SCHEMA, pointer="", detail="arguments must be an object")
    ascii_text = _check_root_bounds(raw)
    try:
        parsed = _CONVERTER.structure(raw, cls)
    except (EngramError, cattrs.BaseValidationError, TypeError, ValueError, KeyError) as exc:
        error = _structuring_error(exc)
        if error.code is ErrorCode.INVALID_DIGEST:
            error = _schema_error_behind_digests(cls, raw) or error
        raise error from exc
    if not ascii_text:  # NFC can lengthen text (up to 3x): the normalised arguments are bound too
        check_argument_bytes(cast("ToolArgs", parsed))
    return parsed


def _structuring_error(exc: Exception) -> EngramError:
    """The ``EngramError`` a structuring failure reports: its first leaf, schema errors before digest ones."""
    if isinstance(exc, EngramError):
        return EngramError(exc.code, pointer=exc.pointer, detail=str(exc))
    leaf, pointer = _locate(exc)
    if isinstance(leaf, EngramError):
        return EngramError(leaf.code, pointer=pointer, detail="; ".join(getattr(leaf, "__notes__", [])))
    return EngramError(ErrorCode.INVALID_SCHEMA, pointer=pointer, detail=f"{type(leaf).__name__}: {leaf}")


_DIGEST_MEMBERS: Final = frozenset({"content_digest", "evidence_digest"})
_WELL_FORMED_DIGEST: Final = "sha256:" + "0" * 64


def _with_well_formed_digests(value: Any) -> Any:
    """``value`` with every digest member that is a malformed string replaced by a well-formed digest."""
    if type(value) is dict:
        return {
            key: _WELL_FORMED_DIGEST
            if key in _DIGEST_MEMBERS and type(item) is str and not is_digest(item)
            else _with_well_formed_digests(item)
            for key, item in value.items()
        }
    if type(value) is list:
        return [_with_well_formed_digests(item) for item in value]
    return value


def _schema_error_behind_digests(cls: type[Any], raw: dict[str, Any]) -> EngramError | None:
    """The schema error the malformed digests of ``raw`` hide, if any.

    A class stops at its first failing field validator and then skips its cross-reference rules,
    so a malformed digest can hide a schema error in the same object (an empty list beside it, an
    unresolved citation). Structuring again with each malformed digest made well-formed finds it:
    ``INVALID_DIGEST`` is only for arguments whose one problem is their digests.
    """
    try:
        _CONVERTER.structure(_with_well_formed_digests(raw), cls)
    except (EngramError, cattrs.BaseValidationError, TypeError, ValueError, KeyError) as exc:
        error = _structuring_error(exc)
        return error if error.code is not ErrorCode.INVALID_DIGEST else None
    return None


def check_argument_bytes(args: ToolArgs) -> None:
    """Apply the 1,048,576-byte bound of the argument object to arguments built in Python.

    Typed arguments are measured by the compact JSON text of :func:`unstructure_args` (their
    values as validated, so after NFC); :func:`parse_args` measures JSON arguments as sent, and
    through this function too when their text is not ASCII (NFC lengthens some characters).

    Raises:
        EngramError: ``INVALID_SCHEMA`` at the root when the arguments are over the bound.
    """
    size = _serialised_size(unstructure_args(args))
    if size is not None and size > MAX_ARGUMENT_BYTES:
        raise EngramError(ErrorCode.INVALID_SCHEMA, pointer="", detail="arguments over 1 MiB")


def unstructure_args(value: ToolArgs) -> dict[str, Any]:
    """The JSON form of typed arguments: absent optionals omitted, defaults filled in."""
    out: dict[str, Any] = _CONVERTER.unstructure(value)
    return out


def _reject_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise EngramError(ErrorCode.INVALID_SCHEMA, pointer="", detail="duplicate object key")
        out[key] = value
    return out


def _reject_constant(_: str) -> Any:
    raise EngramError(ErrorCode.INVALID_SCHEMA, pointer="", detail="NaN and Infinity are not JSON")


def _parse_int(text: str) -> int:
    if text == "-0":
        raise EngramError(ErrorCode.INVALID_SCHEMA, pointer="", detail="negative zero")
    return int(text)


def _parse_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise EngramError(ErrorCode.INVALID_SCHEMA, pointer="", detail="number out of range")
    return value


MAX_RAW_JSON_BYTES: Final = 8 * MAX_ARGUMENT_BYTES
r"""What :func:`parse_json` reads at most: six times the argument bound (``\u`` escapes write a byte
as six) with room for whitespace; a longer text cannot be a compliant argument object."""


def parse_json(data: bytes | str) -> Any:
    r"""Parse raw JSON the way the contract needs, for hosts that own the request bytes.

    Rejects duplicate keys (which ``json.loads`` silently collapses), ``NaN``/``Infinity``,
    ``-0``, integers too long to convert, nesting deeper than :data:`MAX_NESTING`, and a value
    whose compact JSON text is over 1,048,576 UTF-8 bytes: the bound :func:`parse_args` applies,
    measured the same way, so whitespace and ``\u`` escapes in ``data`` do not count. Input over
    :data:`MAX_RAW_JSON_BYTES` is refused before it is parsed. Once an SDK has parsed the bytes,
    duplicates can no longer be detected.

    Raises:
        EngramError: ``INVALID_SCHEMA`` at the root.
    """
    raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data
    if len(raw) > MAX_RAW_JSON_BYTES:
        raise EngramError(ErrorCode.INVALID_SCHEMA, pointer="", detail="JSON text over 8 MiB")
    try:
        text = raw.decode("utf-8")
        value = json.loads(
            text,
            object_pairs_hook=_reject_duplicates,
            parse_constant=_reject_constant,
            parse_int=_parse_int,
            parse_float=_parse_float,
        )
    except RecursionError as exc:
        raise EngramError(ErrorCode.INVALID_SCHEMA, pointer="", detail="arguments nested too deeply") from exc
    except ValueError as exc:  # not UTF-8, not JSON, or an integer over the int digit limit
        raise EngramError(ErrorCode.INVALID_SCHEMA, pointer="", detail="not valid JSON") from exc
    _check_root_bounds(value)
    return value
