"""Suite-wide settings."""

from __future__ import annotations

from hypothesis import settings

# The suite shares two cores with whatever else runs (CI, benchmarks, the
# siw guest): a per-example deadline would fail tests for being slow, not
# wrong. Example budgets stay per test.
settings.register_profile("iwarp", deadline=None)
settings.load_profile("iwarp")
