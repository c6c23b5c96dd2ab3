"""The accuracy and uncertainty metrics against values known exactly or in distribution.

Every statistical check states its tolerance from the Monte Carlo spread of the estimate
(standard errors computed from the same draws, or binomial standard errors), and each uses a
fixed seed that was not chosen to make it pass.
"""

import math

import numpy as np
import pytest
import torch
from scipy.signal import lfilter
from scipy.stats import norm

from bdeeponet.metrics import (
    NOMINAL_LEVELS,
    all_metrics,
    calibration,
    convergence,
    coverage,
    effective_sample_size,
    ess_bulk,
    ess_tail,
    gaussian_crps,
    gaussian_nll,
    relative_errors,
    rhat,
)

torch.set_num_threads(1)

SQRT_PI = math.sqrt(math.pi)


def a(*rows):
    return np.array(rows, dtype=np.float64)


# ---------------------------------------------------------------------------- relative errors


def test_relative_errors_hand_computed_and_averaged_per_function():
    # function 1: s = (1, 2, 2), |s|_1 = 5, |s|_2 = 3; mean - s = (0, 0, 2)
    #   e1 = 100 * 2/5 = 40, e2 = 100 * 2/3
    # function 2: s = (3, 4, 0), |s|_1 = 7, |s|_2 = 5; mean - s = (-3, 0, 0)
    #   e1 = 100 * 3/7, e2 = 100 * 3/5 = 60
    s = a([1, 2, 2], [3, 4, 0])
    mean = a([1, 2, 4], [0, 4, 0])
    e1, e2 = relative_errors(mean, s)
    assert e1 == pytest.approx((40 + 300 / 7) / 2, rel=1e-12)
    assert e2 == pytest.approx((200 / 3 + 60) / 2, rel=1e-12)
    # per-function averaging, not pooled norms (pooled: 100*5/12 and 100*sqrt(13/34))
    assert abs(e1 - 500 / 12) > 0.1 and abs(e2 - 100 * math.sqrt(13 / 34)) > 0.1
    assert relative_errors(s, s) == (0.0, 0.0)


# ---------------------------------------------------------------------------- NLL


def test_gaussian_nll_hand_computed():
    # truth at the mean, std 1: 0.5 log(2 pi)
    assert gaussian_nll(a([0.0]), a([1.0]), a([0.0])) == pytest.approx(0.5 * math.log(2 * math.pi))
    # mean 1, std 2, truth 4: 0.5 log(2 pi 4) + 9 / 8
    assert gaussian_nll(a([1.0]), a([2.0]), a([4.0])) == pytest.approx(
        0.5 * math.log(8 * math.pi) + 9 / 8, rel=1e-12)
    # the mean over entries of both cases
    got = gaussian_nll(a([0.0, 1.0]), a([1.0, 2.0]), a([0.0, 4.0]))
    assert got == pytest.approx((0.5 * math.log(2 * math.pi) + 0.5 * math.log(8 * math.pi) + 9 / 8) / 2)


def test_gaussian_nll_equals_minus_scipy_logpdf():
    rng = np.random.default_rng(0)
    mean, std, s = rng.normal(size=(5, 7)), rng.uniform(0.1, 3, (5, 7)), rng.normal(size=(5, 7))
    assert gaussian_nll(mean, std, s) == pytest.approx(
        -norm.logpdf(s, loc=mean, scale=std).mean(), rel=1e-12)


# ---------------------------------------------------------------------------- CRPS
# CRPS(N(mu, sigma^2), y) = sigma [w (2 Phi(w) - 1) + 2 phi(w) - 1/sqrt(pi)], w = (y - mu)/sigma.

PHI_1, PDF_1 = 0.8413447460685429, 0.24197072451914337  # Phi(1), phi(1) = exp(-1/2)/sqrt(2 pi)


def test_gaussian_crps_hand_computed():
    # w = 0: sigma (2/sqrt(2 pi) - 1/sqrt(pi)) = sigma (sqrt(2) - 1)/sqrt(pi) ~ 0.2337 sigma
    at_mean = (math.sqrt(2) - 1) / SQRT_PI
    assert gaussian_crps(a([0.0]), a([1.0]), a([0.0])) == pytest.approx(at_mean, rel=1e-12)
    assert gaussian_crps(a([5.0]), a([3.0]), a([5.0])) == pytest.approx(3 * at_mean, rel=1e-12)
    # w = 1: 1 * (2 Phi(1) - 1) + 2 phi(1) - 1/sqrt(pi) = 0.60244135...
    at_one = (2 * PHI_1 - 1) + 2 * PDF_1 - 1 / SQRT_PI
    assert at_one == pytest.approx(0.6024413576, abs=1e-10)
    # shifted and scaled: mu = 1, sigma = 2, y = 3 (w = 1) and y = -1 (w = -1, symmetric)
    assert gaussian_crps(a([1.0]), a([2.0]), a([3.0])) == pytest.approx(2 * at_one, rel=1e-12)
    assert gaussian_crps(a([1.0]), a([2.0]), a([-1.0])) == pytest.approx(2 * at_one, rel=1e-12)
    # averaged over entries
    got = gaussian_crps(a([0.0, 1.0]), a([1.0, 2.0]), a([0.0, 3.0]))
    assert got == pytest.approx((at_mean + 2 * at_one) / 2, rel=1e-12)


def test_gaussian_crps_far_tail_and_point_forecast():
    # far from the mean CRPS -> |y - mu| - sigma/sqrt(pi) (Phi -> 1, phi -> 0)
    assert gaussian_crps(a([0.0]), a([1.0]), a([40.0])) == pytest.approx(40 - 1 / SQRT_PI, rel=1e-12)
    # std 0 (floored): a point forecast, whose CRPS is the absolute error
    mean, s = a([0.0, 1.0, -2.0]), a([0.5, 1.0, 1.0])
    assert gaussian_crps(mean, np.zeros(3), s) == pytest.approx(np.abs(s - mean).mean(), abs=1e-11)


@pytest.mark.parametrize("mu, sigma, y", [(0.0, 1.0, 0.0), (1.0, 2.0, 3.0), (-2.0, 0.5, 0.3)])
def test_gaussian_crps_matches_monte_carlo_energy_form(mu, sigma, y):
    """CRPS(F, y) = E|X - y| - E|X - X'|/2 with X, X' ~ F independent, estimated by the mean
    of |X_i - y| - |X_i - X'_i|/2 over N pairs; its standard error is the sample std / sqrt(N),
    and the closed form must lie within 4 standard errors."""
    rng = np.random.default_rng(20240601)
    n = 400_000
    x, x2 = rng.normal(mu, sigma, n), rng.normal(mu, sigma, n)
    terms = np.abs(x - y) - 0.5 * np.abs(x - x2)
    est, se = terms.mean(), terms.std(ddof=1) / math.sqrt(n)
    exact = gaussian_crps(a([mu]), a([sigma]), a([y]))
    assert abs(est - exact) < 4 * se
    assert 4 * se < 0.02 * exact  # the check resolves a 2% error in the closed form


# ---------------------------------------------------------------------------- coverage


def test_coverage_constructed_example():
    # truths at chosen multiples k of std: |k| <= 2 is inside (the boundary counts)
    k = a([0.5, 1.5, 2.5, -1.9], [3.0, -3.0, 0.0, -2.0])  # inside: 3/4 and 2/4
    mean = a([1.0, -2.0, 0.0, 4.0], [0.0, 1.0, 2.0, 1.0])
    std = a([0.5, 2.0, 1.0, 0.25], [1.0, 0.5, 4.0, 0.5])
    s = mean + k * std  # exact in binary floating point for these values
    assert coverage(mean, std, s) == pytest.approx(100 * (3 / 4 + 2 / 4) / 2)
    # z = 3: everything is inside; z = 0.25: only the truth at the mean
    assert coverage(mean, std, s, z=3.0) == 100.0
    assert coverage(mean, std, s, z=0.25) == pytest.approx(100 * (0 + 1 / 4) / 2)


def test_calibration_constructed_example():
    # truths at w = 0.6, 1.0, 1.5, 1.8, 2.2, 3.0 std: the central intervals' z are
    # 0.674 (50%), 1.282 (80%), 1.645 (90%), 1.960 (95%), 2.576 (99%)
    w = a([0.6, -1.0, 1.5, -1.8, 2.2, 3.0])
    mean, std = a([0.0, 1.0, -1.0, 2.0, 0.5, 0.0]), a([1.0, 2.0, 0.5, 1.5, 3.0, 0.1])
    got = calibration(mean, std, mean + w * std)
    assert list(got) == ["0.5", "0.8", "0.9", "0.95", "0.99"]
    for j, key in enumerate(got):
        assert got[key] == pytest.approx(100 * (j + 1) / 6)


@pytest.mark.parametrize("level", NOMINAL_LEVELS)
def test_calibration_uses_the_exact_gaussian_quantile(level):
    """Truths a hair inside and outside z = Phi^{-1}((1 + level)/2) (scipy's quantile)."""
    z = norm.ppf((1 + level) / 2)
    w = a([z * (1 - 1e-9), -z * (1 - 1e-9), z * (1 + 1e-9), -z * (1 + 1e-9)])
    got = calibration(np.zeros((1, 4)), np.ones((1, 4)), w, levels=(level,))
    assert got == {f"{level:g}": pytest.approx(50.0)}


def test_calibration_of_gaussian_draws_is_within_binomial_error():
    """Truths drawn from the predictive N(mean, std^2) (heteroscedastic): the observed coverage
    at each nominal level p is a binomial proportion of N draws, within 4 sqrt(p(1-p)/N)."""
    rng = np.random.default_rng(7)
    shape = (200, 500)
    n = shape[0] * shape[1]
    mean, std = rng.normal(0, 3, shape), rng.uniform(0.01, 5, shape)
    s = mean + std * rng.standard_normal(shape)
    got = calibration(mean, std, s)
    for level in NOMINAL_LEVELS:
        se = 100 * math.sqrt(level * (1 - level) / n)
        assert abs(got[f"{level:g}"] - 100 * level) < 4 * se
    # e3 (z = 2) has nominal level erf(2/sqrt 2) = 95.45%
    p2 = math.erf(2 / math.sqrt(2))
    assert abs(coverage(mean, std, s) - 100 * p2) < 4 * 100 * math.sqrt(p2 * (1 - p2) / n)
    # a band twice too wide is detected: its 50% interval covers P(|Z| <= 1.349) = 82%
    assert got["0.5"] < 55 and calibration(mean, 2 * std, s)["0.5"] > 75


def test_all_metrics_is_consistent_with_the_parts():
    rng = np.random.default_rng(3)
    mean, std = rng.normal(size=(4, 6)), rng.uniform(0.5, 1.5, (4, 6))
    s = mean + rng.normal(size=(4, 6))
    out = all_metrics(mean, std, s, z=1.5)
    assert (out["e1"], out["e2"]) == relative_errors(mean, s)
    assert out["e3"] == coverage(mean, std, s, 1.5)
    assert out["band_width"] == pytest.approx(3.0 * std.mean())
    assert out["nll"] == gaussian_nll(mean, std, s)
    assert out["crps"] == gaussian_crps(mean, std, s)
    assert out["calibration"] == calibration(mean, std, s)


# ---------------------------------------------------------------------------- ESS


def ar1(rng, rho, n_chains, n):
    """Stationary AR(1) chains x_t = rho x_{t-1} + sqrt(1 - rho^2) eps_t, x_{-1} ~ N(0, 1)."""
    eps = rng.standard_normal((n_chains, n))
    x_prev = rng.standard_normal((n_chains, 1))
    return lfilter([math.sqrt(1 - rho**2)], [1.0, -rho], eps, axis=1, zi=rho * x_prev)[0]


@pytest.mark.parametrize("rho", [0.0, 0.5, 0.9, -0.5])
def test_effective_sample_size_of_ar1_chains(rho):
    """ESS of an AR(1) chain is n (1 - rho)/(1 + rho) (integrated autocorrelation time
    tau = 1 + 2 sum_k rho^k = (1 + rho)/(1 - rho)). For rho < 0 that is MORE than n (3n at
    rho = -0.5): Geyer's pairs rho_2k + rho_2k+1 = rho^2k (1 + rho) are all positive, so the
    implementation does not truncate anti-correlated chains and must not cap them at n.

    Tolerance: K independent chains give ratios ESS / expected with sample mean m and
    standard error se. Besides Monte Carlo noise, the initial positive sequence has a known
    O(n^-1/2) downward bias in ESS: past the true cutoff it keeps adding noise pairs (each
    ~ N(0, 2/n) for white noise) while they are positive, which inflates tau by about
    sum_j 2^-j 2 sqrt(2/n) sqrt(2/pi) = 2.26/sqrt(n) for white noise (a heuristic that ignores
    the correlation between pairs; simulations give 1.5-2.5/sqrt(n), and the same order for
    the other rho, whose lag noise is larger but whose tau is too). So m must lie within
    4 se + 3/sqrt(n) of 1: about 3-6% at n = 20000, small enough to catch any error in the
    factor 2, the initial -1, the pairing, or the autocovariance normalisation.
    """
    rng = np.random.default_rng(2024)
    n, k = 20_000, 100
    expected = n * (1 - rho) / (1 + rho)
    ratios = np.array([effective_sample_size(x) for x in ar1(rng, rho, k, n)]) / expected
    m, se = ratios.mean(), ratios.std(ddof=1) / math.sqrt(k)
    assert abs(m - 1) < 4 * se + 3 / math.sqrt(n), (m, se)
    assert 4 * se < 0.08  # the Monte Carlo spread does not swamp the check


def test_effective_sample_size_degenerate_chains():
    assert effective_sample_size(np.ones(50)) == 50.0  # constant: no variance
    assert effective_sample_size(np.array([1.0, 2.0, 0.5])) == 3.0  # too short to estimate
    # the period-2 chain +1, -1, ...: rho_k = (-1)^k (1 - k/n), every Geyer pair is 1/n, so
    # tau = -1 + 2 (n/2)(1/n) = 0 up to rounding and is clamped at 1e-12: a huge but finite,
    # positive ESS (its mean is known exactly after any even number of steps)
    alt = np.tile([1.0, -1.0], 50)
    assert 1e10 < effective_sample_size(alt) < np.inf


def _ar1_chains(rng, rho, chains, n):
    x = np.empty((chains, n))
    x[:, 0] = rng.standard_normal(chains)
    for t in range(1, n):
        x[:, t] = rho * x[:, t - 1] + np.sqrt(1 - rho**2) * rng.standard_normal(chains)
    return x


@pytest.mark.parametrize(("rho", "chains", "n", "shift", "cube"), [
    (0.0, 4, 500, 0.0, False), (0.9, 4, 1000, 0.0, False), (0.95, 3, 600, 0.5, False),
    (0.7, 8, 300, 0.0, True), (0.5, 2, 800, 0.0, False),
])
def test_rhat_and_ess_match_arviz(rho, chains, n, shift, cube):
    """Rank-normalised split R̂, bulk and tail ESS against the maintained implementation
    (arviz-stats), on AR(1) chains, shifted chains and a skewed (cubed) target."""
    from arviz_stats.base import array_stats

    x = _ar1_chains(np.random.default_rng(7), rho, chains, n)
    x[0] += shift
    x = x**3 if cube else x
    kw = dict(chain_axis=0, draw_axis=1)
    assert rhat(x) == pytest.approx(array_stats.rhat(x, method="rank", **kw), rel=1e-9)
    assert ess_bulk(x) == pytest.approx(array_stats.ess(x, method="bulk", **kw), rel=0.01)
    assert ess_tail(x) == pytest.approx(
        array_stats.ess(x, method="tail", prob=(0.05, 0.95), **kw), rel=0.01)


def test_rhat_flags_chains_that_disagree():
    rng = np.random.default_rng(3)
    agree = rng.standard_normal((4, 1000))
    assert rhat(agree) < 1.01
    apart = agree + np.arange(4)[:, None] * 0.5  # four chains in four places
    assert rhat(apart) > 1.1
    drifting = np.cumsum(rng.standard_normal((1, 2000)), axis=1)  # one chain, a random walk
    assert rhat(drifting) > 1.01  # its two halves disagree
    # AR(1): bulk ESS close to n (1 − ρ) / (1 + ρ) per chain
    x = _ar1_chains(rng, 0.8, 4, 5000)
    assert ess_bulk(x) == pytest.approx(4 * 5000 * 0.2 / 1.8, rel=0.15)
    c = convergence(x[None])
    assert set(c) == {"rhat", "ess_bulk", "ess_tail"} and c["rhat"] < 1.01


def test_calibration_figure_draws_the_raw_band_that_predict_gives():
    from bdeeponet.plots import raw_coverage

    gaussian = {"0.5": 58.0, "0.95": 93.0}  # mean ± z std, recorded by every run
    student = {"0.5": 63.0, "0.95": 97.0}  # the band predict returns for several chains
    metrics = {"calibration": gaussian, "coverage": {"raw": {"pointwise": student}}}
    assert raw_coverage(metrics) == student
    assert raw_coverage({"calibration": gaussian}) == gaussian  # a run from before coverage
