"""Epoch order: permutation property proven (not assumed) over many sizes, determinism, scale."""

import subprocess
import sys
import tracemalloc

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jaxload.sampling.permutation import EpochOrder, KeyedPermutation, round_keys, stream_key


def _primes(limit):
    sieve = np.ones(limit + 1, bool)
    sieve[:2] = False
    for i in range(2, int(limit**0.5) + 1):
        if sieve[i]:
            sieve[i * i :: i] = False
    return np.flatnonzero(sieve)


POW2_NEIGHBOURS = sorted({n for k in range(1, 21) for n in (2**k - 1, 2**k, 2**k + 1)})
PRIMES = [int(p) for p in _primes(2000)[::25]] + [65_521, 65_537, 1_000_003]
AWKWARD = sorted({1, 2, 3, *POW2_NEIGHBOURS, *PRIMES, 10**6})


def _perm(n, seed=0, epoch=0):
    keys = round_keys(stream_key(seed, 0), np.array([epoch]))
    return KeyedPermutation(n)(np.arange(n), keys)


def _is_permutation(values, n):
    return values.shape == (n,) and np.array_equal(
        np.bincount(values, minlength=n), np.ones(n, int)
    )


def test_keyed_permutation_exhaustive_small_sizes():
    for n in range(0, 513):
        for seed, epoch in ((0, 0), (2**63 + 5, 2**40)):
            y = _perm(n, seed, epoch)
            assert _is_permutation(y, n), (n, seed, epoch)


@pytest.mark.parametrize("n", AWKWARD)
def test_keyed_permutation_awkward_sizes(n):
    keys = round_keys(stream_key(3, 0), np.array([11]))
    perm = KeyedPermutation(n)
    y = perm(np.arange(n), keys)
    assert _is_permutation(y, n)
    assert np.array_equal(perm.inverse(y, keys), np.arange(n))


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(1, 300_000),
    seed=st.integers(0, 2**64 - 1),
    epoch=st.integers(0, 2**32),
)
def test_keyed_permutation_property(n, seed, epoch):
    assert _is_permutation(_perm(n, seed, epoch), n)


def _reference_anchors(lengths, first, last):
    """The O(frames) definition: dataset positions of all valid anchors, in source order."""
    out, start = [], 0
    for length in lengths:
        out.extend(range(start + first, start + length - last))
        start += length
    return np.array(out, np.int64)


@settings(max_examples=80, deadline=None)
@given(
    lengths=st.lists(st.integers(0, 40), min_size=1, max_size=30),
    first=st.integers(0, 5),
    last=st.integers(0, 5),
    seed=st.integers(0, 2**32),
    shuffle=st.booleans(),
)
def test_each_epoch_visits_every_valid_anchor_once(lengths, first, last, seed, shuffle):
    expected = _reference_anchors(lengths, first, last)
    if expected.size == 0:
        return
    order = EpochOrder(
        lengths, seed=seed, shuffle=shuffle, drop_n_first_frames=first, drop_n_last_frames=last
    )
    n = order.num_anchors
    assert n == expected.size
    for epoch in range(3):
        got = order.positions(np.arange(epoch * n, (epoch + 1) * n))
        assert np.array_equal(np.sort(got), expected)
        if not shuffle:
            assert np.array_equal(got, expected)


@pytest.mark.parametrize("n", [1, 2, 3, 7, 31, 32, 33, 127, 128, 129, 997, 1024, 4097])
def test_epoch_order_many_lengths(n):
    # One episode of n frames, and the same n anchors scattered over many short episodes.
    rng = np.random.default_rng(n)
    cuts = np.sort(rng.integers(0, n + 1, size=5))
    split = np.diff(np.concatenate([[0], cuts, [n]]))
    for lengths in ([n], split):
        order = EpochOrder(lengths, seed=n)
        for epoch in (0, 1, 5):
            got = order.positions(np.arange(epoch * n, (epoch + 1) * n))
            assert _is_permutation(got, n)


def test_batches_spanning_epochs_are_consistent():
    order = EpochOrder([13, 0, 4, 9], seed=5)
    n = order.num_anchors
    whole = order.positions(np.arange(4 * n))
    pieces = np.concatenate(
        [order.positions(np.arange(s, min(s + 7, 4 * n))) for s in range(0, 4 * n, 7)]
    )
    assert np.array_equal(whole, pieces)


def test_orders_differ_across_seeds_and_epochs():
    n = 50
    orders = {
        tuple(EpochOrder([n], seed=seed).positions(np.arange(e * n, (e + 1) * n)))
        for seed in range(6)
        for e in range(6)
    }
    assert len(orders) == 36


def test_order_is_a_reasonable_shuffle():
    # Where element 0 lands, over many epochs, is close to uniform (chi-square, 7 dof).
    n, epochs = 8, 8000
    order = EpochOrder([n], seed=0)
    landing = order.ranks(np.arange(epochs * n)).reshape(epochs, n).argmin(axis=1)
    counts = np.bincount(landing, minlength=n)
    chi2 = (((counts - epochs / n) ** 2) / (epochs / n)).sum()
    assert chi2 < 30, counts  # p < 1e-4 for 7 degrees of freedom


def test_small_orders_reach_every_permutation_evenly():
    # n = 4: all 24 orders appear over the epochs, none over- or under-represented (chi-square, 23 dof).
    n, epochs = 4, 12_000
    ranks = EpochOrder([n], seed=0).ranks(np.arange(epochs * n)).reshape(epochs, n)
    codes = (ranks * n ** np.arange(n)).sum(axis=1)
    counts = np.unique(codes, return_counts=True)[1]
    assert counts.size == 24
    chi2 = (((counts - epochs / 24) ** 2) / (epochs / 24)).sum()
    assert chi2 < 60, counts  # p < 1e-4


def test_shuffle_false_is_source_order_every_epoch():
    order = EpochOrder([3, 5, 2], shuffle=False, drop_n_first_frames=1)
    assert order.positions(np.arange(10)).tolist() == [1, 2, 4, 5, 6, 7, 9, 1, 2, 4]


def test_short_episodes_contribute_no_anchors():
    order = EpochOrder([2, 10, 1, 3], drop_n_first_frames=1, drop_n_last_frames=1)
    assert order.num_anchors == 0 + 8 + 0 + 1
    assert sorted(order.positions(np.arange(9)).tolist()) == [*range(3, 11), 14]


def test_no_anchors_is_a_clear_error():
    order = EpochOrder([2, 2], drop_n_last_frames=2)
    with pytest.raises(ValueError, match="no valid anchors"):
        order.positions(np.arange(1))


GOLDEN = [2, 3, 11, 0, 4, 10, 1, 8, 5, 6]


def test_order_is_pinned():
    # A fixed value: the order must not change across numpy versions, platforms or refactors.
    order = EpochOrder([4, 7, 6], seed=1234)
    assert order.positions(np.arange(10)).tolist() == GOLDEN


@pytest.mark.processes
def test_same_order_in_a_fresh_process():
    code = (
        "import numpy as np; from jaxload.sampling.permutation import EpochOrder;"
        "o = EpochOrder([5, 1000, 37, 2], seed=99, drop_n_first_frames=1);"
        "print(o.positions(np.arange(3 * o.num_anchors)).tolist())"
    )
    here = EpochOrder([5, 1000, 37, 2], seed=99, drop_n_first_frames=1)
    expected = here.positions(np.arange(3 * here.num_anchors)).tolist()
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert eval(out.stdout) == expected


def test_index_is_o_episodes_at_scale():
    # 10^9 frames in 10^6 episodes: the index is O(episodes) (a few tens of MB, never one
    # entry per frame), and a query allocates O(query), not O(epoch). Memory, not time, is
    # asserted: it is exact on any machine (speed lives in benchmarks/).
    lengths = np.full(10**6, 1000, np.int64)
    tracemalloc.start()
    order = EpochOrder(lengths, seed=0, drop_n_first_frames=2, drop_n_last_frames=3)
    held, peak = tracemalloc.get_traced_memory()
    tracemalloc.reset_peak()
    assert order.num_anchors == 995 * 10**6
    assert peak < 40e6, peak
    pos = order.positions(np.arange(10**9 - 4096, 10**9 + 4096))  # spans an epoch boundary
    _, query_peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert query_peak - held < 4e6, query_peak - held  # 8,192 positions: ~2 MB here
    frame = pos % 1000
    assert frame.min() >= 2 and frame.max() <= 996
