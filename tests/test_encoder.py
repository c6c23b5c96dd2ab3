"""The branch net's PCA encoder: what it keeps, its scale, and a run that uses it end to end."""

import numpy as np
import pytest
import torch

from bdeeponet import TrainConfig, generate, get_problem, load_run, predict, train
from bdeeponet.encoder import PCAEncoder, fit_pca

torch.set_num_threads(1)


def low_rank_inputs(n=60, m=300, k=7, seed=0):
    rng = np.random.default_rng(seed)
    return 3.0 + rng.standard_normal((n, k)) @ rng.standard_normal((k, m))


def test_default_rule():
    assert fit_pca(np.random.default_rng(0).standard_normal((50, 256))) is None  # m < 257
    enc = fit_pca(low_rank_inputs())  # exactly rank 7 around its mean: all variance in 7
    assert enc.components == 7 and enc.kept_variance == pytest.approx(1.0)
    assert fit_pca(low_rank_inputs(), 0) is None
    assert fit_pca(low_rank_inputs(), 3).components == 3


def test_default_is_capped_by_functions_and_32():
    rng = np.random.default_rng(1)
    assert fit_pca(rng.standard_normal((20, 300))).components == 19  # N - 1
    assert fit_pca(rng.standard_normal((400, 300))).components == 32


def test_encoding_is_an_orthogonal_projection_scaled_to_unit_variance():
    u = low_rank_inputs()
    enc = fit_pca(u, 5)
    np.testing.assert_allclose(enc.basis.T @ enc.basis, np.eye(5), atol=1e-12)
    z = enc(u)
    assert z.shape == (60, 5)
    # mean square per kept component is 1 over the training inputs, by construction
    assert np.mean(np.sum(z**2, axis=1)) == pytest.approx(5.0, rel=1e-10)
    np.testing.assert_allclose(z.mean(axis=0), 0, atol=1e-10)
    # a rank-7 input is reconstructed exactly from 7 components
    full = fit_pca(u, 7)
    np.testing.assert_allclose(full(u) @ full.basis.T * full.scale + full.mean, u, atol=1e-9)
    # tensors in, tensors out (dtype kept), the same numbers
    zt = enc(torch.as_tensor(u, dtype=torch.float32))
    assert zt.dtype == torch.float32
    np.testing.assert_allclose(zt.numpy(), z, rtol=1e-5, atol=1e-5)
    back = PCAEncoder.from_state_dict(enc.state_dict())
    np.testing.assert_array_equal(back(u), z)


def test_a_config_written_before_the_encoder_keeps_the_raw_sensors():
    assert TrainConfig.from_dict({"method": "sgld"}).branch_pca == 0
    assert TrainConfig.from_dict({"method": "sgld", "branch_pca": None}).branch_pca is None


@pytest.mark.parametrize("r", [-1, 2.5, 60, 301])
def test_bad_component_counts(r):
    with pytest.raises(ValueError, match="branch_pca"):
        if r < 0 or isinstance(r, float):
            TrainConfig(branch_pca=r)
        else:
            fit_pca(low_rank_inputs(), r)


def test_run_with_an_encoder_predicts_from_raw_inputs(tmp_path):
    """A run whose branch reads 6 components: the run directory keeps the encoder, predict
    takes the raw (n, m) inputs, and the reloaded run predicts what the trained one did."""
    data = generate(get_problem("antiderivative"), 0.01, np.random.default_rng(0), n_train=40,
                    n_test=8, m=300)
    config = TrainConfig(method="sgld", epochs=6, batch_size=10, width=8, latent=8, branch_pca=6,
                         calibration=0.2)
    result = train(data, config, out=tmp_path / "run", device="cpu")
    assert result.metrics["branch_pca"]["components"] == 6
    assert result.posterior.config.n_sensors == 6 and result.posterior.n_sensors == 300
    run = load_run(tmp_path / "run")
    assert run.n_sensors == 300
    direct = result.posterior.predict(data.u_test, data.y)
    loaded = predict(run, data.u_test, data.y)
    np.testing.assert_allclose(loaded["mean"], direct["mean"].numpy(), rtol=1e-6, atol=1e-9)
    with pytest.raises(ValueError, match="300"):
        predict(run, data.u_test[:, :6], data.y)
