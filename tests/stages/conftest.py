"""Fixtures of the stage tests."""

from __future__ import annotations

import pytest

from jaxload.workers import shared_batch


@pytest.fixture
def pool(monkeypatch):
    """This process's slot pool for the test (what ReadBatch writes into as a worker
    would), its segments unlinked afterwards."""
    fresh = shared_batch.SlotPool()
    monkeypatch.setattr(shared_batch, "_pool", fresh)
    yield fresh
    fresh.unlink_all()
