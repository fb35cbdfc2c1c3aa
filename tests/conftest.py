"""Shared test configuration: Hypothesis profiles, and ``pytester`` (to run a kit binding as an integrator would).

``ci`` (chosen when the ``CI`` environment variable is set) is derandomised with no deadline;
``dev`` is the default; ``fast`` (``HYPOTHESIS_PROFILE=fast``) keeps local loops short.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

pytest_plugins = ["pytester"]

settings.register_profile(
    "ci",
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile(
    "dev", deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)
settings.register_profile("fast", max_examples=10, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci" if os.environ.get("CI") else "dev"))
