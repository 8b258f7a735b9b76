"""The minimum detectable effect (measures.reporting): textbook values, and the power it promises checked by
drawing paired outcomes whose true difference is the MDE."""

from __future__ import annotations

import math

import numpy as np
import pytest

from rmsweb_kedro.measures import reporting


def test_power_multiplier_is_the_two_normal_quantiles():
    assert reporting.power_multiplier(0.95, 0.8) == pytest.approx(1.95996 + 0.84162, abs=1e-4)  # 2.8016
    assert reporting.power_multiplier(0.95, 0.9) == pytest.approx(1.95996 + 1.28155, abs=1e-4)
    assert reporting.power_multiplier(0.99, 0.8) == pytest.approx(2.57583 + 0.84162, abs=1e-4)


def test_sample_size_matches_textbook_values():
    # The normal-approximation paired sample size, n = ((z_{1-a/2} + z_power) sd / effect)^2: an effect of half
    # a standard deviation needs 31.4, so 32 pairs at 95 % and 80 %.
    assert reporting.pairs_needed(0.5, 1.0) == 32
    # Connor (1987)'s McNemar example as powerandsamplesize.com works it (p10 = 0.05, p01 = 0.45, two-sided 5 %,
    # 80 %): 23 pairs; and the discordant odds ratio 2 example (p10 = 0.30, p01 = 0.15): 155. Connor takes the
    # null's sqrt(p10 + p01) on the z_{1-a/2} term, the MDE's formula the alternative's on both, so the published
    # n lies between the MDE's formula with the alternative's and with the null's spread.
    for p10, p01, published in ((0.05, 0.45, 23), (0.30, 0.15, 155)):
        effect = abs(p10 - p01)
        alternative = reporting.pairs_needed(effect, reporting.discordance_sd(p10, p01))
        null = reporting.pairs_needed(effect, math.sqrt(p10 + p01))
        assert alternative <= published <= null
    # 7.849 x 0.4275 / 0.0225 = 149.1
    assert reporting.pairs_needed(0.15, reporting.discordance_sd(0.30, 0.15)) == 150
    # This project's experiment: 11 and 6 of 156 pairs discordant; +3 points need ~900 pairs, not 156
    needed = reporting.pairs_needed(0.03, reporting.discordance_sd(11 / 156, 6 / 156))
    assert 850 < needed < 950


def test_mde_and_sample_size_are_inverse():
    sd = reporting.discordance_sd(0.07, 0.04)
    assert sd == pytest.approx(math.sqrt(0.11 - 0.03**2))
    for n in (101, 156, 532, 1596):
        mde = reporting.minimum_detectable_effect(sd, n)
        assert reporting.pairs_needed(mde, sd) in (n, n + 1)  # ceil of a float that is n up to rounding
    assert reporting.minimum_detectable_effect(sd, 0) is None
    # four times the pairs halve the MDE
    assert reporting.minimum_detectable_effect(sd, 624) == pytest.approx(
        reporting.minimum_detectable_effect(sd, 156) / 2
    )


def test_interval_mde_reads_the_half_width_as_z_standard_errors():
    se = 0.02
    low, high = 0.01 - 1.959964 * se, 0.01 + 1.959964 * se  # a normal 95 % interval
    assert reporting.interval_mde(low, high) == pytest.approx(2.80158 * se, rel=1e-5)
    assert reporting.interval_mde(None, None) is None


def test_pooled_mde_over_seeds():
    rng = np.random.default_rng(3)
    one = rng.choice([-1.0, 0.0, 1.0], p=[0.04, 0.89, 0.07], size=(156, 1))
    b, c = float(np.mean(one == 1)), float(np.mean(one == -1))
    # one seed: the paired MDE of its discordance
    assert reporting.pooled_seeds_mde(one) == pytest.approx(
        reporting.minimum_detectable_effect(reporting.discordance_sd(b, c), 156)
    )
    # seeds that win and lose the same items add nothing
    same = np.repeat(one, 3, axis=1)
    assert reporting.pooled_seeds_mde(same) == pytest.approx(reporting.pooled_seeds_mde(one))
    # seeds that only shift every item alike: the spread of the seeds' means over 3 seeds, whatever the items
    shifted = np.zeros((156, 3)) + [0.0, 0.03, 0.06]
    assert reporting.pooled_seeds_mde(shifted) == pytest.approx(2.80158 * math.sqrt(0.0006 / 3), rel=1e-4)
    independent = rng.choice([-1.0, 0.0, 1.0], p=[0.04, 0.89, 0.07], size=(156, 3))
    # the standard error it uses is the one the two-way bootstrap's interval spreads by
    for grid in (same, independent):
        low, high = reporting.pooled_seed_bootstrap(grid, 4000, 0)
        assert reporting.pooled_seeds_mde(grid) == pytest.approx(reporting.interval_mde(low, high), rel=0.06)
    assert reporting.pooled_seeds_mde(one[:1]) is None


def normal_test_resolves(tables: np.ndarray, n: int) -> float:
    """The share of 2x2 tables (rows b, c, rest) whose normal 95 % test of (b - c)/n rejects 0."""
    b, c = tables[:, 0], tables[:, 1]
    difference = (b - c) / n
    se = np.sqrt((b + c) / n - difference**2) / math.sqrt(n)
    return float(np.mean(np.abs(difference) > reporting.z_score(0.95) * se))


def test_a_true_difference_the_size_of_the_mde_is_resolved_at_the_stated_power():
    """Paired 0/1 outcomes drawn with p01 = 0.035 and p10 = p01 + MDE (the MDE of that discordance at n = 900,
    solved for), 4,000 times with a fixed seed: the normal test and the report's Newcombe interval both resolve
    about 80 % of them; at half the MDE, about 29 %."""
    n, p01 = 900, 0.035
    effect = 0.03
    for _ in range(50):  # the MDE depends on p10 = p01 + MDE: a fixed point
        effect = reporting.minimum_detectable_effect(reporting.discordance_sd(p01 + effect, p01), n)
    assert effect == pytest.approx(0.0293, abs=1e-3)

    def draw(true: float, seed: int) -> np.ndarray:
        return np.random.default_rng(seed).multinomial(n, [p01 + true, p01, 1 - 2 * p01 - true], size=4000)

    tables = draw(effect, 0)
    assert normal_test_resolves(tables, n) == pytest.approx(0.8, abs=0.03)
    newcombe = [
        reporting.paired_difference_interval(0, int(b), int(c), n - int(b) - int(c))
        for b, c in tables[:1000, :2]
    ]
    assert np.mean([low > 0 for low, _ in newcombe]) == pytest.approx(0.8, abs=0.05)
    assert 0.25 < normal_test_resolves(draw(effect / 2, 1), n) < 0.4  # Phi(2.80 / 2 - 1.96) = 0.29
