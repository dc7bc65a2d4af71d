"""Kafka's replica placement: leaders and followers spread evenly, replicas on distinct brokers and, with
racks, on as many racks as there are; mixed rack information refused."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from tierlog.cluster.placement import assign_replicas, rack_alternated
from tierlog.errors import InvalidReplicationFactorError, InvalidRequestError


@pytest.mark.parametrize("seed", range(5))
def test_without_racks_leaders_and_replicas_spread_evenly(seed):
    got = assign_replicas({1: None, 2: None, 3: None, 4: None}, 12, 3, rng=random.Random(seed))
    assert sorted(got) == list(range(12))
    assert all(len(set(r)) == 3 for r in got.values())
    assert Counter(r[0] for r in got.values()) == {1: 3, 2: 3, 3: 3, 4: 3}
    assert Counter(b for r in got.values() for b in r) == {1: 9, 2: 9, 3: 9, 4: 9}


@pytest.mark.parametrize("seed", range(5))
def test_with_racks_each_partition_spans_the_racks(seed):
    racks = {1: "a", 2: "a", 3: "b", 4: "b", 5: "c", 6: "c"}
    got = assign_replicas(racks, 12, 3, rng=random.Random(seed))
    assert all(len({racks[b] for b in r}) == 3 for r in got.values())
    assert Counter(r[0] for r in got.values()) == {b: 2 for b in racks}
    two = assign_replicas(racks, 6, 2, rng=random.Random(seed))
    assert all(racks[r[0]] != racks[r[1]] for r in two.values())


def test_rack_alternated_list():
    assert rack_alternated({1: "a", 2: "a", 3: "b", 4: "c", 5: "c"}) == [1, 3, 4, 2, 5]


def test_added_partitions_continue_the_numbering():
    got = assign_replicas({1: None, 2: None, 3: None}, 3, 2, start_partition=6, rng=random.Random(1))
    assert sorted(got) == [6, 7, 8]


def test_refusals():
    with pytest.raises(InvalidReplicationFactorError):
        assign_replicas({1: None, 2: None}, 1, 3)
    with pytest.raises(InvalidRequestError, match="Not all brokers have rack information"):
        assign_replicas({1: "a", 2: None}, 1, 1)
