"""The novelty score and flag: false alarms at the stated rate on inputs drawn like the
training inputs (binomial tolerance), detection of the shifts that matter."""

import numpy as np
import pytest

from bdeeponet.grf import rbf_grf
from bdeeponet.novelty import fit_novelty

X = np.linspace(0, 1, 100)


def grf(n, seed, length_scale=0.2):
    return rbf_grf(X, n, np.random.default_rng(seed), length_scale=length_scale)


def piecewise_linear(n, seed):
    """Another input family: linear between 9 equispaced knots of N(0, 1) values."""
    rng = np.random.default_rng(seed)
    knots = np.linspace(0, 1, 9)
    return np.array([np.interp(X, knots, rng.standard_normal(9)) for _ in range(n)])


@pytest.fixture(scope="module")
def model():
    return fit_novelty(grf(900, 0), grf(2000, 1))


@pytest.mark.parametrize("rate", [0.05, 0.2])
def test_false_alarms_at_the_stated_rate(model, rate):
    """Conformal: averaged over held-out sets, P(flag) is in [rate - 1/(n+1), rate] for n
    held-out functions; for one set of n = 2000 the rate itself varies with sd
    sqrt(rate (1 - rate) / n). Measured on 4000 fresh in-distribution inputs, within 4 sd
    of both. The rate is what moves it (0.05 against 0.2: the control)."""
    flagged = model.score(grf(4000, 2), rate)[1].mean()
    sd = np.sqrt(rate * (1 - rate) / 4000) + np.sqrt(rate * (1 - rate) / 2000)
    assert rate - 1 / 2001 - 4 * sd <= flagged <= rate + 4 * sd, flagged


@pytest.mark.parametrize("shift", ["l=0.1", "l=0.05", "amplitude x2", "piecewise linear"])
def test_shifted_inputs_are_flagged(model, shift):
    u = {"l=0.1": grf(300, 3, 0.1), "l=0.05": grf(300, 3, 0.05), "amplitude x2": 2 * grf(300, 3),
         "piecewise linear": piecewise_linear(300, 3)}[shift]
    novelty, novel = model.score(u)
    assert novel.mean() >= 0.9, (shift, novel.mean())
    assert np.median(novelty) > np.median(model.score(grf(300, 4))[0])


def test_too_few_held_out_functions_flag_nothing_and_score_nan():
    """With 10 held-out functions no threshold holds a 5% rate: none is flagged, and the
    score is NaN (not scored), not 0 (it read as perfectly typical)."""
    small = fit_novelty(grf(50, 5), grf(10, 6))
    novelty, novel = small.score(grf(20, 7, 0.05))
    assert np.isinf(small.threshold(0.05)) and not novel.any() and np.isnan(novelty).all()
    assert np.isfinite(small.threshold(0.2)) and np.isfinite(small.score(grf(2, 7), 0.2)[0]).all()


def test_a_rate_of_numpy_type_is_a_rate(model):
    for rate in (np.float32(0.05), np.float64(0.05), np.array(0.05)):
        assert np.array_equal(model.score(grf(3, 8), rate)[1], model.score(grf(3, 8), 0.05)[1])


@pytest.mark.parametrize("rate", [0.0, 1.0, -0.1, 2, float("nan"), True, "0.05",
                                  np.array([0.05])])
def test_bad_rates(model, rate):
    with pytest.raises(ValueError, match="false-alarm rate must be in"):
        model.score(grf(2, 8), rate)
