"""Held-out MSE (noisy targets) of two runs' posterior means on the same held-out functions,
paired, with the standard error of the difference over functions; and the same on the clean
test truth (which the library never uses), to see whether the held-out data can pick the size.

    python heldout_mse.py DATA.npz RUN_A RUN_B     (the two runs trained with the same seed)
"""

import sys

import numpy as np
import torch

from bdeeponet.data import load
from bdeeponet.run import load_run
from bdeeponet.train import split_calibration


def main(data_path, run_a, run_b):
    torch.set_num_threads(1)
    data = load(data_path)
    runs = [load_run(p) for p in (run_a, run_b)]
    held = [split_calibration(data, r.config)[1] for r in runs]
    if not np.array_equal(np.asarray(held[0][0]), np.asarray(held[1][0])):
        sys.exit("error: the two runs held out different functions (train them with one seed)")
    u_h, s_h = held[0][0], np.asarray(held[0][1])
    mean = [r.posterior.predict(u_h, data.y)["mean"].numpy() for r in runs]
    sq = [((m - s_h) ** 2) for m in mean]
    d = (sq[0] - sq[1]).mean(axis=1)  # per function
    se = d.std(ddof=1) / np.sqrt(len(d))
    print("held-out MSE A, B:", sq[0].mean(), sq[1].mean())
    print(f"paired difference A-B: {d.mean():.3e} (se {se:.3e}, z {d.mean() / se:.2f})")
    test = [r.posterior.predict(data.u_test, data.y)["mean"].numpy() for r in runs]
    truth = np.asarray(data.s_test)
    print("test clean MSE A, B:", *(((t - truth) ** 2).mean() for t in test))


if __name__ == "__main__":
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    main(*sys.argv[1:])
