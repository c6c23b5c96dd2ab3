"""The unknown noise level: the residual-difference estimator and ``noise_std="auto"``."""

import numpy as np
import pytest
import torch

from bdeeponet import TrainConfig, generate, get_problem, train
from bdeeponet.noise import noise_sd_from_residuals
from bdeeponet.problems._base import space_time_points

torch.set_num_threads(1)


def _residuals(rng, y, sigma, misfit, n=400):
    """Smooth misfit (random low-frequency waves in every coordinate) plus white noise."""
    k = rng.normal(size=(n, 3, y.shape[1]))
    phase = rng.uniform(0, 2 * np.pi, size=(n, 3))
    smooth = np.sin(np.einsum("nkd,pd->nkp", 2 * k, y) + phase[..., None]).sum(1)
    return misfit * smooth / np.sqrt(1.5) + sigma * rng.standard_normal((n, y.shape[0]))


@pytest.mark.parametrize("grid", ["1d", "2d"])
def test_second_differences_separate_noise_from_a_smooth_misfit(grid):
    """σ = 0.01 under a misfit as large as the noise: the estimate is within 3% of σ (the
    Monte Carlo error of 4e4 squared differences is ~1%), while the plain root mean squared
    residual (the control) is 40% high."""
    rng = np.random.default_rng(0)
    if grid == "1d":
        y = np.linspace(0, 1, 100)[:, None]
    else:
        y = space_time_points(np.linspace(0, 1, 32), np.linspace(0, 1, 32))
    r = _residuals(rng, y, sigma=0.01, misfit=0.01)
    est = noise_sd_from_residuals([r[:200], r[200:]], torch.tensor(y))
    assert abs(est / 0.01 - 1) < 0.03, est
    assert np.sqrt((r**2).mean()) / 0.01 > 1.3


@pytest.mark.parametrize(("offset", "dtype"), [(0.0, np.float32), (1000.0, np.float32),
                                             (1000.0, np.float64)])
def test_grid_lines_are_found_at_the_rounding_of_the_coordinates(offset, dtype):
    """A 100-point grid stored in float32 (or read back as float64) keeps every one of its 98
    triples and 99 neighbour pairs, also far from the origin. Steps were compared at a
    relative 1e-6, finer than float32 resolves: 57 triples on [0, 1], none on
    [1000, 1001], where σ fell back to the root mean squared residual (0.017 for 0.01)."""
    from bdeeponet.noise import equispaced_triples, neighbour_pairs

    y = (offset + np.linspace(0, 1, 100)[:, None]).astype(dtype)
    for points in (y, y.astype(np.float64), torch.tensor(y)):
        assert len(equispaced_triples(points)) == 98
        assert len(neighbour_pairs(points)) == 99
    r = _residuals(np.random.default_rng(2), y.astype(np.float64) - offset, 0.01, 0.01)
    assert abs(noise_sd_from_residuals([r], y) / 0.01 - 1) < 0.03
    nudged = y.copy()
    nudged[50] += (y[1] - y[0]) / 3  # a point off the grid breaks the three triples it is in
    assert len(equispaced_triples(nudged)) == 95


def test_unordered_points_fall_back_to_the_rms_residual():
    rng = np.random.default_rng(1)
    y = rng.uniform(size=(50, 2))  # no equally spaced consecutive triples
    r = rng.standard_normal((20, 50))
    assert noise_sd_from_residuals([r], torch.tensor(y)) == pytest.approx(np.sqrt((r**2).mean()))


@pytest.mark.slow
@pytest.mark.parametrize("sigma", [0.01, 0.1])
def test_auto_recovers_sigma_and_keeps_the_bands_calibrated(sigma):
    """``noise_std="auto"`` on a file without σ: the estimate is within 10% of the truth,
    and the observation band covers fresh noisy test targets within 2 points of nominal.
    At σ = 0.01 the calibrated solution band covers the clean truth within 3 points where
    the held-out functions resolve its scale (what the calibration claims), and otherwise
    not under 5 points short (100 test functions): here its scale is not resolved (60
    held-out functions, ~670 would be needed), and it covered 94.1% and 95.2% at 90% in
    two runs whose metric damping differed by 4%. At σ = 0.1 the error is ~0.5% of the
    noise's variance: 60 noisy held-out functions cannot measure it, so the solution band
    is not checked there."""
    from bdeeponet.calibration import Calibration, bands

    data = generate(get_problem("antiderivative"), sigma, np.random.default_rng(3), n_train=600)
    data = data.__class__(data.u_train, data.s_train, data.u_test, data.s_test, data.y)  # no σ
    assert data.noise_std is None
    result = train(data, TrainConfig(method="sgld", epochs=1200, seed=0))
    est = result.metrics["noise_std"]
    assert abs(est / sigma - 1) < 0.10, est
    post = result.posterior
    pred = post.predict(data.u_test, data.y, seed=0)
    noisy = data.s_test + sigma * np.random.default_rng(4).standard_normal(data.s_test.shape)
    for level in (0.5, 0.8, 0.9, 0.95):
        b = bands(pred["mean"].numpy(), pred["raw_std"].numpy(), est,
                  Calibration.from_dict(post.calibration), level)
        inside = 100 * np.mean((noisy >= b["obs_lower"]) & (noisy <= b["obs_upper"]))
        assert abs(inside - 100 * level) <= 2, (level, inside)
    if sigma == 0.01:
        observed = result.metrics["coverage"]["calibrated"]["pointwise"]
        resolved = result.metrics["calibration_check"]["resolved"]
        for level in ("0.8", "0.9", "0.95"):
            short = 100 * float(level) - observed[level]
            assert (abs(short) <= 3) if resolved else (short <= 5), (observed, resolved)


def test_neighbour_products_measure_a_smooth_error_without_the_noise():
    """σ = 0.1 noise over a smooth error of rms 0.01: products of residuals 1–3 grid steps
    apart estimate the error's second moment (1e-4) within 15% (Monte Carlo error ~5% for
    400 functions × 100 points), where E[r²] − σ² with σ off by 1% (the control) is off by
    20%: it needs σ exactly, the products do not need it at all."""
    from bdeeponet.noise import smooth_second_moment

    rng = np.random.default_rng(2)
    y = np.linspace(0, 1, 100)[:, None]
    n = 400
    e = 0.01 * np.sin(2 * np.pi * (y.T + rng.uniform(size=(n, 1)))) * np.sqrt(2)
    r = e + 0.1 * rng.standard_normal((n, 100))
    est = smooth_second_moment(r, y)
    assert abs(est / 1e-4 - 1) < 0.15, est
    assert abs(((r**2).mean() - 0.101**2) / 1e-4 - 1) > 0.15
    assert smooth_second_moment(r, rng.uniform(size=(100, 1))) is None  # no grid lines


def test_auto_reads_the_grid_under_a_pod_trunk():
    """A pod trunk reads its modes as extra columns of y; the estimator must take the grid
    lines of the coordinates alone. It took all the columns, found no grid line and fell
    back to the root mean squared residual: 0.149 for σ = 0.01 after 60 epochs (0.0099
    with the learnt trunk)."""
    data = generate(get_problem("antiderivative"), 0.01, np.random.default_rng(3), n_train=200,
                    n_test=20)
    data = data.__class__(data.u_train, data.s_train, data.u_test, data.s_test, data.y)  # no σ
    result = train(data, TrainConfig(method="sgld", trunk="pod", epochs=60, noise_std="auto"),
                   device="cpu")
    assert abs(result.metrics["noise_std"] / 0.01 - 1) < 0.1, result.metrics["noise_std"]
