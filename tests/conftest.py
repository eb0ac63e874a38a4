"""Shared fixtures. Tests that need ../shared/data skip where it is absent, but fail under CI=true."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = Path(os.environ.get("GRANDROUNDS_SHARED_DATA", ROOT.parent / "shared" / "data"))


def shared_file(*parts: str) -> Path:
    """Path to a real benchmark file in ../shared/data; skip (or fail under CI) when missing."""
    path = SHARED_DATA.joinpath(*parts)
    if not path.exists():
        msg = f"real benchmark data not found at {path} (../shared/data is beside the project only in CI and dev)"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(msg)
        pytest.skip(msg)
    return path


@pytest.fixture
def shared_data():
    return shared_file
