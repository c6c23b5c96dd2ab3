"""The paper grid on a tiny scale: skipping finished runs, redoing an interrupted one,
the report's tables and figures, and the Ray executor giving the local executor's numbers."""

import json
from pathlib import Path

import numpy as np
import pytest

from bdeeponet.experiments import (
    PAPER_SCENARIOS,
    Job,
    ensure_data,
    execute,
    expected_cost,
    make_jobs,
    reproduce,
    scenarios,
)

TINY = dict(problems=["antiderivative"], noises=[0.05], methods=["adam", "resgld", "mresgld",
            "linear"], epochs=4, seeds=[0, 1], workers=2, progress=False)


def test_default_grid_is_the_papers_eight_scenarios_times_three_methods():
    jobs = make_jobs(scenarios(), ["adam", "resgld", "mresgld"], [0], 8000)
    assert len(jobs) == 24 and len(PAPER_SCENARIOS) == 8
    assert scenarios(["pendulum"]) == [("pendulum", 0.01), ("pendulum", 0.05)]
    assert scenarios(["pendulum"], [0.1]) == [("pendulum", 0.1)]
    assert scenarios(["darcy"]) == [("darcy", 0.01), ("darcy", 0.05)]  # beyond the paper
    assert all(p != "darcy" for p, _ in scenarios())


@pytest.mark.parametrize("kwargs,match", [
    (dict(problems=["heat"]), "unknown problem 'heat'"),
    (dict(noises=[0.0]), "noise must be"),
])
def test_bad_grid_is_refused(kwargs, match):
    with pytest.raises(ValueError, match=match):
        scenarios(**kwargs)


def test_unknown_method_is_refused():
    with pytest.raises(ValueError, match="unknown method 'bayes'"):
        make_jobs(scenarios(["pendulum"]), ["bayes"], [0], 10)


@pytest.fixture(scope="module")
def grid(tmp_path_factory):
    out = tmp_path_factory.mktemp("grid")
    reproduce(out, **TINY)
    return out


def test_reproduce_writes_tables_figures_and_a_self_contained_report(grid):
    md = (grid / "results.md").read_text()
    for method in TINY["methods"]:
        assert f"| {method} |" in md
    assert "paper e2" in md and "16.61" in md  # the paper's Adam e2 at σ = 0.05
    assert "m-reSGLD / reSGLD" in md
    rows = (grid / "results.csv").read_text().splitlines()
    assert len(rows) == 1 + len(TINY["methods"])
    html = (grid / "report.html").read_text()
    assert html.count("data:image/png;base64,") == 4  # convergence, bands, time, calibration
    assert "src=\"http" not in html
    assert "8 finished of 8, 8 trained by this invocation" in html
    assert "*Held-out k*: the raw band&#x27;s scale" in html  # the tables' explanations too
    assert "width 64, depth 2, latent 64" in html  # the network's size, here the default
    assert md.startswith("Network: width 64, depth 2, latent 64, trunk_harmonics 8.")


def test_rerun_skips_finished_runs_and_redoes_an_interrupted_one(grid):
    job = Job("antiderivative", 0.05, "resgld", 1, 4)
    stamps = {p: p.stat().st_mtime_ns for p in (grid / "runs").rglob("metrics.json")}
    (job.run_dir(grid) / "metrics.json").unlink()  # as if killed before finishing
    reproduce(grid, **TINY)
    for path, stamp in stamps.items():
        if path.parent == job.run_dir(grid):
            assert path.exists()
        else:
            assert path.stat().st_mtime_ns == stamp, f"{path} was trained again"
    assert "8 finished of 8, 1 trained by this invocation" in (grid / "report.html").read_text()


@pytest.mark.slow
def test_ray_executor_gives_the_local_numbers(grid, tmp_path):
    jobs = make_jobs(scenarios(["antiderivative"], [0.05]), ["resgld", "linear"], [0], 4)
    ensure_data(tmp_path, scenarios(["antiderivative"], [0.05]))
    execute(tmp_path, jobs, executor="ray", progress=False)
    for job in jobs:
        ours = json.loads((job.run_dir(tmp_path) / "metrics.json").read_text())
        local = json.loads((job.run_dir(grid) / "metrics.json").read_text())
        assert ours.keys() == local.keys()
        # The torch runs are bit-identical; the closed-form linear fit goes through NumPy's
        # BLAS, whose thread count (and so summation order) differs in a Ray worker.
        rtol = 1e-9 if job.method == "linear" else 0.0
        for key in ("e1", "e2", "e3", "band_width", "e2_after_burn_in"):
            assert np.isclose(ours[key], local[key], rtol=rtol, atol=0), key


def test_runs_of_another_length_are_not_reused():
    a, b = Job("pendulum", 0.01, "adam", 0, 100), Job("pendulum", 0.01, "adam", 0, 200)
    assert a.run_dir(Path("x")) != b.run_dir(Path("x"))


def test_network_size_reaches_every_run_but_the_linear_fit_and_names_it(tmp_path):
    from dataclasses import asdict

    from bdeeponet.experiments import run_job
    from bdeeponet.report import _network_sizes

    scen = scenarios(["antiderivative"], [0.05])
    jobs = make_jobs(scen, ["adam", "linear"], [0], 2, model={"width": 8, "latent": 4,
                                                            "depth": None})
    adam, linear = jobs
    assert (adam.width, adam.depth, adam.latent) == (8, None, 4)
    assert adam.run_dir(tmp_path).name == "adam-2ep-width8-latent4-seed0"
    assert linear.model_size() == {} and linear.run_dir(tmp_path).name == "linear-2ep-seed0"
    default = make_jobs(scen, ["adam"], [0], 2)[0]
    assert default.run_dir(tmp_path) != adam.run_dir(tmp_path)  # never reused for another size
    ensure_data(tmp_path, scen)
    # a size given at its default is the default grid's run
    at_default = make_jobs(scen, ["adam"], [0], 2, model={"width": np.int64(64)})[0]
    assert at_default.run_dir(tmp_path) == default.run_dir(tmp_path)
    # eager steps instead of a CUDA graph's replays: the same run (reproduce --no-cuda-graph)
    eager = make_jobs(scen, ["adam"], [0], 2, cuda_graph=False)[0]
    assert eager.config().cuda_graph is False and default.config().cuda_graph is True
    assert eager.run_dir(tmp_path) == default.run_dir(tmp_path)
    assert at_default.network() == default.network() == {"width": 64, "depth": 2, "latent": 64,
                                                         "trunk_harmonics": 8}
    run_job(str(tmp_path), asdict(adam))
    config = json.loads((adam.run_dir(tmp_path) / "config.json").read_text())
    assert (config["train"]["width"], config["train"]["depth"], config["train"]["latent"]) == (8, 2, 4)
    assert _network_sizes(jobs) == "width 8, depth 2, latent 4, trunk_harmonics 8"


def test_a_finished_run_with_other_settings_is_not_reused(tmp_path):
    """A grid written before a default changed holds runs named as the new default's: the
    grid refuses to table them as such."""
    from dataclasses import asdict

    from bdeeponet.experiments import execute, run_job

    scen = scenarios(["antiderivative"], [0.05])
    old = make_jobs(scen, ["adam"], [0], 2, model={"trunk_harmonics": 0})[0]
    assert old.run_dir(tmp_path).name == "adam-2ep-trunk_harmonics0-seed0"
    ensure_data(tmp_path, scen)
    run_job(str(tmp_path), asdict(old))
    new = make_jobs(scen, ["adam"], [0], 2)[0]
    new.run_dir(tmp_path).parent.mkdir(parents=True, exist_ok=True)
    old.run_dir(tmp_path).rename(new.run_dir(tmp_path))  # as an old grid's folder
    with pytest.raises(ValueError, match="other settings \\(trunk_harmonics\\)"):
        execute(tmp_path, [new], workers=1, progress=False)


def test_a_finished_run_on_other_data_is_not_reused(tmp_path):
    """The grid's data file replaced by another draw: its finished runs were reused and
    tabled beside figures of the new data."""
    from dataclasses import asdict

    from bdeeponet.data import generate
    from bdeeponet.experiments import data_path, run_job
    from bdeeponet.problems import get_problem

    scen = scenarios(["antiderivative"], [0.05])
    job = make_jobs(scen, ["adam"], [0], 2)[0]
    ensure_data(tmp_path, scen)
    run_job(str(tmp_path), asdict(job))
    assert execute(tmp_path, [job], workers=1, progress=False) == 0  # its own data: reused
    generate(get_problem("antiderivative"), 0.05, np.random.default_rng(9), n_train=50,
             n_test=5).save(data_path(tmp_path, "antiderivative", 0.05))
    with pytest.raises(ValueError, match="not the one the run was trained on"):
        execute(tmp_path, [job], workers=1, progress=False)


def test_a_repeated_seed_method_or_scenario_is_one_run():
    """--seeds 0 0 trained one run and tabled it as two (sd 0.00 over 'seeds 2')."""
    twice = make_jobs(scenarios(["pendulum"], [0.01, 0.01]), ["adam", "adam"], [0, 0, 1], 3)
    assert twice == make_jobs(scenarios(["pendulum"], [0.01]), ["adam"], [0, 1], 3)


def test_an_interrupted_grid_says_how_to_go_on(monkeypatch, capsys):
    """It named --resume, which reproduce does not take: the same command goes on."""
    from bdeeponet import cli

    def stop(args):
        raise KeyboardInterrupt

    monkeypatch.setitem(cli.COMMANDS, "reproduce", stop)
    assert cli.main(["reproduce", "--out", "grid"]) == 130
    err = capsys.readouterr().err
    assert "the same command continues the grid" in err and "--resume" not in err


@pytest.mark.parametrize("model,match", [
    ({"width": 0}, "width must be >= 1, got 0"),
    ({"latent": 2.5}, "latent must be an integer, got 2.5"),
    ({"heads": 2}, "unknown network size 'heads'"),
    ({"heads": None}, "unknown network size 'heads'"),
    ({"depth": True}, "depth must be an integer, got True"),
])
def test_bad_network_size_is_refused(model, match):
    with pytest.raises(ValueError, match=match):
        make_jobs(scenarios(["pendulum"]), ["adam"], [0], 10, model=model)


def test_longest_runs_are_scheduled_first(tmp_path):
    scen = [("antiderivative", 0.01), ("advection_diffusion", 0.01)]
    ensure_data(tmp_path, scen)
    jobs = make_jobs(scen, ["linear", "adam", "resgld", "mresgld"], [0], 10)
    order = sorted(jobs, key=lambda j: expected_cost(tmp_path, j), reverse=True)
    assert [(j.problem, j.method) for j in order[:3]] == [
        ("advection_diffusion", m) for m in ("resgld", "mresgld", "adam")]
    assert {j.method for j in order[-2:]} == {"linear"}


def test_convergence_table_reads_the_runs_diagnostics():
    from bdeeponet.report import convergence_markdown, convergence_rows

    runs = [{"metrics": {"convergence": {"rhat": r, "ess_bulk": 10.0, "ess_tail": 20.0},
                         "prior_relaxation_epochs": t, "langevin_step": 0.04,
                         "metric_stiffness_end": lam}}
            for r, t, lam in ((1.5, 2e4, 5.0), (1.1, 4e4, 15.0))]
    old = [{"metrics": {"convergence": {"rhat": 1.2, "ess_bulk": 5.0, "ess_tail": 6.0}}}]
    records = {("pendulum", 0.01, "resgld"): runs, ("pendulum", 0.05, "resgld"): old,
               ("pendulum", 0.01, "adam"): [{"metrics": {}}]}  # Adam samples nothing
    rows = convergence_rows(records)
    assert rows[0] == {"problem": "pendulum", "noise": 0.01, "method": "resgld", "rhat": 1.3,
                       "rhat_max": 1.5, "ess_bulk": 10.0, "ess_tail": 20.0,
                       "prior_relaxation_epochs": 3e4, "step_stiffness_end": pytest.approx(0.6)}
    assert len(rows) == 2 and np.isnan(rows[1]["prior_relaxation_epochs"])  # run from before
    assert np.isnan(rows[1]["step_stiffness_end"])
    md = convergence_markdown(rows)
    assert "| pendulum 0.01 | resgld | 1.300 | 1.500 | 10.0 | 20.0 | 30,000 | 0.60 |" in md
    assert "| pendulum 0.05 | resgld | 1.200 | 1.200 | 5.0 | 6.0 | – | – |" in md
    assert convergence_markdown([]) == ""


def test_calibration_table_says_how_many_held_out_functions_would_pin_the_scale():
    """The median over the seeds whose held-out functions could not pin the band's scale
    down; a dash where every seed could."""
    from bdeeponet.report import calibration_markdown, calibration_rows

    cov = {part: {lev: 95.0 for lev in ("0.5", "0.8", "0.9", "0.95", "0.99")}
           for part in ("pointwise", "function")}

    def record(needed):
        check = {"consistent": [0.5, 2.0], "resolved": needed is None, "n_functions": 100,
                 "scale": 1.2, "scale_se": 0.3, "scale_interval": [0.7, 2.0],
                 "functions_needed": needed}
        return {"metrics": {"coverage": {"raw": cov, "calibrated": cov},
                            "calibration_check": check}}

    records = {("pendulum", 0.05, "resgld"): [record(500), record(None), record(1100)],
               ("pendulum", 0.01, "resgld"): [record(None)]}
    rows = calibration_rows(records)
    assert rows[0]["functions_needed"] == 800 and np.isnan(rows[1]["functions_needed"])
    table = calibration_markdown(rows, [])
    assert "| to resolve k |" in table
    assert "| 1.2 (0.7–2) | 800 | 0 |" in table and "| 1.2 (0.7–2) | – | 0 |" in table


def test_the_time_ratio_is_the_sampling_phases():
    """Burn-in is the same Adam warm start for both samplers; the ratio over the whole run
    pulled m-reSGLD's saving toward 1 beside the paper's per-iteration figure. Runs timed
    before the sampling phase was timed apart keep the whole run's ratio, marked so."""
    from bdeeponet.report import time_ratio_rows

    def rec(method, seed, whole, sampling):
        return {"seed": seed, "timing": {"sec_per_iter": whole, "sampling_sec_per_iter": sampling}}

    scen = [("pendulum", 0.01)]
    records = {("pendulum", 0.01, "resgld"): [rec("resgld", 0, 2.0, 4.0), rec("resgld", 1, 2.0, 5.0)],
               ("pendulum", 0.01, "mresgld"): [rec("mresgld", 0, 1.9, 3.2), rec("mresgld", 1, 1.9, 4.0)]}
    row = time_ratio_rows(records, scen)[0]
    assert row["phase"] == "sampling" and row["ratio"] == pytest.approx(0.8)
    records[("pendulum", 0.01, "mresgld")][1]["timing"]["sampling_sec_per_iter"] = None
    row = time_ratio_rows(records, scen)[0]
    assert row["phase"] == "run" and row["ratio"] == pytest.approx(0.95)


def test_small_values_keep_their_digits_in_the_tables():
    from bdeeponet.report import _fmt

    assert _fmt(2.08e-4, 9.0e-6) == "2.08e-04 ± 9.0e-06"  # it read 0.0002 ± 0.0000
    assert _fmt(0.0123, 0.001) == "0.0123 ± 0.0010" and _fmt(1.5, float("nan")) == "1.50"
