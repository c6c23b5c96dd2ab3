"""The report of the paper grid: CSV and Markdown tables, and a self-contained
``report.html`` with the figures of :mod:`.plots` embedded.

It reads the run directories the grid left behind (their layout is in :mod:`.grid`)."""

from __future__ import annotations

import base64
import csv
import html
import io
import json
import os
from pathlib import Path

import numpy as np

from .calibration import spread_off
from .grid import PAPER_ERRORS, PAPER_TIME_RATIO, scenario_title
from .io import write_text
from .plots import scenario_figures
from .plots import write_run_figures as write_run_figures  # imported from here by cli.py
from .samplers.methods import get_method

METRIC_COLUMNS = ("e1_after_burn_in", "e2_after_burn_in", "e1", "e2", "e3", "band_width", "nll",
                  "crps", "sec_per_iter")
LABELS = {"e1_after_burn_in": "e1 (paper def.)", "e2_after_burn_in": "e2 (paper def.)",
          "e1": "e1 (post. mean)", "e2": "e2 (post. mean)", "e3": "e3 (%)",
          "band_width": "band width", "nll": "NLL", "crps": "CRPS", "sec_per_iter": "s / iter"}


def collect(out: Path, jobs) -> dict:
    """``{(problem, noise, method): [run record per finished seed]}`` with metrics, timing
    and history of each run, in the order of ``jobs``."""
    records: dict = {}
    for job in jobs:
        recs = records.setdefault((job.problem, job.noise, job.method), [])
        d = job.run_dir(out)
        if (d / "metrics.json").exists():
            recs.append({
                "seed": job.seed, "dir": d,
                "metrics": json.loads((d / "metrics.json").read_text()),
                "timing": json.loads((d / "timing.json").read_text()),
                "history": _read_history(d / "history.csv"),
            })
    return records


def _read_history(path: Path) -> list[dict]:
    with open(path) as fh:
        return [{k: float(v) if v not in ("", "nan") else float("nan") for k, v in row.items()}
                for row in csv.DictReader(fh)]


def _value(rec: dict, key: str) -> float:
    return rec["timing"]["sec_per_iter"] if key == "sec_per_iter" else rec["metrics"][key]


def summary_rows(records: dict) -> list[dict]:
    """One row per (problem, noise, method): mean and sd over seeds, and the paper's e1/e2."""
    rows = []
    for (problem, noise, method), recs in records.items():
        row = {"problem": problem, "noise": noise, "method": method, "n_seeds": len(recs)}
        for key in METRIC_COLUMNS:
            vals = np.array([_value(r, key) for r in recs], dtype=float)
            row[f"{key}_mean"] = float(vals.mean()) if len(vals) else float("nan")
            row[f"{key}_sd"] = float(vals.std(ddof=1)) if len(vals) > 1 else float("nan")
        paper = PAPER_ERRORS.get((problem, noise), {}).get(method)
        row["paper_e1"], row["paper_e2"] = paper if paper else (float("nan"), float("nan"))
        rows.append(row)
    return rows


def time_ratio_rows(records: dict, scen) -> list[dict]:
    """m-reSGLD / reSGLD per-iteration time per scenario (seed-paired), beside the paper's:
    over the sampling phase (``phase`` "sampling"), where m-reSGLD's hot replica trains one
    net, or for runs written before it was timed apart, over the whole run ("run"), whose
    burn-in is the same for both and pulls the ratio toward 1."""
    rows = []
    for problem, noise in scen:
        re, mre = records.get((problem, noise, "resgld"), []), records.get((problem, noise, "mresgld"), [])
        by_seed = {r["seed"]: r for r in re}
        pairs = [(m["timing"], by_seed[m["seed"]]["timing"]) for m in mre if m["seed"] in by_seed]
        if not pairs:
            continue
        key = ("sampling_sec_per_iter" if all(a.get("sampling_sec_per_iter") and
                                               b.get("sampling_sec_per_iter") for a, b in pairs)
               else "sec_per_iter")
        rows.append({"problem": problem, "noise": noise,
                     "ratio": float(np.mean([a[key] / b[key] for a, b in pairs])),
                     "phase": "sampling" if key != "sec_per_iter" else "run",
                     "paper_ratio": PAPER_TIME_RATIO.get((problem, noise), float("nan"))})
    return rows


CAL_LEVELS = ("0.5", "0.8", "0.9", "0.95", "0.99")


def calibration_rows(records: dict) -> list[dict]:
    """Observed coverage (%) at each nominal level, mean over seeds: of the clean test truth
    pointwise by the raw band and by the calibrated band, and of whole observed (noisy)
    test trajectories by the function-level band."""
    rows = []
    for (problem, noise, method), recs in records.items():
        cov = [r["metrics"].get("coverage") for r in recs]
        if not cov or any(c is None for c in cov):
            continue
        row = {"problem": problem, "noise": noise, "method": method}
        for kind, key, part in (("raw", "raw", "pointwise"), ("cal", "calibrated", "pointwise"),
                                ("func", "calibrated", "function")):
            for lev in CAL_LEVELS:
                vals = [c[key][part][lev] for c in cov if c.get(key)]
                row[f"{kind}_{lev}"] = float(np.mean(vals)) if vals else float("nan")
        row.update(_held_out_check([r["metrics"].get("calibration_check") for r in recs]))
        rows.append(row)
    return rows


def _held_out_check(checks: list) -> dict:
    """What the held-out functions say of the raw band's scale: the likelihood's estimate and
    90% interval (median over seeds; for runs calibrated before it, the range of scales the
    held-out coverages admit), and in how many seeds no single scale fit every level or the
    error did not follow the band's spread (:func:`~.calibration.spread_check`)."""
    found = [c for c in checks if c is not None]
    shape = sum(not c["consistent"] or spread_off(c.get("spread_z")) for c in found)
    needed = [c["functions_needed"] for c in found if c.get("functions_needed")]
    rest = {"shape_rejected": shape,
            "functions_needed": float(np.median(needed)) if needed else float("nan")}
    lik = [(c["scale"], *c["scale_interval"]) for c in found if "scale_interval" in c]
    if lik:
        k, lo, hi = (float(np.median([x[i] for x in lik])) for i in range(3))
        return {"k": k, "k_low": lo, "k_high": hi, **rest}
    ranges = [c["consistent"] for c in found if c["consistent"]]
    lo, hi = (float(np.median([k[i] for k in ranges])) if ranges else float("nan")
              for i in (0, 1))
    return {"k": float("nan"), "k_low": lo, "k_high": hi, **rest}


def swap_rows(records: dict) -> list[dict]:
    """Measured swap acceptance beside the predicted one (reSGLD and m-reSGLD)."""
    rows = []
    for (problem, noise, method), recs in records.items():
        swaps = [r["metrics"]["swap"] for r in recs if "swap" in r["metrics"]]
        if swaps:
            rows.append({"problem": problem, "noise": noise, "method": method,
                         **{k: float(np.mean([sw[k] for sw in swaps])) for k in swaps[0]}})
    return rows


def convergence_rows(records: dict) -> list[dict]:
    """Split R̂ and bulk / tail ESS of the sampled predictions (the worst over the fixed test
    points of each run), mean and worst over seeds; runs written before these existed have
    none."""
    rows = []
    for (problem, noise, method), recs in records.items():
        conv = [r["metrics"]["convergence"] for r in recs if "convergence" in r["metrics"]]
        relax = [r["metrics"]["prior_relaxation_epochs"] for r in recs
                 if "prior_relaxation_epochs" in r["metrics"]]
        end = [r["metrics"]["langevin_step"] * r["metrics"]["metric_stiffness_end"] for r in recs
               if "metric_stiffness_end" in r["metrics"]]
        if conv:
            rows.append({"problem": problem, "noise": noise, "method": method,
                         "rhat": float(np.mean([c["rhat"] for c in conv])),
                         "rhat_max": float(np.max([c["rhat"] for c in conv])),
                         "ess_bulk": float(np.mean([c["ess_bulk"] for c in conv])),
                         "ess_tail": float(np.mean([c["ess_tail"] for c in conv])),
                         "prior_relaxation_epochs": float(np.mean(relax)) if relax else float("nan"),
                         "step_stiffness_end": float(np.max(end)) if end else float("nan")})
    return rows


def convergence_markdown(conv: list[dict]) -> str:
    if not conv:
        return ""
    lines = ["### Convergence of the sampled predictions", "",
             "Rank-normalised split R̂ (above 1.01: not converged) and bulk / tail ESS at 50 "
             "fixed test points, the worst point of each run; mean over seeds (R̂: also the "
             "worst seed). *Prior relaxation*: epochs over which the directions that the data "
             "do not determine at the warm start (to first order) move under the damped metric "
             "(`prior_relaxation_epochs`), against the sampling phase (a quarter of the epochs "
             "by default): where it is longer, the chains are still spreading and the band "
             "is a snapshot on the way. *η λ at the end*: the step times the stiffness "
             "`λ_max(M H)` where the cold chains ended (`metric_stiffness_end`; at most 0.2 at "
             "the warm start, a step is unstable from 2 on), the worst seed. –: not recorded.", "",
             "| scenario | method | R̂ | R̂ (worst seed) | bulk ESS | tail ESS "
             "| prior relaxation (epochs) | η λ at the end |",
             "|---|---|---|---|---|---|---|---|"]
    for r in conv:
        relax = r.get("prior_relaxation_epochs", float("nan"))
        relax = f"{relax:,.0f}" if np.isfinite(relax) else "–"
        end = r.get("step_stiffness_end", float("nan"))
        end = f"{end:.2f}" if np.isfinite(end) else "–"
        lines.append(f"| {r['problem']} {r['noise']:g} | {r['method']} | {r['rhat']:.3f} | "
                     f"{r['rhat_max']:.3f} | {r['ess_bulk']:.1f} | {r['ess_tail']:.1f} | {relax} "
                     f"| {end} |")
    return "\n".join(lines + [""])


def _fmt(mean: float, sd: float) -> str:
    if not np.isfinite(mean):
        return "–"
    if mean != 0 and abs(mean) < 1e-3:  # (a band width of 2e-4 read 0.0002 ± 0.0000)
        return f"{mean:.2e}" + (f" ± {sd:.1e}" if np.isfinite(sd) else "")
    digits = 4 if abs(mean) < 0.1 else 2
    return f"{mean:.{digits}f}" + (f" ± {sd:.{digits}f}" if np.isfinite(sd) else "")


def calibration_markdown(cal: list[dict], swaps: list[dict]) -> str:
    lines = []
    if cal:
        lines += ["### Calibration: observed coverage (%) of the test set", "",
                  "Of the clean truth pointwise by the raw band (mean ± q std: q the Gaussian "
                  "z, or the Student-t quantile for several chains) and by the band "
                  "calibrated on held-out training functions; of whole noisy test trajectories "
                  "(the clean truth plus the data's noise, 20 draws) by the function-level "
                  "band, an observation band; mean over seeds. *Held-out k*: the raw band's "
                  "scale by the held-out functions' likelihood, with its 90% interval (median "
                  "over seeds; a wide interval means the noise hides the error and no "
                  "calibration from those functions can correct the band; a range alone: "
                  "the scales their coverages admit, from runs calibrated before the "
                  "likelihood); *to resolve k*: roughly how many held-out functions would "
                  "pin that scale down closely enough (90% interval within ±6.8%) to hold the "
                  "solution band within 3 points of each level, where these could not (median "
                  "over those seeds); *shape*: seeds where no single scale covers every level, or "
                  "where the held-out error does not follow the band's spread from point to "
                  "point (the band is then fitted level by level).", ""]
        head = ["scenario", "method", *(f"raw {v}" for v in CAL_LEVELS),
                *(f"cal. {v}" for v in CAL_LEVELS), *(f"function {v}" for v in CAL_LEVELS),
                "held-out k", "to resolve k", "shape"]
        lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for r in cal:
            cells = [f"{r[f'{k}_{v}']:.1f}" for k in ("raw", "cal", "func") for v in CAL_LEVELS]
            k, lo, hi = (r.get(x, float("nan")) for x in ("k", "k_low", "k_high"))
            span = f"{lo:.2g}–{hi:.2g}" if np.isfinite(lo) else "–"
            cells.append(f"{k:.2g} ({span})" if np.isfinite(k) else span)
            need = r.get("functions_needed", float("nan"))
            cells.append(f"{need:,.0f}" if np.isfinite(need) else "–")
            cells.append(str(r.get("shape_rejected", 0)))
            lines.append(f"| {r['problem']} {r['noise']:g} | {r['method']} | " + " | ".join(cells) + " |")
        lines.append("")
    if swaps:
        lines += ["### Replica swaps: measured and predicted acceptance", "",
                  "Predicted for a Gaussian posterior in d dimensions (d = the number of "
                  "parameters, and the effective d implied by the measured energy gap between "
                  "the replicas); Λ is the communication barrier of the pair.", "",
                  "| scenario | method | measured | predicted (d) | predicted (d_eff) | d | d_eff | Λ |",
                  "|---|---|---|---|---|---|---|---|"]
        for r in swaps:
            lines.append(f"| {r['problem']} {r['noise']:g} | {r['method']} | {r['measured']:.2e} | "
                         f"{r['predicted']:.2e} | {r['predicted_from_gap']:.2e} | "
                         f"{r['parameters']:.0f} | {r['effective_dimension']:.0f} | "
                         f"{r['barrier']:.0f} |")
        lines.append("")
    return "\n".join(lines)


def markdown_tables(rows: list[dict], ratios: list[dict]) -> str:
    lines = []
    for (problem, noise) in dict.fromkeys((r["problem"], r["noise"]) for r in rows):
        lines += [f"### {scenario_title(problem, noise)}", ""]
        head = ["method", *(LABELS[k] for k in METRIC_COLUMNS), "paper e1", "paper e2", "seeds"]
        lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for r in rows:
            if (r["problem"], r["noise"]) != (problem, noise):
                continue
            cells = [_fmt(r[f"{k}_mean"], r[f"{k}_sd"]) for k in METRIC_COLUMNS]
            paper = [_fmt(r["paper_e1"], float("nan")), _fmt(r["paper_e2"], float("nan"))]
            lines.append("| " + " | ".join([r["method"], *cells, *paper, str(r["n_seeds"])]) + " |")
        lines.append("")
    if ratios:
        lines += ["### m-reSGLD / reSGLD time per iteration", "",
                  "Ours over the sampling phase, where m-reSGLD's hot replica trains one net "
                  "(\"run\": over the whole run, burn-in included, for runs timed before).", "",
                  "| problem | σ | ours | phase | paper |", "|---|---|---|---|---|"]
        for r in ratios:
            paper = "–" if np.isnan(r["paper_ratio"]) else f"{r['paper_ratio']:.3f}"
            lines.append(f"| {r['problem']} | {r['noise']:g} | {r['ratio']:.3f} | "
                         f"{r['phase']} | {paper} |")
        lines.append("")
    return "\n".join(lines)


def _write_csv(path: Path, rows: list[dict]) -> None:
    if not rows:
        return
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(rows[0]))
    writer.writeheader()
    writer.writerows(rows)
    write_text(path, buf.getvalue())


def write_report(out: Path, jobs, wall_seconds: float | None = None,
                 n_trained: int | None = None) -> Path:
    """Tables (CSV, Markdown), figures and a self-contained ``report.html`` under ``out``."""
    scen = list(dict.fromkeys((j.problem, j.noise) for j in jobs))
    methods = list(dict.fromkeys(j.method for j in jobs))
    seeds = list(dict.fromkeys(j.seed for j in jobs))
    records = collect(out, jobs)
    rows, ratios = summary_rows(records), time_ratio_rows(records, scen)
    cal, swaps, conv = calibration_rows(records), swap_rows(records), convergence_rows(records)
    _write_csv(out / "results.csv", rows)
    _write_csv(out / "time_ratio.csv", ratios)
    _write_csv(out / "calibration.csv", cal)
    _write_csv(out / "swaps.csv", swaps)
    if conv:
        _write_csv(out / "convergence.csv", conv)
    network = _network_sizes(jobs)
    md = (f"Network: {network}.\n\n" + markdown_tables(rows, ratios) + "\n"
          + calibration_markdown(cal, swaps) + "\n" + convergence_markdown(conv))
    write_text(out / "results.md", md)
    figs = [f for p, n in scen for f in scenario_figures(out, p, n, records, methods)]
    info = _machine_info(methods, seeds, wall_seconds)
    step_seconds = sum(r["timing"]["sec_per_iter"] * r["timing"]["n_iters"]
                       for recs in records.values() for r in recs)
    info["network"] = network
    info["runs"] = f"{sum(map(len, records.values()))} finished of {len(jobs)}"
    if n_trained is not None:
        info["runs"] += f", {n_trained} trained by this invocation (finished ones are skipped)"
    info["time spent in sampler steps, summed over the runs"] = f"{step_seconds / 60:.1f} min"
    write_text(out / "report.html", _html(md, figs, info))
    return out / "report.html"


def _network_sizes(jobs) -> str:
    """The DeepONets' width, depth and latent dimension over the jobs (e.g. ``width 32,
    depth 2, latent 32``)."""
    sizes = dict.fromkeys(", ".join(f"{k} {v}" for k, v in j.network().items())
                          for j in jobs if get_method(j.method).network)
    return "; ".join(sizes) or "none (linear baseline only)"


def _machine_info(methods, seeds, wall_seconds) -> dict:
    import platform

    import torch

    info = {"machine": f"{platform.machine()}, {os.cpu_count()} cores, {platform.system()}",
            "python": platform.python_version(), "torch": torch.__version__,
            "methods": ", ".join(methods), "seeds": ", ".join(map(str, seeds))}
    if wall_seconds is not None:
        info["wall time of this invocation"] = f"{wall_seconds / 60:.1f} min"
    return info


def _html(markdown: str, figs: list[Path], info: dict) -> str:
    body = ["<h1>bdeeponet: the paper's Section 5, reproduced</h1>",
            "<ul>" + "".join(f"<li><b>{html.escape(k)}</b>: {html.escape(str(v))}</li>"
                             for k, v in info.items()) + "</ul>"]
    body.append(_markdown_to_html(markdown))
    for f in figs:
        b64 = base64.b64encode(f.read_bytes()).decode()
        body.append(f'<figure><img src="data:image/png;base64,{b64}" style="max-width:100%">'
                    f"<figcaption>{html.escape(f.stem)}</figcaption></figure>")
    style = ("body{font-family:sans-serif;max-width:1200px;margin:auto}"
             "table{border-collapse:collapse;font-size:13px}td,th{border:1px solid #ccc;"
             "padding:3px 6px;text-align:right}")
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>bdeeponet report</title>"
            f"<style>{style}</style></head><body>{''.join(body)}</body></html>\n")


def _markdown_to_html(md: str) -> str:
    """The small Markdown subset the report writes: ### headings, pipe tables, paragraphs
    and "- " lists (their text escaped, as written)."""
    out, rows, para, items = [], [], [], []

    def flush():
        if rows:
            head, *rest = rows
            out.append("<table><tr>" + "".join(f"<th>{html.escape(c)}</th>" for c in head) + "</tr>"
                       + "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in r) + "</tr>"
                                 for r in rest) + "</table>")
            rows.clear()
        if para:
            out.append(f"<p>{html.escape(' '.join(para))}</p>")
            para.clear()
        if items:
            out.append("<ul>" + "".join(f"<li>{html.escape(i)}</li>" for i in items) + "</ul>")
            items.clear()

    for line in md.splitlines():
        if line.startswith("|"):
            if para or items:
                flush()
            cells = [c.strip() for c in line.strip("|").split("|")]
            if not all(set(c) <= {"-"} for c in cells):
                rows.append(cells)
        elif line.startswith("- "):
            if rows or para:
                flush()
            items.append(line[2:].strip())
        elif line.startswith("  ") and items:  # a list item's continued line
            items[-1] += " " + line.strip()
        elif line.strip() and not line.startswith("#"):
            if rows or items:
                flush()
            para.append(line.strip())
        else:
            flush()
            if line.startswith("### "):
                out.append(f"<h3>{html.escape(line[4:])}</h3>")
    flush()
    return "\n".join(out)
