"""How ranks agree on the stop step (`gatekeeper.integrations.agree.StopChannel`), on a
real `torch.distributed.TCPStore`: the earliest posted boundary wins, whoever posts last,
and the rank that posted it owns the reports."""

from __future__ import annotations

from datetime import timedelta

import pytest

dist = pytest.importorskip("torch.distributed")

from gatekeeper.integrations.agree import StopChannel  # noqa: E402


def store() -> object:
    return dist.TCPStore("127.0.0.1", 0, 1, True, timeout=timedelta(seconds=10))


def test_nothing_posted_costs_a_lookup_and_says_go_on() -> None:
    channel = StopChannel(store(), rank=0)
    assert not channel.due(10**6)
    assert channel.owner() is None


def test_the_earliest_boundary_wins_and_its_rank_owns_the_reports() -> None:
    shared = store()
    rank0, rank1, rank2 = (StopChannel(shared, rank=r) for r in (0, 1, 2))
    rank1.post(8)
    rank2.post(9)  # later: ignored
    assert not rank0.due(7) and rank0.due(8) and rank2.due(8)
    assert rank0.owner() == 1
    rank2.post(5)  # earlier: wins
    assert rank0.due(5) and rank0.owner() == 2
