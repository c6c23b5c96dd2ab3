"""Bands and their calibration on held-out training functions (the long account is in
:mod:`.fit`): ``levels`` (quantiles), ``bands`` (the bands of a calibrated prediction),
``scales`` (what held-out functions say about a band's scale), ``conformal`` (the
function-level band's quantile) and ``fit`` (:func:`fit_calibration`, which decides)."""

from .bands import Calibration, bands, coverage_table, observed_trajectories
from .conformal import FUNCTION_CONFIDENCE, conformal_rank, held_out_quantile, tail_quantile
from .fit import fit_calibration
from .levels import check_level, predictive_quantile, z_value
from .scales import (
    MIN_CHECK,
    SCALE_CONFIDENCE,
    SCALE_GRID,
    SPREAD_Z,
    UNDER_COVER,
    consistent_scales,
    moment_scale,
    pins_down,
    scale_likelihood,
    spread_check,
    spread_off,
)

__all__ = [
    "FUNCTION_CONFIDENCE", "MIN_CHECK", "SCALE_CONFIDENCE", "SCALE_GRID", "SPREAD_Z",
    "UNDER_COVER", "Calibration",
    "bands", "check_level", "conformal_rank", "consistent_scales", "coverage_table",
    "fit_calibration", "held_out_quantile", "moment_scale", "observed_trajectories", "pins_down",
    "predictive_quantile", "scale_likelihood", "spread_check", "spread_off", "tail_quantile",
    "z_value",
]
