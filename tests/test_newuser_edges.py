"""Edges a new user meets first: one name for an error's public text, the MCP extra, the auditId."""

from __future__ import annotations

import importlib
import importlib.util
import json
import re
import sys
import types
from pathlib import Path

import attrs
import pytest

from engram_memory import ManualClock, connect
from engram_memory.adapters import MCP_EXTRA
from engram_memory.cli import main
from engram_memory.errors import PUBLIC_MESSAGES, EngramError, ErrorCode, JsonRpcCode, ProtocolError
from engram_memory.testing import PURPOSE, make_binding

ADAPTER = "engram_memory.adapters.mcp"
CANARY = "canary-7f3e-detail"
SEARCH = "engram_memory_search"


# --- EngramError and ProtocolError answer the same attribute -------------------------------------


@pytest.mark.parametrize("code", list(ErrorCode), ids=str)
def test_an_engram_error_answers_public_message_with_its_constant_text(code: ErrorCode) -> None:
    error = EngramError(code, pointer="/query", detail=CANARY)
    assert error.public_message == str(error) == PUBLIC_MESSAGES[code]
    assert CANARY not in error.public_message
    assert any(CANARY in note for note in error.__notes__)


@pytest.mark.parametrize("code", list(JsonRpcCode), ids=str)
def test_a_protocol_error_answers_public_message_with_its_constant_text(code: JsonRpcCode) -> None:
    error = ProtocolError(code, detail=CANARY)
    assert error.public_message == error.message == str(error) == ProtocolError.MESSAGES[code]
    assert CANARY not in error.public_message
    assert error.__notes__ == [CANARY]


@pytest.mark.parametrize(
    "error", [EngramError(ErrorCode.NOT_FOUND), ProtocolError.untrusted_context()], ids=["engram", "protocol"]
)
def test_public_message_is_a_read_only_property_of_both_families(error: EngramError | ProtocolError) -> None:
    assert isinstance(vars(type(error))["public_message"], property)
    with pytest.raises(AttributeError):
        error.public_message = "something else"  # type: ignore[misc]
    assert error.public_message in {*PUBLIC_MESSAGES.values(), *ProtocolError.MESSAGES.values()}


def test_the_envelope_and_the_protocol_error_carry_only_constant_text() -> None:
    service = connect("memory:", clock=ManualClock())
    binding = make_binding("acme", "platform", "alice")
    try:
        failure = service.call_tool(SEARCH, {"query": "x", "purpose_ref": PURPOSE, "limit": CANARY}, binding)
        assert failure["error"] == {
            "code": "INVALID_SCHEMA",
            "message": PUBLIC_MESSAGES[ErrorCode.INVALID_SCHEMA],
            "retriable": False,
        }
        assert CANARY not in json.dumps(failure)
        with pytest.raises(ProtocolError) as refused:
            service.call_tool(SEARCH, {"query": "x", "purpose_ref": CANARY}, binding)
        assert refused.value.public_message == "trusted call context unavailable"
        assert CANARY not in refused.value.public_message
    finally:
        service.close()


# --- the MCP adapter without the mcp extra -------------------------------------------------------


def _without(monkeypatch: pytest.MonkeyPatch, *packages: str) -> None:
    """Make ``packages`` look uninstalled, and the adapter importable afresh (all undone after the test).

    A ``None`` entry in ``sys.modules`` makes an import of the package fail; its loaded submodules
    are taken out so that importing one of them goes through the (missing) package, as it would.
    """
    for package in packages:
        for loaded in [name for name in sys.modules if name.startswith(f"{package}.")]:
            monkeypatch.delitem(sys.modules, loaded)
        monkeypatch.setitem(sys.modules, package, None)
    monkeypatch.delitem(sys.modules, ADAPTER, raising=False)


@pytest.mark.parametrize("missing", ["mcp", "anyio"])
def test_importing_the_adapter_without_the_extra_says_how_to_install_it(
    monkeypatch: pytest.MonkeyPatch, missing: str
) -> None:
    _without(monkeypatch, missing)
    with pytest.raises(ModuleNotFoundError) as info:
        importlib.import_module(ADAPTER)
    error = info.value
    assert isinstance(error.__cause__, ModuleNotFoundError)
    # the missing module's name, as Python gave it: with a None entry for the package that is the
    # submodule imported ("mcp.types"); with the package really absent, the package itself
    assert error.name == error.__cause__.name
    assert error.name is not None
    # the one made missing, or one that is really not installed and imported before it
    absent = {name for name in ("anyio", "mcp") if name != missing and importlib.util.find_spec(name) is None}
    assert error.name.partition(".")[0] in {missing, *absent}
    assert str(error) == f"{ADAPTER} needs {MCP_EXTRA} ({error.__cause__})"
    assert 'pip install ".[mcp]"' in str(error)
    assert ADAPTER not in sys.modules
    with pytest.raises(pytest.skip.Exception):
        pytest.importorskip(ADAPTER)


def test_an_sdk_of_another_version_is_an_import_error_with_the_same_hint(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("mcp")
    _without(monkeypatch)
    monkeypatch.setitem(sys.modules, "mcp.server.context", types.ModuleType("mcp.server.context"))
    with pytest.raises(ImportError) as info:
        importlib.import_module(ADAPTER)
    assert type(info.value) is ImportError  # not "missing": importorskip must not hide it
    assert str(info.value).startswith(f"{ADAPTER} needs {MCP_EXTRA} (cannot import name 'ServerRequestContext'")
    assert isinstance(info.value.__cause__, ImportError)


def test_the_adapter_still_imports_with_the_extra() -> None:
    adapter = pytest.importorskip(ADAPTER)
    assert callable(adapter.build_server)


def test_serve_mcp_without_the_extra_prints_the_same_hint(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    _without(monkeypatch, "mcp")
    argv = ["serve-mcp", "--db", str(tmp_path / "m.db"), "--tenant", "t", "--workspace", "w"]
    with pytest.raises(SystemExit) as info:
        main([*argv, "--principal", "p", "--purpose", "purpose:x"])
    assert info.value.code == f"serve-mcp needs {MCP_EXTRA}"
    assert list(tmp_path.iterdir()) == []


# --- auditId: the host's, or a random one per call -----------------------------------------------


def test_the_audit_id_is_the_bound_one_or_a_fresh_random_one_per_call() -> None:
    service = connect("memory:", clock=ManualClock())
    binding = make_binding("acme", "platform", "alice")
    arguments = {"query": "x", "purpose_ref": PURPOSE}
    try:
        assert binding.audit_id is None
        made = [service.call_tool(SEARCH, arguments, binding)["auditId"] for _ in range(2)]
        made.append(service.call_tool(SEARCH, arguments, attrs.evolve(binding, audit_id=""))["auditId"])
        assert all(re.fullmatch(r"audit_[0-9a-f]{32}", audit_id) for audit_id in made)
        assert len(set(made)) == len(made)
        bound = attrs.evolve(binding, audit_id="host-audit-1")
        assert service.call_tool(SEARCH, arguments, bound)["auditId"] == "host-audit-1"
    finally:
        service.close()
    ids = iter(["host-made-1", "host-made-2"])
    hosted = connect("memory:", clock=ManualClock(), audit_ids=lambda: next(ids))
    try:
        assert hosted.call_tool(SEARCH, arguments, binding)["auditId"] == "host-made-1"
        assert hosted.call_tool(SEARCH, arguments, binding)["auditId"] == "host-made-2"
    finally:
        hosted.close()
