"""The shipped test kit: conformance suites every backend binds, builders and a state machine.

A backend "is conformant" when its bindings pass these suites::

    class TestMyStore(StoreConformance):
        @pytest.fixture
        def store(self) -> Iterator[MyStore]: ...

    class TestMyVault(KeyVaultConformance):
        @pytest.fixture
        def vault(self) -> MyVault: ...

    class TestMyService(ServiceConformance):
        @pytest.fixture
        def service_factory(self) -> ServiceFactory: ...

    TestMyServiceStateful = service_machine(make_backend).TestCase

This package imports pytest and Hypothesis (the ``testing`` extra); the core never imports it.
Optional behaviours are capability fixtures with conservative defaults, never ``isinstance``
checks.
"""

from engram_memory.testing.fakes import (
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
from engram_memory.testing.keyvault import CompleteDestruction, KeyMaterial, KeyVaultConformance
from engram_memory.testing.ranker import RankerConformance
from engram_memory.testing.service import ReplaceEventBody, ScopeContents, ServiceConformance
from engram_memory.testing.stateful import service_machine
from engram_memory.testing.store import StoreConformance

__all__ = [
    "PURPOSE",
    "CompleteDestruction",
    "Harness",
    "KeyMaterial",
    "KeyVaultConformance",
    "PolicyOverride",
    "RankerConformance",
    "ReplaceEventBody",
    "ScopeContents",
    "ServiceConformance",
    "ServiceFactory",
    "StoreConformance",
    "StoreWrapper",
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
