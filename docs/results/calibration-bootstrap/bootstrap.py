"""The iterated parametric bootstrap of a finished run's band scale (docs/bands.md, tried and
not kept).

World 1 trains the run's configuration (no held-out split, seed + 1000) on the run's own
posterior mean Ĝ at its 900 training inputs plus fresh noise of the data's σ; world 2 does
the same on world 1's mean (seed + 2000). In each world the band's scale k is measured level
by level against the stand-in truth's clean values at the run's 100 held-out inputs; k1²/k2
(Hall & Martin 1988) is applied to the run's test band and scored on the clean test truth.

Run: python bootstrap.py RUN DATA OUT   (OUT/world1, OUT/world2: the two run directories;
one JSON line on stdout, a summary on stderr). About three times the run's training time.
"""

from __future__ import annotations

import dataclasses
import json
import sys

import numpy as np
import torch

from bdeeponet.calibration import Calibration, coverage_table, predictive_quantile
from bdeeponet.data import load
from bdeeponet.metrics import NOMINAL_LEVELS
from bdeeponet.run import load_run
from bdeeponet.train import split_calibration, train

LEVELS = NOMINAL_LEVELS  # 50, 80, 90, 95, 99%
WORLDS = ((1000, 12345), (2000, 67890))  # (seed offset of the training, seed of the noise)


def scales(truth, pred) -> list[float]:
    """Per level, the k whose band mean ± q k std covers that share of ``truth``."""
    ratio = np.abs(truth - pred["mean"].numpy())
    return [float(np.quantile(ratio / (predictive_quantile(level, pred["dof"].numpy())
                                       * pred["raw_std"].numpy()), level)) for level in LEVELS]


def coverage(truth, pred, ks) -> list[float]:
    """Pointwise coverage (%) of ``truth`` by the band scaled by ``ks`` (one k per level)."""
    table = coverage_table(pred["mean"].numpy(), pred["raw_std"].numpy(), truth, 0.0,
                           Calibration(LEVELS, tuple(ks)), LEVELS, pred["dof"].numpy())
    return list(table["pointwise"].values())


def within(cov) -> bool:
    """The coverage target: ±3 points at 50-95%, −3/+1 at 99%."""
    return (all(abs(c - 100 * lv) <= 3 for c, lv in zip(cov[:4], LEVELS, strict=False))
            and -3 <= cov[4] - 99 <= 1)


def main() -> None:
    run_dir, data_path, out = sys.argv[1:4]
    torch.set_num_threads(1)
    run, data = load_run(run_dir), load(data_path)
    fit, (u_held, _) = split_calibration(data, run.config)
    surrogate, ks, errors = run.posterior, [], []
    for w, (offset, noise_seed) in enumerate(WORLDS, start=1):
        g_fit = surrogate.predict(fit.u_train, data.y)["mean"].numpy().astype(np.float64)
        g_held = surrogate.predict(u_held, data.y)["mean"].numpy().astype(np.float64)
        noise = data.noise_std * np.random.default_rng(noise_seed).standard_normal(g_fit.shape)
        world = dataclasses.replace(fit, s_train=g_fit + noise, s_train_clean=g_fit,
                                    u_test=u_held, s_test=g_held)
        config = dataclasses.replace(run.config, calibration=0.0, seed=run.config.seed + offset)
        surrogate = train(world, config, out=f"{out}/world{w}", device="cpu").posterior
        pred = surrogate.predict(u_held, data.y)
        ks.append(scales(g_held, pred))
        errors.append(float(np.linalg.norm(g_held - pred["mean"].numpy()) / np.linalg.norm(g_held)))
    k1, k2 = ks
    corrected = [a * a / b for a, b in zip(k1, k2, strict=True)]
    test = run.posterior.predict(data.u_test, data.y)
    raw, boot = coverage(data.s_test, test, [1.0] * len(LEVELS)), coverage(data.s_test, test, corrected)
    row = {"run": run_dir, "k_test": scales(data.s_test, test), "k1": k1, "k2": k2,
           "corrected": corrected, "coverage_raw": raw, "coverage_bootstrap": boot,
           "within": within(boot), "e2_worlds": errors}
    print(json.dumps(row))

    def fmt(xs):
        return "/".join(f"{x:.2f}" for x in xs)

    print(f"k: test {fmt(row['k_test'])} | k1 {fmt(k1)} | k2 {fmt(k2)} | k1²/k2 {fmt(corrected)}\n"
          f"coverage: raw {fmt(raw)} | bootstrap {fmt(boot)} (within: {within(boot)})\n"
          f"e2 % of the worlds against their stand-ins: {fmt([100 * e for e in errors])}", file=sys.stderr)


if __name__ == "__main__":
    main()
