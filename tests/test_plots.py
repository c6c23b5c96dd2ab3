"""What the figures draw: which line of a 2-D set of points, named how, and which band."""

import numpy as np

from bdeeponet.plots import coordinate_names, slice_2d


def grid(names):
    a, b = np.meshgrid(np.linspace(0, 1, 5), np.linspace(0, 2, 7), indexing="ij")
    return np.column_stack([a.ravel(), b.ravel()]), names


def test_a_space_time_problem_is_drawn_at_its_last_time_a_field_along_its_middle_row():
    """darcy2d's figures drew the row x2 = 1, its boundary (s = 0 there), labelled as a
    time; an (x, t) problem keeps the paper's last time."""
    y, names = grid(coordinate_names({"problem": "diffusion_reaction"}, 2))
    sel, label = slice_2d(y, names)
    assert names == ("x", "t") and np.all(y[sel, 1] == 2) and sel.sum() == 5
    assert label == "x (t = 2)"
    y, names = grid(coordinate_names({"problem": "darcy2d"}, 2))
    sel, label = slice_2d(y, names)
    assert names == ("x1", "x2") and np.allclose(y[sel, 1], 1.0) and label == "x1 (x2 = 1)"
    assert coordinate_names({}, 2) == ("y0", "y1") and coordinate_names({}, 1) == ("y",)
    assert coordinate_names({"problem": "pendulum"}, 1) == ("t",)
