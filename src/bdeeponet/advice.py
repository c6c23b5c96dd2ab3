"""What a finished run's diagnostics advise: the warning lines of ``train`` and ``predict``.

``train`` records its lines in ``metrics["warnings"]`` (so does ``calibrate``, whose refit can
change them); ``train`` and ``predict`` issue each from Python as a :class:`RunWarning`, and
the command line prints each as ``warning: ...``. A line says what a diagnostic found and
what to do about it.
"""

from __future__ import annotations

import math

import numpy as np

from .calibration.scales import CLAIM_POINTS, pinning_se, scale_settled, spread_off

RARE_SWAPS = 0.01  # pair (0, 1) accepting fewer swaps than this: the ladder only adds cost


class RunWarning(UserWarning):
    """A finished run's diagnostic warns: its band may not yet be the posterior's."""


def run_warnings(metrics: dict, config, chains: int) -> list[str]:
    """The warning lines of a run of ``config`` (``chains`` chains) with ``metrics``."""
    out = []
    rhat = metrics.get("convergence", {}).get("rhat", 1.0)
    if rhat > 1.01:
        what = ("the chain has not converged (run several: --chains 4)" if chains == 1 else
                f"the {chains} chains disagree")
        out.append(f"the split R-hat of the sampled predictions is {rhat:.3f} (> 1.01): "
                   f"{what}, so the band is not yet the posterior's")
    relax, sampled = metrics.get("prior_relaxation_epochs"), config.epochs - config.burn_in_epochs
    if relax is not None and relax > sampled:
        out.append(f"the metric's damping ({metrics['metric_damping']:.3g}) slows the "
                   f"directions the data do not determine at the warm start: they relax over "
                   f"about {relax:,.0f} epochs and this run sampled {sampled}, so the chains are "
                   f"still spreading and the band is likely narrower than the posterior's")
    end, step = metrics.get("metric_stiffness_end"), metrics.get("langevin_step")
    if end is not None and step is not None and end * step > 1:
        out.append(f"the cold chains ended on stiffer ground than the warm start (λ_max(M H) "
                   f"{metrics['metric_stiffness']:.3g} -> {end:.3g}): the step is at "
                   f"{end * step / 2:.0%} of its stability limit, so a longer run may diverge "
                   f"(a smaller --lr makes room)")
    swap = metrics.get("swap")  # replica exchange: pair (0, 1)
    if swap is not None and swap["measured"] < RARE_SWAPS:
        out.append(f"the coldest replica accepted {swap['measured']:.2%} of the swaps offered "
                   f"to it, so it sampled as --method sgld would and the hotter replicas only "
                   f"added cost: for {swap['parameters']:,} parameters a ladder from τ = "
                   f"{config.tau1:g} to {config.tau2:g} communicates with about "
                   f"{2 * swap['barrier']:.0f} replicas (docs/samplers.md)")
    check = metrics.get("calibration_check")
    # a band scaled per level (one chain, MC dropout) is expected to fail the one-scale check
    from .train import band_trusted  # (train imports this module)

    if check and not check["resolved"] and not scale_pinned(check) and (
            check["consistent"] or band_trusted(config)):
        out.append(check_message(check))
    return out


def scale_pinned(check: dict) -> bool:
    """Whether the held-out functions pin the raw band's scale down to a factor of 2
    and one scale fits its shape (``metrics["calibration_check"]``;
    :func:`bdeeponet.calibration.pins_down`): a weaker test than ``resolved``."""
    return bool(scale_settled(check["consistent"], check.get("spread_z"), check.get("scale_se"),
                              pinning_se()))


def check_message(check: dict) -> str:
    """One line on what the held-out functions could check of a run's band
    (``metrics["calibration_check"]``, see :func:`bdeeponet.calibration.consistent_scales`)."""
    k, n = check["consistent"], check["n_functions"]
    z = check.get("spread_z")
    if spread_off(z):
        return (f"the {n} held-out functions' error does not follow the band's spread from "
                f"point to point (z = {z:.1f}: relative to the spread it is larger where the "
                "chains agree), so the calibrated band is fitted level by level")
    shape = ("no single scale of the raw band covers the held-out functions at every level: "
             "its shape is off")
    lik = check.get("scale_interval")
    if lik is not None:
        where = f"at {check['scale']:.2g} (90%: {lik[0]:.2g}-{lik[1]:.2g})"
        if not k:
            return (f"{shape} for the {n} held-out functions (their likelihood puts its scale "
                    f"{where}), and the calibrated band takes the median of per-level fits")
        if check["resolved"]:
            return f"the {n} held-out functions put the raw band's scale {where}"
        more = check.get("functions_needed")
        more = (f"; roughly {more:,} held-out functions would resolve it (--calibration sets "
                "the fraction held out)") if more else ""
        if scale_pinned(check):
            return (f"the {n} held-out functions put the raw band's scale {where}: too wide a "
                    f"range to hold the solution band within {100 * CLAIM_POINTS:.0f} points "
                    f"of its level, so its coverage rests on the posterior itself as well{more}")
        return (f"the {n} held-out functions cannot check this band: their likelihood puts "
                f"its scale {where} (the noise hides the error), so its coverage rests on the "
                f"posterior itself{more}")
    if not k:
        return f"{shape} for the {n} held-out functions, and the calibrated band scales each level on its own"
    if check["resolved"]:
        return f"the {n} held-out functions fix the raw band's scale within {k[0]:.2g}-{k[1]:.2g}"
    return (f"the {n} held-out functions cannot check this band: any scale of it from "
            f"{k[0]:.2g} to {k[1]:.2g} fits them (the noise hides the error), so its coverage "
            "rests on the posterior itself")


def prediction_warnings(calibration: dict | None, novelty, novel: np.ndarray,
                        false_alarm: float, y: np.ndarray, trained_y: np.ndarray | None,
                        periodic=(), name: str = "the run", grids=None) -> list[str]:
    """The warning lines of a prediction at the points ``y`` (P, d) by the run ``name``
    whose posterior holds ``calibration`` (its dict) and ``novelty``
    (:class:`~.novelty.Novelty` or None), with ``novel`` (n,) its flags at ``false_alarm``;
    ``trained_y`` the run's training query points (None: not known), ``periodic`` its
    ``(coordinate, period)`` pairs; ``grids``: ``(training grid, grid of y)`` where a
    Fourier network predicts on another grid than its own."""
    out, cal = [], calibration or {}
    if grids is not None:
        trained, asked = (" x ".join(map(str, g)) for g in grids)
        out.append(f"{name} was trained and calibrated on a {trained} grid and predicts on "
                   f"{asked}: the bands were fitted at the training grid (how far they hold "
                   "at another is measured in docs/bands.md), and novelty is scored on the "
                   "inputs interpolated onto it")
    if "function_confidence" in cal and cal["function_confidence"] is None:
        out.append(f"{name} holds too few held-out functions (under 10) to fit its "
                   "function-level band: it is the Gaussian union bound, with no stated "
                   "confidence (--calibration sets the fraction held out)")
    if cal.get("quantiles") is not None and "function_confidence" not in cal:
        out.append(f"{name} was calibrated before 2026-11-29: its function-level band covers "
                   "its level in at most 90% of held-out draws, not 99%; `bdeeponet calibrate "
                   "RUN DATA` refits it")
    if trained_y is not None and y.ndim == 2 and y.shape[1] == trained_y.shape[1]:
        cols = [j for j in range(y.shape[1]) if j not in {j for j, _ in periodic}]
        lo, hi = trained_y.min(axis=0), trained_y.max(axis=0)
        slack = 1e-9 * np.maximum(hi - lo, 1.0)
        outside = np.zeros(len(y), dtype=bool)
        for j in cols:
            outside |= (y[:, j] < lo[j] - slack[j]) | (y[:, j] > hi[j] + slack[j])
        if outside.any():
            ranges = ", ".join(f"y{j} in [{lo[j]:g}, {hi[j]:g}]" for j in cols)
            out.append(f"{int(outside.sum())} of {len(y)} query points lie outside the "
                       f"training points' range ({ranges}): the trunk extrapolates there, and "
                       "the bands were calibrated on the training points only")
    if novelty is None:
        out.append("the run has no held-out functions (calibration = 0): novelty is not "
                   "scored")
    elif math.isinf(novelty.threshold(false_alarm)):
        out.append(f"the run's {novelty.held_out.size} held-out functions are too few to flag "
                   f"inputs at a {false_alarm:g} false-alarm rate (it needs at least "
                   f"{math.ceil(1 / false_alarm) - 1}); novelty is not scored (NaN)")
    elif novel.any():
        out.append(f"{int(novel.sum())} of {len(novel)} inputs ({100 * novel.mean():.0f}%) are "
                   f"unlike the training inputs (flagged at a {false_alarm:g} false-alarm "
                   "rate): their bands may not hold")
    return out
