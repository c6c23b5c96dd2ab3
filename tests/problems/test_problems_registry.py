"""Registry and the shared problem interface: names, parameters, shapes, batching."""

import dataclasses
import json

import numpy as np
import pytest

from bdeeponet.grf import periodic_grf, rbf_grf
from bdeeponet.problems import PROBLEMS, get_problem

NAMES = ["antiderivative", "pendulum", "diffusion_reaction", "advection_diffusion", "darcy"]
FIELDS = ["burgers", "darcy2d"]  # draw their own inputs on their own grids


def test_registry_names():
    assert list(PROBLEMS) == NAMES + FIELDS
    assert [name for name in NAMES if PROBLEMS[name].periodic_input] == ["advection_diffusion"]
    assert all(hasattr(PROBLEMS[name], "draw") for name in FIELDS)


def test_periodic_coordinates():
    declared = {name: PROBLEMS[name].periodic_coordinates for name in NAMES + FIELDS}
    assert declared == {"antiderivative": (), "pendulum": (), "diffusion_reaction": (),
                        "advection_diffusion": ((0, 1.0),), "darcy": (), "burgers": ((0, 1.0),),
                        "darcy2d": ()}


@pytest.mark.parametrize("name", [n for n in NAMES if PROBLEMS[n].periodic_coordinates])
def test_declared_periodicity_holds(name):
    """Query points that differ by one period in a declared coordinate (and nowhere else)
    hold the same solution value."""
    problem = get_problem(name)
    x = np.linspace(0, 1, 200)
    u = periodic_grf(x, 3, np.random.default_rng(1))
    y, s = problem.query_points(), problem.solve(x, u)
    for j, period in problem.periodic_coordinates:
        shifted = y.copy()
        shifted[:, j] += period
        match = np.all(np.abs(shifted[:, None, :] - y[None, :, :]) < 1e-12, axis=2)
        rows, partners = np.nonzero(match)
        assert rows.size > 0
        np.testing.assert_allclose(s[:, rows], s[:, partners], rtol=0, atol=1e-10)


def test_unknown_name_lists_valid_names():
    with pytest.raises(ValueError) as info:
        get_problem("heat")
    assert str(info.value) == f"unknown problem 'heat'; choose one of: {', '.join(NAMES + FIELDS)}"


@pytest.mark.parametrize(
    "name, params, match",
    [
        ("pendulum", {"mass": 1.0}, "unknown parameter 'mass'.*valid: k, n_points"),
        ("antiderivative", {"n_points": 1}, "n_points"),
        ("pendulum", {"n_points": 10.5}, "n_points"),
        ("diffusion_reaction", {"D": -0.1}, "'D' must be > 0"),
        ("diffusion_reaction", {"richardson": "yes"}, "richardson"),
        ("advection_diffusion", {"t_final": float("nan")}, "t_final"),
    ],
)
def test_invalid_parameters(name, params, match):
    with pytest.raises(ValueError, match=match):
        get_problem(name, **params)


@pytest.mark.parametrize("name", NAMES)
def test_interface_shapes_batching_and_metadata(name):
    problem = get_problem(name)
    assert problem == PROBLEMS[name]()
    assert problem.name == name
    json.dumps(dataclasses.asdict(problem))
    with pytest.raises(dataclasses.FrozenInstanceError):
        problem.nt = 3
    x = np.linspace(0, 1, 200)
    sampler = periodic_grf if problem.periodic_input else rbf_grf
    u = sampler(x, 4, np.random.default_rng(0))
    y = problem.query_points()
    assert y.ndim == 2 and y.shape[1] == (1 if name in ("antiderivative", "pendulum", "darcy") else 2)
    s = problem.solve(x, u)
    assert s.shape == (4, y.shape[0]) and np.all(np.isfinite(s))
    single = np.vstack([problem.solve(x, u[i : i + 1]) for i in range(4)])
    np.testing.assert_allclose(s, single, rtol=0, atol=1e-12)


@pytest.mark.parametrize("name", NAMES)
def test_bad_input_shapes(name):
    problem = get_problem(name)
    x = np.linspace(0, 1, 50)
    with pytest.raises(ValueError, match="shape"):
        problem.solve(x, np.zeros((3, 49)))
    with pytest.raises(ValueError, match="from 0 to 1"):
        problem.solve(np.linspace(0, 2, 50), np.zeros((3, 50)))
