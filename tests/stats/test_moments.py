"""Exact streaming moments (jaxload.stats.moments.Moments): blocks streamed or merged in
any order give numpy's count, mean, population std, min and max of all rows."""

import numpy as np

from jaxload.stats import Moments


def _data(seed=0):
    rng = np.random.default_rng(seed)
    return np.concatenate([rng.normal(1e6, 1.0, (500, 3)), rng.normal(1e6, 50.0, (300, 3))])


def test_streamed_blocks_give_numpys_moments_of_all_rows():
    x = _data()
    m = Moments(3)
    for block in np.array_split(x, [1, 2, 100, 100, 700]):  # sizes 1, 1, 98, 0, 600, 100
        m.update(block)
    assert m.count == len(x)
    np.testing.assert_allclose(m.mean, x.mean(0), rtol=1e-14)
    np.testing.assert_allclose(m.std, x.std(0), rtol=1e-9)  # population std, large offset
    assert (m.min == x.min(0)).all() and (m.max == x.max(0)).all()


def test_merging_in_any_order_gives_the_same_moments():
    x = _data(1)
    parts = [x[:10], x[10:400], x[400:]]
    merged = []
    for order in ([0, 1, 2], [2, 0, 1], [1, 2, 0]):
        total = Moments(3)
        for i in order:
            part = Moments(3)
            part.update(parts[i])
            total.merge(part)
        merged.append(total)
    for m in merged:
        assert m.count == len(x)
        np.testing.assert_allclose(m.mean, x.mean(0), rtol=1e-14)
        np.testing.assert_allclose(m.std, x.std(0), rtol=1e-9)


def test_empty_moments_change_nothing_and_have_zero_std():
    m = Moments(2)
    assert m.count == 0 and (m.std == 0).all() and (m.min == np.inf).all()
    m.update(np.zeros((0, 2)))
    m.merge(Moments(2))
    assert m.count == 0 and (m.mean == 0).all()
    m.update(np.array([[1.0, -2.0]]))
    empty = Moments(2)
    empty.merge(m)
    assert empty.count == 1 and empty.mean.tolist() == [1.0, -2.0] and (empty.std == 0).all()
