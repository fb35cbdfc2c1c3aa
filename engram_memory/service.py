"""``MemoryService``: the six operations, typed and as the JSON contract of the six tools.

Pure orchestration over the ports. Every call is bound by the host (:class:`HostBinding`); the
service checks the binding, the grant and the bound purpose before anything else, then delegates
to the write path or the read path. A typed operation given anything but its argument class (a
plain ``dict``, say) is a ``TypeError`` before any of those checks, with nothing read or written.
``call_tool`` always answers with the envelope and raises only
:class:`~engram_memory.errors.ProtocolError`.

**Failures of host components.** Both the typed operations and ``call_tool`` map the port errors
of :mod:`engram_memory.errors` to their codes, any other failure of the host policy to
``POLICY_UNAVAILABLE`` and of the ranker to ``RANKING_UNAVAILABLE`` (an ``EngramError`` either
raises keeps its code). Any other exception escaping a store or a vault (a failed key
destruction aside, which the service handles itself) propagates from a typed operation as it is;
only ``call_tool`` answers it, as ``CAPABILITY_UNAVAILABLE`` (a read) or
``MUTATION_OUTCOME_UNKNOWN`` (a mutation), and logs it.
"""

from __future__ import annotations

import logging
import unicodedata
import uuid
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any, Final, Self

import attrs

from engram_memory.canonical import has_utf8_form
from engram_memory.clock import SystemClock
from engram_memory.clock_guard import GuardedClock
from engram_memory.context import ADMISSION, CAPTURE, FORGET, GET, SEARCH, WITHDRAW, Confirmation, HostBinding
from engram_memory.errors import EngramError, ErrorCode, ProtocolError
from engram_memory.mutation_guard import MUTATING_TOOLS, Mutation, operation_target
from engram_memory.page_cursor import lifetime_ms
from engram_memory.policy import DefaultPolicy
from engram_memory.policy_guard import GuardedPolicy
from engram_memory.ports import Clock, KeyVault, Policy, Ranker, Store
from engram_memory.ranking.lexical import LexicalRanker
from engram_memory.read_path import ReadPath
from engram_memory.results import (
    CaptureResult,
    ForgetResult,
    GetResult,
    RequestAdmissionResult,
    SearchResult,
    WithdrawResult,
)
from engram_memory.wire.args import (
    CaptureArgs,
    ForgetArgs,
    GetArgs,
    RequestAdmissionArgs,
    SearchArgs,
    WithdrawArgs,
)
from engram_memory.wire.converter import ARGS_BY_TOOL, TOOL_NAMES, ToolArgs, check_argument_bytes, parse_args
from engram_memory.wire.envelope import failure_envelope, success_envelope
from engram_memory.wire.log_pointer import loggable_pointer
from engram_memory.write_path import WritePath

__all__ = ["MemoryService"]

_log = logging.getLogger("engram_memory")


def _is_mutation(name: object) -> bool:
    """Whether ``name`` names a mutating tool (a name that is not a ``str`` names none)."""
    return isinstance(name, str) and name in MUTATING_TOOLS


_BOUND_FIELDS: Final = ("tenant_id", "workspace_id", "principal", "agent_id", "session", "purpose_ref")
"""The host-bound fields every call needs (non-empty strings), else -32603."""


def _default_audit_id() -> str:
    return "audit_" + uuid.uuid4().hex


_TYPED_ARGS: Final = tuple(ARGS_BY_TOOL.values())


def _wrong_args(args: object, message: str) -> TypeError:
    """The ``TypeError`` for arguments of the wrong class, noting the class given."""
    error = TypeError(message)
    error.add_note(f"got {type(args).__name__}")
    return error


class MemoryService:
    """Governed memory for agents: search, get, capture, request_admission, withdraw, forget.

    One service may be shared by every thread of the host: calls run concurrently, the store
    orders their units of work, and identical mutations (same principal, key and arguments)
    racing each other commit once and answer the same response (the later ones as replays).
    :meth:`close` it once, after the last call: a call running during the close, or made after
    it, fails (``STORE_UNAVAILABLE``, or ``MUTATION_OUTCOME_UNKNOWN`` for an erasure caught between
    its commit and its key destruction).

    Args:
        store: journal, state, idempotency rows and index (one unit of work per mutation).
        vault: data keys for sealed candidates and record bodies.
        policy: the host's rules (grants, retention caps, confirmation, redaction, admission);
            :class:`~engram_memory.DefaultPolicy` by default, as for :func:`~engram_memory.connect`
            (it narrows no tool the binding grants, and every candidate waits for the host's
            adjudication).
        clock: injected time (the system clock by default; a
            :class:`~engram_memory.ManualClock` for tests and replays). Its instants are read in
            UTC; a clock that raises or answers no aware ``datetime`` makes the call
            ``CAPABILITY_UNAVAILABLE``, with nothing written.
        ranker: the search ranker (the lexical ``offline_lexical_v1`` ranker by default).
        audit_ids: makes an ``auditId`` when the binding carries none (for :meth:`call_tool`). It
            must answer a ``str`` with a UTF-8 form; raising or answering anything else makes
            that call a protocol error (-32603), as a malformed binding ``audit_id`` does.
        page_cursor_lifetime: how long a ``next_page_cursor`` may be used, counted from the
            instant its first page was ranked at (the cursor's pinned ``valid_as_of``); an older
            cursor answers ``STALE_PAGE``. It counts in whole milliseconds (a fraction of one is
            dropped). ``None`` (the default): cursors do not expire.

    Raises:
        TypeError: ``page_cursor_lifetime`` is neither a ``timedelta`` nor ``None``, or
            ``audit_ids`` is not callable.
        ValueError: ``page_cursor_lifetime`` is shorter than one millisecond.
    """

    def __init__(
        self,
        *,
        store: Store,
        vault: KeyVault,
        policy: Policy | None = None,
        clock: Clock | None = None,
        ranker: Ranker | None = None,
        audit_ids: Callable[[], str] = _default_audit_id,
        page_cursor_lifetime: timedelta | None = None,
    ) -> None:
        cursor_lifetime_ms = lifetime_ms(page_cursor_lifetime)
        if not callable(audit_ids):
            raise TypeError("audit_ids must be a callable answering a str")
        self.store = store
        self.vault = vault
        self.policy: Policy = GuardedPolicy(policy if policy is not None else DefaultPolicy())
        self.clock: Clock = clock if clock is not None else SystemClock()
        self.ranker: Ranker = ranker if ranker is not None else LexicalRanker()
        self._audit_ids = audit_ids
        self._clock = GuardedClock(self.clock)  # every read of time: aware UTC, or CAPABILITY_UNAVAILABLE
        self._write = WritePath(store=store, vault=vault, policy=self.policy, clock=self._clock)
        self._closed = False
        self._read = ReadPath(
            store=store,
            vault=vault,
            policy=self.policy,
            clock=self._clock,
            ranker=self.ranker,
            cursor_lifetime_ms=cursor_lifetime_ms,
        )

    def close(self, *, destroy_doomed_keys: bool = True) -> None:
        """Destroy the keys accepts left doomed, then close the store and the vault. Idempotent.

        The vault is closed only if it holds resources (has ``close``). A failure to destroy a
        key is logged and leaves it doomed for the next run's ``MemoryAdmin.reap_keys``.
        ``destroy_doomed_keys=False`` closes without writing anything (for read-only
        inspection); the doomed keys then wait for a later ``close`` or ``reap_keys``.
        """
        if self._closed:
            return
        self._closed = True
        if destroy_doomed_keys:
            try:
                self._write.guard.reap()
            except Exception:  # noqa: BLE001 - closing must release the files whatever the store says
                _log.exception("doomed keys left for MemoryAdmin.reap_keys")
        try:
            self.store.close()
        finally:  # a store that fails to close must not keep the vault open
            close_vault = getattr(self.vault, "close", None)
            if callable(close_vault):
                close_vault()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # ------------------------------------------------------------------ host checks

    def granted_tools(self, binding: HostBinding) -> frozenset[str]:
        """The tools both the binding and the policy grant.

        Raises:
            ProtocolError: -32603 when the host context is missing (as for :meth:`call_tool`).
            EngramError: ``POLICY_UNAVAILABLE`` when the policy's ``granted_tools`` raises or
                answers a malformed value (an ``EngramError`` it raises keeps its code).
        """
        self._check_context(binding)
        return self._granted(binding)

    def _granted(self, binding: HostBinding) -> frozenset[str]:
        """:meth:`granted_tools` of a binding already checked."""
        return binding.tools & self.policy.granted_tools(binding) & frozenset(TOOL_NAMES)

    @staticmethod
    def _check_context(binding: object) -> None:
        """-32603 unless ``binding`` is a :class:`HostBinding` with every host-bound field set, in NFC.

        Its ``audit_id`` must be text, and its ``confirmation`` ``None`` or a valid :class:`Confirmation`.
        """
        if not isinstance(binding, HostBinding):
            raise ProtocolError.untrusted_context(f"no host binding: {type(binding).__name__}")
        for name in _BOUND_FIELDS:
            value = getattr(binding, name)
            if not isinstance(value, str) or not value:
                raise ProtocolError.untrusted_context(f"host binding lacks {name}")
            if not value.isascii() and not has_utf8_form(value):  # no UTF-8 form: no digest, no scope key
                raise ProtocolError.untrusted_context(f"host binding {name} is not valid Unicode text")
            if not unicodedata.is_normalized("NFC", value):  # NFC-equivalent ids would share digests
                raise ProtocolError.untrusted_context(f"host binding {name} is not NFC")
        audit_id: object = binding.audit_id  # typed str | None, but a host may pass anything
        if audit_id is not None and (not isinstance(audit_id, str) or not has_utf8_form(audit_id)):
            raise ProtocolError.untrusted_context("host binding audit_id is not text")
        confirmation: object = binding.confirmation  # validated when built, but a host may set anything
        if confirmation is None:
            return
        if not isinstance(confirmation, Confirmation):
            raise ProtocolError.untrusted_context(f"host binding confirmation is a {type(confirmation).__name__}")
        try:
            attrs.validate(confirmation)  # its fields too: object.__setattr__ bypasses the validators
        except (TypeError, ValueError, AttributeError) as exc:
            raise ProtocolError.untrusted_context("host binding confirmation is malformed") from exc

    def _generated_audit_id(self) -> str:
        """A fresh ``auditId`` from the host's ``audit_ids``; -32603 if it raises or answers no text."""
        try:
            audit_id: object = self._audit_ids()
        except Exception as exc:  # host code: its failure is a broken host context, never an envelope
            raise ProtocolError.untrusted_context(f"audit_ids raised {type(exc).__name__}") from exc
        if not isinstance(audit_id, str) or not audit_id or not has_utf8_form(audit_id):
            raise ProtocolError.untrusted_context(f"audit_ids answered no text: {type(audit_id).__name__}")
        return audit_id

    def _check_grant(self, tool: object, binding: HostBinding) -> None:
        """-32602 unless ``tool`` is the name (a ``str``) of a tool this binding is granted."""
        if not isinstance(tool, str) or tool not in ARGS_BY_TOOL or tool not in self._granted(binding):
            raise ProtocolError.unknown_tool("tool unknown or not granted")

    def _gated(self, tool: str, binding: HostBinding) -> bool:
        """Whether this call needs a confirmation (withdraw and forget always; the policy says for the others).

        A mutation that needs one and whose binding carries none is -32603 here, before its
        arguments, its deadline or the stored state are looked at.
        """
        return tool in MUTATING_TOOLS and self._write.guard.confirmation_required(tool, binding)

    def _guard(self, tool: str, binding: HostBinding, args: object) -> bool:
        """The checks every typed operation starts with: its argument class, the binding, the grant.

        Returns whether the call needs a confirmation (:meth:`_gated`).
        """
        expected = ARGS_BY_TOOL[tool]
        if not isinstance(args, expected):  # a programming error, so a TypeError rather than a ProtocolError
            name = expected.__name__
            raise _wrong_args(
                args,
                f"MemoryService.{tool.removeprefix('engram_memory_')} takes a {name}: build one from a JSON "
                f"object with engram_memory.wire.parse_args({name}, raw), or pass the JSON object to call_tool",
            )
        self._check_context(binding)
        self._check_grant(tool, binding)
        return self._gated(tool, binding)

    @staticmethod
    def _check_purpose(args: ToolArgs, binding: HostBinding) -> None:
        if isinstance(args, CaptureArgs):
            purpose = args.payload.purpose_ref
        elif isinstance(args, SearchArgs | GetArgs):
            purpose = args.purpose_ref
        else:
            return
        if purpose != binding.purpose_ref:
            raise ProtocolError.untrusted_context("purpose_ref differs from the bound purpose")

    # ------------------------------------------------------------------ typed API

    def search(self, binding: HostBinding, args: SearchArgs) -> SearchResult:
        """Find current records of the bound scope, ranked, with citations and a rank receipt."""
        self._guard(SEARCH, binding, args)
        self._check_purpose(args, binding)
        return self._read.search(binding, args)

    def get(self, binding: HostBinding, args: GetArgs) -> GetResult:
        """Read one current record of the bound scope, with a read receipt."""
        self._guard(GET, binding, args)
        self._check_purpose(args, binding)
        return self._read.get(binding, args)

    def capture(self, binding: HostBinding, args: CaptureArgs) -> CaptureResult:
        """Submit cited material as an encrypted pending candidate.

        Arguments whose JSON form is over 1,048,576 bytes are ``INVALID_SCHEMA`` here, as they are
        through :meth:`call_tool` (capture is the only tool whose arguments can reach the bound).
        """
        gated = self._guard(CAPTURE, binding, args)
        self._check_purpose(args, binding)
        check_argument_bytes(args)
        return self._write.capture(binding, args, gated=gated)

    def request_admission(self, binding: HostBinding, args: RequestAdmissionArgs) -> RequestAdmissionResult:
        """Ask the host's policy to decide a pending candidate."""
        gated = self._guard(ADMISSION, binding, args)
        return self._write.request_admission(binding, args, gated=gated)

    def withdraw(self, binding: HostBinding, args: WithdrawArgs) -> WithdrawResult:
        """End a pending candidate and destroy its key (needs a host confirmation)."""
        gated = self._guard(WITHDRAW, binding, args)
        return self._write.withdraw(binding, args, gated=gated)

    def forget(self, binding: HostBinding, args: ForgetArgs) -> ForgetResult:
        """Tombstone an admitted record, erase its body and purge it (needs a host confirmation)."""
        gated = self._guard(FORGET, binding, args)
        return self._write.forget(binding, args, gated=gated)

    # ------------------------------------------------------------------ JSON contract

    def list_tools(self, binding: HostBinding) -> list[dict[str, Any]]:
        """MCP descriptors of the tools this binding is granted, in contract order.

        Raises:
            ProtocolError: -32603 when the host context is missing (as for :meth:`call_tool`).
            EngramError: ``POLICY_UNAVAILABLE`` when the policy's ``granted_tools`` raises or
                answers a malformed value (an ``EngramError`` it raises keeps its code).
        """
        from engram_memory.wire.descriptors import tool_descriptors  # noqa: PLC0415 - light import

        self._check_context(binding)
        granted = self._granted(binding)
        return tool_descriptors(name for name in TOOL_NAMES if name in granted)

    def operation_digest(self, name: str, arguments: Any, binding: HostBinding) -> str:
        """The digest a host shows a human before confirming a mutation.

        :meth:`confirmation` builds the whole :class:`~engram_memory.Confirmation` around it.
        ``arguments`` are the JSON arguments (a ``dict``, as for :meth:`call_tool`) or the typed
        arguments object of ``name`` (as for the typed operation); both give the same digest.

        Raises:
            ProtocolError: -32603 when the host context is missing; -32602 for an unknown tool or
                one that is not a mutation.
            EngramError: ``INVALID_SCHEMA`` / ``INVALID_DIGEST`` for invalid arguments.
            TypeError: ``arguments`` is the typed arguments object of another tool.
        """
        return self._write.guard.operation_digest(name, self._mutation_args(name, arguments, binding), binding)

    def confirmation(
        self,
        name: str,
        arguments: Any,
        binding: HostBinding,
        *,
        confirmation_id: str,
        requested_at: datetime,
        approved_at: datetime,
    ) -> Confirmation:
        """The :class:`~engram_memory.Confirmation` of exactly this call, for the host to bind.

        Build it only after a human approved this operation (shown its tool, target and arguments),
        then put it in the call's binding. ``tool`` is ``name``, ``operation_digest`` is
        :meth:`operation_digest` of the same call, and ``target`` is what the gate compares: the
        candidate id (request_admission, withdraw), the record id (forget) or the idempotency key
        (capture). It only builds the value: nothing is read, written or consumed. The gate checks
        the time windows (approval within 300 s of the request, the call within 30 s of approval)
        and the single use of ``confirmation_id`` when the call runs.

        Args:
            name: the mutating tool.
            arguments: its JSON arguments (a ``dict``, as for :meth:`call_tool`), or its typed
                arguments object (the ``*Args`` class of ``name``, as for the typed operation), as
                for :meth:`operation_digest`. Both give the same confirmation.
            binding: the binding of the call (its scope and principal are in the digest).
            confirmation_id: the approval's id (``Confirmation.id``), never used before in the scope.
            requested_at: when the approval was requested (timezone-aware).
            approved_at: when the human approved (timezone-aware).

        Raises:
            ProtocolError: -32603 when the host context is missing; -32602 for an unknown tool or
                one that is not a mutation.
            EngramError: ``INVALID_SCHEMA`` / ``INVALID_DIGEST`` for invalid arguments.
            TypeError: ``arguments`` is the typed arguments object of another tool;
                ``confirmation_id`` is not a ``str``; ``requested_at`` or ``approved_at`` is not a
                ``datetime``.
            ValueError: ``requested_at`` or ``approved_at`` is a naive datetime; ``confirmation_id``
                is empty, over 512 UTF-8 bytes, not in Unicode NFC or holds a lone surrogate.
        """
        args = self._mutation_args(name, arguments, binding)
        return Confirmation(
            id=confirmation_id,
            tool=name,
            target=operation_target(args),
            operation_digest=self._write.guard.operation_digest(name, args, binding),
            requested_at=requested_at,
            approved_at=approved_at,
        )

    def _mutation_args(self, name: str, arguments: Any, binding: HostBinding) -> Mutation:
        """A mutation's arguments, parsed once: -32603 without host context, -32602 for another tool.

        A typed arguments object of ``name`` is taken as parsed (capture's is held to the
        1,048,576-byte bound, as :meth:`capture` does); the typed arguments of another tool are a
        ``TypeError``, as for a typed operation; anything else is parsed as JSON arguments.
        """
        self._check_context(binding)
        if not _is_mutation(name):
            raise ProtocolError.unknown_tool("not a mutating tool")
        expected = ARGS_BY_TOOL[name]
        args: Mutation
        if isinstance(arguments, expected):
            args = arguments
            check_argument_bytes(args)
        elif isinstance(arguments, _TYPED_ARGS):  # a programming error, as in _guard
            raise _wrong_args(
                arguments,
                f"the arguments of {name} are a {expected.__name__} or its JSON object, "
                "not the typed arguments of another tool",
            )
        else:
            args = parse_args(expected, arguments)
        return args

    def call_tool(self, name: str, arguments: Any, binding: HostBinding) -> dict[str, Any]:
        """Run one tool call from JSON arguments and return the contract envelope.

        Raises:
            ProtocolError: -32603 (host context missing or mismatched, including a ``binding``
                that is not a :class:`HostBinding` or whose ``confirmation`` is not a valid
                :class:`Confirmation`; purpose mismatch; confirmation reference missing) or -32602
                (unknown or ungranted tool). Every other outcome is an envelope.

        An error envelope is also logged at ``DEBUG`` on the ``engram_memory`` logger: the tool,
        the code, the JSON pointer of the offending argument (segments that are not schema names
        or indexes shown as ``*``) and the ``auditId``. Never the exception's notes, which can
        quote an argument value.
        """
        self._check_context(binding)
        audit_id = binding.audit_id or self._generated_audit_id()
        try:
            self._check_grant(name, binding)
            gated = self._gated(name, binding)
            args = parse_args(ARGS_BY_TOOL[name], arguments)
            self._check_purpose(args, binding)
            result = self._dispatch(name, binding, args, gated=gated)
        except EngramError as error:
            # for the host's debugging; never the notes, which may quote an argument value
            _log.debug(
                "%s answered %s at %s (auditId %s)",
                name,
                error.code.value,
                loggable_pointer(error.pointer, name),
                audit_id,
            )
            return failure_envelope(error, audit_id)
        except ProtocolError:
            raise
        except Exception as exc:  # noqa: BLE001 - an infrastructure failure is never an empty success
            _log.exception("unexpected failure in %s", name)
            code = ErrorCode.MUTATION_OUTCOME_UNKNOWN if _is_mutation(name) else ErrorCode.CAPABILITY_UNAVAILABLE
            return failure_envelope(EngramError(code, detail=type(exc).__name__), audit_id)
        return success_envelope(result.to_json(), audit_id)

    def _dispatch(
        self, name: str, binding: HostBinding, args: ToolArgs, *, gated: bool
    ) -> SearchResult | GetResult | CaptureResult | RequestAdmissionResult | WithdrawResult | ForgetResult:
        if isinstance(args, SearchArgs):
            return self._read.search(binding, args)
        if isinstance(args, GetArgs):
            return self._read.get(binding, args)
        if isinstance(args, CaptureArgs):
            return self._write.capture(binding, args, gated=gated)
        if isinstance(args, RequestAdmissionArgs):
            return self._write.request_admission(binding, args, gated=gated)
        if isinstance(args, WithdrawArgs):
            return self._write.withdraw(binding, args, gated=gated)
        if isinstance(args, ForgetArgs):
            return self._write.forget(binding, args, gated=gated)
        raise ProtocolError.unknown_tool(name)  # pragma: no cover - parse_args guarantees a type
