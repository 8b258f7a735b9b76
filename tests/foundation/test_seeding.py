"""contracts/seeding.py, the home of seeded draws: each helper draws what its documented expression draws (the
family and seed derivation its callers' data was made with), the same seed gives the same draw, and the
prioritised draw takes the pool first."""

from __future__ import annotations

import hashlib
import random

import numpy as np
import polars as pl
import pytest

from rmsweb_kedro.contracts.seeding import (
    bootstrap_indices,
    draw_up_to,
    pool_first,
    sample_rows,
    seeded_rng,
    shuffled,
    stable_rng,
)


def test_stable_rng_is_the_sha256_of_the_joined_keys():
    digest = hashlib.sha256(b"split|0|shop").digest()
    assert (
        stable_rng("split", 0, "shop").random() == random.Random(int.from_bytes(digest[:8], "big")).random()
    )
    assert stable_rng("split", 0, "shop").random() != stable_rng("split", 1, "shop").random()


def test_seeded_rng_is_the_seed_or_the_colon_joined_string():
    """An int seed alone is Random(seed); with keys, Random("seed:key:...") (the scripted teacher's streams)."""
    assert seeded_rng(0).sample(range(10), 3) == [6, 9, 0]  # random.Random(0).sample(range(10), 3)
    assert seeded_rng(3, "shop-1").random() == random.Random("3:shop-1").random()
    assert seeded_rng(3, "shop-1", "longer").random() == random.Random("3:shop-1:longer").random()
    assert seeded_rng(3).random() != seeded_rng(3, "shop-1").random()  # Random(3) is not Random("3")


def test_draw_up_to_keeps_everything_without_drawing_or_a_sorted_sample():
    items = list("hgfedcba")
    rng = seeded_rng(1)
    state = rng.getstate()
    assert draw_up_to(items, None, rng) == items and draw_up_to(items, 8, rng) == items
    assert rng.getstate() == state  # nothing drawn: a later draw from the same generator is unchanged
    # 3 of 8: random.Random(1).sample(items, 3) is ['f', 'd', 'h'] in draw order; returned sorted
    assert random.Random(1).sample(items, 3) == ["f", "d", "h"]
    assert draw_up_to(items, 3, seeded_rng(1)) == ["d", "f", "h"]
    assert draw_up_to(items, 3, seeded_rng(1), key=items.index) == ["h", "f", "d"]  # by position
    assert draw_up_to(items, 0, seeded_rng(1)) == []
    # two draws from one generator follow each other: the second is not the first again
    rng = seeded_rng(1)
    assert draw_up_to(items, 3, rng) != draw_up_to(items, 3, rng)


def test_sample_rows_and_shuffled_are_polars_seeded_shuffled_samples():
    frame = pl.DataFrame({"a": range(6)})
    assert sample_rows(frame, 3, 0)["a"].to_list() == frame.sample(n=3, shuffle=True, seed=0)["a"].to_list()
    assert sample_rows(frame, 3, 0).equals(sample_rows(frame, 3, 0))
    assert shuffled(frame, 0).equals(frame.sample(fraction=1.0, shuffle=True, seed=0))  # collection's shuffle
    assert sorted(shuffled(frame, 0)["a"]) == list(range(6)) and shuffled(frame, 0)["a"].to_list() != list(
        range(6)
    )
    assert sample_rows(frame.head(0), 0, 0).height == 0


def test_pool_first_takes_the_pool_then_fills_from_the_rest():
    def head(part, n):  # a draw that keeps the order, so the expected parts can be read off by hand
        return part[:n]

    pool, rest = ["p1", "p2"], ["r1", "r2", "r3"]
    assert pool_first(pool, rest, 3, head) == (["p1", "p2"], ["r1"])
    assert pool_first(pool, rest, 1, head) == (["p1"], [])  # the pool alone when it fills the budget
    assert pool_first(pool, rest, 9, head) == (["p1", "p2"], ["r1", "r2", "r3"])
    assert pool_first([], rest, 2, head) == ([], ["r1", "r2"])  # no pool: one draw over the rest
    # one shared generator: the pool's draw comes first (random.Random(0).sample(pool3, 3) == p2, p3, p1), then
    # the rest's from the same stream
    pool3 = ["p1", "p2", "p3"]
    reference = random.Random(0)
    expected = (reference.sample(pool3, 3), reference.sample(rest, 1))
    assert pool_first(pool3, rest, 4, seeded_rng(0).sample) == expected == (["p2", "p3", "p1"], expected[1])
    # tables: each part a polars draw of its own from the same seed
    rows = pl.DataFrame({"id": range(10), "pooled": [i % 3 == 0 for i in range(10)]})
    first, then = pool_first(
        rows.filter(pl.col("pooled")), rows.filter(~pl.col("pooled")), 6, lambda p, n: sample_rows(p, n, 5)
    )
    assert first["pooled"].all() and first.height == 4 and then.height == 2 and not then["pooled"].any()
    assert first.equals(sample_rows(rows.filter(pl.col("pooled")), 4, 5))


def test_bootstrap_indices_resample_each_size_from_one_numpy_generator():
    (rows,) = bootstrap_indices(0, 2, 3)
    assert rows.tolist() == [[2, 1, 1], [0, 0, 0]]  # np.random.default_rng(0).integers(0, 3, size=(2, 3))
    rng = np.random.default_rng(7)
    items, seeds = bootstrap_indices(7, 50, 4, 3)
    assert np.array_equal(items, rng.integers(0, 4, size=(50, 4)))  # the items' draw first
    assert np.array_equal(seeds, rng.integers(0, 3, size=(50, 3)))  # then the seeds', from the same generator
    assert items.shape == (50, 4) and items.min() >= 0 and items.max() <= 3


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_same_seed_gives_the_same_draw(seed: int):
    frame = pl.DataFrame({"a": range(20)})
    assert seeded_rng(seed, "k").random() == seeded_rng(seed, "k").random()
    assert draw_up_to(range(20), 5, seeded_rng(seed)) == draw_up_to(range(20), 5, seeded_rng(seed))
    assert shuffled(frame, seed).equals(shuffled(frame, seed))
    assert np.array_equal(bootstrap_indices(seed, 9, 4)[0], bootstrap_indices(seed, 9, 4)[0])
