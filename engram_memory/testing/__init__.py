"""The shipped test kit: conformance suites every backend binds, builders and a state machine.

A backend "is conformant" when its bindings pass these suites::

    class TestMyStore(StoreConformance):
        @pytest.fixture
        def store(self) -> Iterator[MyStore]: ...

    class TestMyVault(KeyVaultConformance):
        @pytest.fixture
        def vault(self) -> MyVault: ...

    class TestMyPolicy(PolicyConformance):
        @pytest.fixture
        def policy(self) -> MyPolicy: ...

    class TestMyService(ServiceConformance):
        @pytest.fixture
        def service_factory(self) -> ServiceFactory: ...

    TestMyServiceStateful = service_machine(make_backend).TestCase

This package imports pytest and Hypothesis (the ``testing`` extra); the core never imports it.
Optional behaviours are capability fixtures with conservative defaults, never ``isinstance``
checks.

Importing the package registers its modules for pytest's assertion rewriting (before importing
them), so a failing kit assertion shows the compared values in the integrator's run too: pytest
rewrites only test modules, conftests and registered modules, and the kit is an installed library.
"""

import pkgutil

import pytest

pytest.register_assert_rewrite(*(f"{__name__}.{module.name}" for module in pkgutil.iter_modules(__path__)))
# the package itself is already being imported here, so only its submodules are named: naming the
# package too would make pytest warn (PytestAssertRewriteWarning) that it cannot be rewritten

from engram_memory.testing.fakes import (  # noqa: E402 - after the registration, so the kit is rewritten
    PURPOSE,
    Harness,
    PolicyOverride,
    ServiceFactory,
    StoreWrapper,
    capture_args,
    confirm,
    distinctive_words,
    fail,
    make_binding,
    make_key,
    ok,
    with_policy,
)
from engram_memory.testing.keyvault import CompleteDestruction, KeyMaterial, KeyVaultConformance, Reopen  # noqa: E402
from engram_memory.testing.policy import PolicyConformance  # noqa: E402
from engram_memory.testing.ranker import RankerConformance  # noqa: E402
from engram_memory.testing.service import ReplaceEventBody, ScopeContents, ServiceConformance  # noqa: E402
from engram_memory.testing.stateful import service_machine  # noqa: E402
from engram_memory.testing.store import PersistedBytes, StoreConformance, TermTraces  # noqa: E402

__all__ = [
    "PURPOSE",
    "CompleteDestruction",
    "Harness",
    "KeyMaterial",
    "KeyVaultConformance",
    "PersistedBytes",
    "PolicyConformance",
    "PolicyOverride",
    "RankerConformance",
    "Reopen",
    "ReplaceEventBody",
    "ScopeContents",
    "ServiceConformance",
    "ServiceFactory",
    "StoreConformance",
    "StoreWrapper",
    "TermTraces",
    "capture_args",
    "confirm",
    "distinctive_words",
    "fail",
    "make_binding",
    "make_key",
    "ok",
    "service_machine",
    "with_policy",
]
