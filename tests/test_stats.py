"""The arithmetic of summary statistics (recorders.write.stats): each statistic against numpy in
float64, and merged over batches, shards and steps exactly as computed over everything at once."""

from __future__ import annotations

import numpy as np
import pytest

from recorders.write.stats import Stats, bin_of, check_edges

EDGES = np.linspace(0.0, 1.0, 21)  # a sigmoid's range in 20 bins
LOW, HIGH = 0.1, 0.9


def sigmoid_values(shape, seed=0):
    """float32 activations, with values on bin edges and thresholds, and at 0 and 1 exactly."""
    rng = np.random.default_rng(seed)
    v = (1 / (1 + np.exp(-3 * rng.standard_normal(shape)))).astype(np.float32)
    flat = v.reshape(-1)
    flat[::17] = EDGES[rng.integers(0, len(EDGES), flat[::17].shape)]
    flat[5::23] = np.float32(0.9)
    return v


def expected(values, mask, axes):
    """numpy float64, position by position: count, mean, m2, min, max, below, above, histogram."""
    v = np.moveaxis(np.asarray(values, np.float64), axes, range(-len(axes), 0))
    m = np.moveaxis(np.broadcast_to(mask, values.shape), axes, range(-len(axes), 0))
    shape = v.shape[: v.ndim - len(axes)]
    out = {
        k: np.zeros(shape, dtype)
        for k, dtype in [
            ("count", np.int64),
            ("mean", float),
            ("m2", float),
            ("minimum", float),
            ("maximum", float),
            ("below", np.int64),
            ("above", np.int64),
        ]
    }
    out["histogram"] = np.zeros((*shape, len(EDGES) + 1), np.int64)
    for index in np.ndindex(*shape):
        x = v[index][m[index]]
        out["count"][index] = len(x)
        out["mean"][index] = x.mean() if len(x) else np.nan
        out["m2"][index] = ((x - x.mean()) ** 2).sum() if len(x) else 0.0
        out["minimum"][index] = x.min() if len(x) else np.inf
        out["maximum"][index] = x.max() if len(x) else -np.inf
        out["below"][index] = (x < LOW).sum()
        out["above"][index] = (x > HIGH).sum()
        inside, _ = np.histogram(x, EDGES)
        out["histogram"][index] = [(x < EDGES[0]).sum(), *inside, (x > EDGES[-1]).sum()]
    return out


def check(stats: Stats, want: dict) -> None:
    for name in ("count", "below", "above", "histogram"):
        np.testing.assert_array_equal(getattr(stats, name), want[name], err_msg=name)
    for name in ("minimum", "maximum"):
        np.testing.assert_array_equal(getattr(stats, name), want[name], err_msg=name)
    for name in ("mean", "m2"):
        np.testing.assert_allclose(
            getattr(stats, name), want[name], rtol=1e-9, atol=1e-12, err_msg=name
        )


@pytest.mark.parametrize("kept", ["unit", "step"])
@pytest.mark.parametrize("masked", [False, True], ids=["every-step", "lengths"])
def test_each_statistic_equals_numpy(kept, masked):
    """[examples, steps, units] values, kept per unit (over examples and steps) or per step."""
    values = sigmoid_values((40, 9, 6))
    lengths = np.random.default_rng(1).integers(0, 10, 40)
    mask = (
        (np.arange(9)[None, :] < lengths[:, None])[:, :, None]
        if masked
        else np.ones((1, 1, 1), bool)
    )
    axes = (0, 1) if kept == "unit" else (0, 2)
    stats = Stats.of(values, axes, EDGES, LOW, HIGH, mask)
    check(stats, expected(values, mask, axes))
    np.testing.assert_allclose(
        stats.variance, expected(values, mask, axes)["m2"] / stats.count, rtol=1e-9
    )


@pytest.mark.parametrize("parts", [1, 4, 7])
def test_batches_merge_into_what_the_whole_gives(parts):
    """One worker against several: examples split into `parts` pieces (some empty), merged."""
    values = sigmoid_values((50, 8, 5), seed=2)
    mask = (np.arange(8)[None, :] < np.random.default_rng(3).integers(0, 9, 50)[:, None])[
        :, :, None
    ]
    cuts = np.array_split(np.arange(50), parts) + [np.arange(0)]
    pieces = [Stats.of(values[c], (0, 1), EDGES, LOW, HIGH, mask[c]) for c in cuts]
    merged = pieces[0]
    for p in pieces[1:]:
        merged = merged.merge(p)
    check(merged, expected(values, mask, (0, 1)))


def test_per_step_and_unit_statistics_reduce_to_per_unit():
    """What a graph computes per (step, unit) over a batch, merged over steps: per unit."""
    values = sigmoid_values((30, 12, 4), seed=4)
    mask = (np.arange(12)[None, :] < np.random.default_rng(5).integers(0, 13, 30)[:, None])[
        :, :, None
    ]
    per_step_unit = Stats.of(values, (0,), EDGES, LOW, HIGH, mask)
    check(per_step_unit.reduce(0), expected(values, mask, (0, 1)))
    check(per_step_unit.reduce(-1), expected(values, mask, (0, 2)))


def test_quantiles_are_within_a_bin_of_the_values():
    values = sigmoid_values((200, 5, 3), seed=6)
    stats = Stats.of(values, (0, 1), EDGES, LOW, HIGH)
    width = EDGES[1] - EDGES[0]
    flat = values.reshape(-1, 3).astype(np.float64)
    for q in (0.0, 0.1, 0.5, 0.9, 1.0):
        truth = np.quantile(flat, q, axis=0, method="inverted_cdf")
        got = stats.quantile(q)
        assert np.all(got >= truth) and np.all(got - truth <= width + 1e-12), (q, got, truth)
    with pytest.raises(ValueError, match="quantile 2"):
        stats.quantile(2)


def test_values_outside_the_bins_and_nothing_at_all():
    values = np.array([[-0.5, 0.0, 1.0, 1.5, np.nan]])
    assert bin_of(values, EDGES).tolist() == [[0, 1, 20, 21, -1]]
    empty = Stats.of(values, (1,), EDGES, LOW, HIGH, np.zeros_like(values, bool))
    assert empty.count.tolist() == [0] and np.isnan(empty.quantile(0.5)).all()
    assert np.isnan(empty.variance).all() and np.isnan(empty.mean).all()
    some = Stats.of(values[:, :4], (1,), EDGES, LOW, HIGH)
    assert some.histogram[0, 0] == 1 and some.histogram[0, -1] == 1
    both = empty.merge(some)
    check(both, expected(values[:, :4], np.ones((1, 4), bool), (1,)))
    with_nan = Stats.of(values, (1,), EDGES, LOW, HIGH)
    assert np.isnan(with_nan.mean).all() and np.isnan(with_nan.minimum).all()
    assert np.isnan(with_nan.merge(some).maximum).all() and with_nan.count.tolist() == [5]


def test_bins_that_do_not_increase_are_refused_in_one_line():
    for bad in ([0.0, 0.5, 0.5, 1.0], [1.0], [0.0, np.inf], [[0.0, 1.0]]):
        with pytest.raises(ValueError, match="each larger than the one before") as err:
            check_edges(bad)
        assert "\n" not in str(err.value)
    a = Stats.of(np.ones((2, 3)), (0,), EDGES, LOW, HIGH)
    b = Stats.of(np.ones((2, 3)), (0,), np.linspace(-1, 1, 21), LOW, HIGH)
    with pytest.raises(ValueError, match="different bins"):
        a.merge(b)
