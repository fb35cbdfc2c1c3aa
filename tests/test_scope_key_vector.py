"""The scope key of a (tenant, workspace) pair against golden vectors.

``tests/vectors/scope_key.json`` was derived without ``engram_memory`` (see
``tests/vectors/README.md``): hand-written RFC 8785 bytes of ``{tenant_id, workspace_id}``,
hashed with hashlib under the literal domain string. The scope key partitions every store
access and is persisted (SQLite ``scopes.scope``), so a change of derivation both orphans
existing data and, if it stops being injective, lets one tenant read another's records.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from engram_memory.canonical import Domain, canonical_bytes, digest
from engram_memory.context import scope_key

VECTORS: dict[str, Any] = json.loads(
    (Path(__file__).resolve().parent / "vectors" / "scope_key.json").read_text(encoding="utf-8")
)
CASES: list[dict[str, Any]] = VECTORS["scope_keys"]
CASES_BY_NAME: dict[str, dict[str, Any]] = {case["name"]: case for case in CASES}

# Written out by hand (docs/contract.md, "Digest domains"): never read from ``Domain``.
LITERAL_SCOPE_KEY_DOMAIN = b"engram-memory/scope-key/v1\x00"

# Pairs whose ids give the same text when concatenated, or joined with "/" or ":".
AMBIGUOUS_PAIRS: list[tuple[str, str, str]] = [
    ("concat_ab_c", "concat_a_bc", ""),
    ("slash_a_b/c", "slash_a/b_c", "/"),
    ("colon_a:b_c", "colon_a_b:c", ":"),
]


def _hashlib_scope_key(canonical: bytes) -> str:
    return "sha256:" + hashlib.sha256(LITERAL_SCOPE_KEY_DOMAIN + canonical).hexdigest()


def test_vector_file_is_self_consistent() -> None:
    """Every vector re-derives from its own bytes with hashlib and the literal domain."""
    assert len(CASES) >= 9
    assert len(CASES_BY_NAME) == len(CASES), "vector names must be unique"
    assert VECTORS["domains"] == {"SCOPE_KEY": LITERAL_SCOPE_KEY_DOMAIN.decode("ascii")}
    for case in CASES:
        canonical = case["canonical_utf8"].encode("utf-8")
        assert bytes.fromhex(case["canonical_hex"]) == canonical, case["name"]
        assert _hashlib_scope_key(canonical) == case["scope_key"], case["name"]
    assert len({case["scope_key"] for case in CASES}) == len(CASES)


def test_hand_written_bytes_of_the_vectors() -> None:
    """The body is exactly ``{"tenant_id":…,"workspace_id":…}``, UTF-8 raw, JSON escapes where RFC 8785 wants them."""
    expected = {
        "baseline": b'{"tenant_id":"tenant-a","workspace_id":"workspace-1"}',
        "concat_ab_c": b'{"tenant_id":"ab","workspace_id":"c"}',
        "concat_a_bc": b'{"tenant_id":"a","workspace_id":"bc"}',
        "nfc_non_ascii": b'{"tenant_id":"tenant-Am\xc3\xa9lie","workspace_id":"workspace-\xc3\x85"}',
        "json_escapes": b'{"tenant_id":"acme \\"prod\\"","workspace_id":"team\\\\west\\n"}',
    }
    for name, canonical in expected.items():
        assert bytes.fromhex(CASES_BY_NAME[name]["canonical_hex"]) == canonical, name
    assert CASES_BY_NAME["baseline"]["scope_key"] == (
        "sha256:7c2179c5053735460d39df00d772bbf3a041fe4d5b544c4dacd9526583f8cbe1"
    )
    assert CASES_BY_NAME["nfc_non_ascii"]["tenant_id"] == "tenant-Am\u00e9lie"
    assert CASES_BY_NAME["nfc_non_ascii"]["workspace_id"] == "workspace-\u00c5"


def test_the_domain_is_the_literal_string() -> None:
    """``Domain.SCOPE_KEY`` is the NUL-terminated literal the vectors were hashed under."""
    assert Domain.SCOPE_KEY.value.encode("ascii") == LITERAL_SCOPE_KEY_DOMAIN


@pytest.mark.parametrize("case", CASES, ids=lambda case: case["name"])
def test_scope_key_vectors(case: dict[str, Any]) -> None:
    """``scope_key(tenant, workspace)`` equals the golden digest, and so do its parts."""
    tenant, workspace = case["tenant_id"], case["workspace_id"]
    body = {"tenant_id": tenant, "workspace_id": workspace}
    assert canonical_bytes(body) == bytes.fromhex(case["canonical_hex"])
    assert digest(Domain.SCOPE_KEY, body) == case["scope_key"]
    assert scope_key(tenant, workspace) == case["scope_key"]


@pytest.mark.parametrize(("left", "right", "separator"), AMBIGUOUS_PAIRS)
def test_pairs_that_join_to_the_same_text_have_distinct_scope_keys(left: str, right: str, separator: str) -> None:
    """Tenant and workspace stay separate fields: a join of the two ids can never collide."""
    a, b = CASES_BY_NAME[left], CASES_BY_NAME[right]
    assert a["tenant_id"] + separator + a["workspace_id"] == b["tenant_id"] + separator + b["workspace_id"]
    assert a["scope_key"] != b["scope_key"]
    assert scope_key(a["tenant_id"], a["workspace_id"]) == a["scope_key"]
    assert scope_key(b["tenant_id"], b["workspace_id"]) == b["scope_key"]
