"""Picking the next inputs to simulate: the greedy conditional variance against its closed
form, near-duplicates left out, and the command line's loop."""

import json

import numpy as np
import pytest

from bdeeponet.acquire import greedy_picks


def test_scores_are_the_variance_left_given_the_earlier_picks():
    """Each pick's score is K_ii - K_iS K_SS^-1 K_Si (S: the earlier picks), and it is the
    largest such value among the candidates not yet picked."""
    f = np.random.default_rng(0).standard_normal((30, 12))
    k = f @ f.T
    picks, scores = greedy_picks(f, 8, "variance")
    for t, i in enumerate(picks):
        s = list(picks[:t])
        left = np.diag(k) - (np.einsum("is,st,it->i", k[:, s], np.linalg.inv(k[np.ix_(s, s)]),
                                       k[:, s]) if s else 0)
        assert scores[t] == pytest.approx(left[i], rel=1e-8)
        others = np.setdiff1d(np.arange(30), s)
        assert left[i] >= left[others].max() - 1e-9
    assert len(set(picks)) == 8


def test_a_near_duplicate_is_not_picked_twice():
    """Two copies of the most uncertain candidate and a weaker, different one: the batch
    takes one copy and the different one; the top two by variance alone are the copies."""
    a, b = np.array([3.0, 0.0, 0.0]), np.array([0.0, 1.0, 0.0])
    f = np.vstack([a, a + 1e-6, b, 0.1 * a])
    picks, scores = greedy_picks(f, 2, "variance")
    assert set(picks) == {0, 2} or set(picks) == {1, 2}
    assert list(np.argsort(-np.einsum("ij,ij->i", f, f))[:2]) in ([0, 1], [1, 0])  # the control


def test_picks_beyond_the_draws_rank_go_by_variance():
    """Draws of rank 2: after two picks nothing is left to explain; the rest come by their
    own variance, with score 0."""
    f = np.outer(np.arange(1, 7), [1.0, 0.0]) + np.outer([0, 0, 0, 0, 0, 1.0], [0.0, 1.0])
    picks, scores = greedy_picks(f, 4, "variance")
    assert len(set(picks)) == 4 and np.all(scores[2:] == 0) and np.all(scores[:2] > 0)


def test_the_command_line_loop(tmp_path):
    """train -> acquire -> generate --inputs --merge-into -> train, on a tiny run."""
    from bdeeponet.cli import main
    from bdeeponet.data import load
    from bdeeponet.grf import rbf_grf

    data, run, pool = tmp_path / "d.npz", tmp_path / "run", tmp_path / "pool.npz"
    assert main(["generate", "darcy", "--noise", "0.01", "--n-train", "40", "--n-test", "5",
                 "--out", str(data)]) == 0
    tiny = ["--epochs", "8", "--batch-size", "10", "--width", "8", "--latent", "8", "--quiet",
            "--calibration", "0.2"]
    assert main(["train", str(data), "--method", "sgld", "--out", str(run), *tiny]) == 0
    x = np.linspace(0, 1, 100)
    np.savez(pool, u=rbf_grf(x, 30, np.random.default_rng(3), length_scale=0.1))
    picked, merged = tmp_path / "picked.npz", tmp_path / "merged.npz"
    assert main(["acquire", str(run), str(pool), "--n", "6", "--out", str(picked)]) == 0
    with np.load(picked) as z:
        assert z["u"].shape == (6, 100) and len(set(z["index"])) == 6
        meta = json.loads(str(z["meta"]))
        assert np.all(z["score"] > 0) and meta["n"] == 6
        assert (meta["criterion"], meta["error"]) == ("reduction", "relative")  # the defaults
        np.testing.assert_array_equal(z["u"], np.load(pool)["u"][z["index"]])
    own = tmp_path / "own.npz"  # by each pick's own variance left: it can only fall
    assert main(["acquire", str(run), str(pool), "--n", "6", "--criterion", "variance",
                 "--out", str(own)]) == 0
    with np.load(own) as z:
        assert np.all(np.diff(z["score"]) <= 1e-12)
        assert json.loads(str(z["meta"]))["criterion"] == "variance"
    assert main(["acquire", str(run), str(pool), "--n", "6", "--error", "relative",
                 "--out", str(own)]) == 0
    with np.load(own) as z:
        assert json.loads(str(z["meta"]))["error"] == "relative" and len(set(z["index"])) == 6
    assert main(["generate", "darcy", "--inputs", str(picked), "--merge-into", str(data),
                 "--out", str(merged)]) == 0
    before, after = load(data), load(merged)
    assert after.n_train == before.n_train + 6 and after.noise_std == before.noise_std
    np.testing.assert_array_equal(after.s_test, before.s_test)
    assert main(["train", str(merged), "--method", "sgld", "--out", str(tmp_path / "run2"),
                 *tiny]) == 0
    for argv in (["acquire", str(run), str(pool), "--n", "0", "--out", str(tmp_path / "x.npz")],
                 ["acquire", str(run), str(pool), "--n", "31", "--out", str(tmp_path / "x.npz")],
                 ["acquire", str(run), str(data), "--n", "2", "--out", str(tmp_path / "x.npz")],
                 ["acquire", str(run), str(pool), "--n", "2", "--criterion", "entropy",
                  "--out", str(tmp_path / "x.npz")]):
        assert main(argv) == 2
    assert not (tmp_path / "x.npz").exists()


def test_variance_reduction_picks_against_the_explicit_matrix():
    """Each pick maximises sum_j K_ji^2 / K_ii over the covariance K left given the earlier
    picks (K - K_S K_SS^-1 K_S^T, formed explicitly here), and its score is that value."""
    f = np.random.default_rng(1).standard_normal((50, 14))
    picks, scores = greedy_picks(f, 7, block=16)  # blocks smaller than the pool
    k = f @ f.T
    for t, i in enumerate(picks):
        s = list(picks[:t])
        left = k - (k[:, s] @ np.linalg.solve(k[np.ix_(s, s)], k[s]) if s else 0)
        gain = (left**2).sum(0) / np.diag(left)
        assert scores[t] == pytest.approx(gain[i], rel=1e-8)
        others = np.setdiff1d(np.arange(50), s)
        assert gain[i] >= gain[others].max() * (1 - 1e-9)


def test_variance_reduction_prefers_the_representative_candidate():
    """A cluster of ten similar candidates and one isolated candidate of larger variance:
    the largest variance is the outlier, the largest reduction of the pool's variance is in
    the cluster."""
    rng = np.random.default_rng(2)
    cluster = np.array([1.0, 0.0, 0.0]) + 0.05 * rng.standard_normal((10, 3))
    f = np.vstack([cluster, [0.0, 0.0, 1.5]])
    assert int(np.argmax(np.einsum("ij,ij->i", f, f))) == 10
    picks, _ = greedy_picks(f, 1)
    assert picks[0] < 10


def test_variance_reduction_stays_exact_as_the_variance_runs_out():
    """Rows whose variance decays geometrically (0.8^j per direction): after 40 picks the
    variance left is 1e-8 of the first. Each pick is still the exact greedy choice and its
    score the exact reduction, both from an orthogonal projection formed afresh each step
    (the rank-one updates of diag(K K) alone lose it to rounding after about 30 picks)."""
    rng = np.random.default_rng(0)
    f = rng.standard_normal((400, 150)) * 0.8 ** np.arange(150)
    picks, scores = greedy_picks(f, 40)
    for t, i in enumerate(picks):
        s = list(picks[:t])
        r = f - (f @ (q := np.linalg.qr(f[s].T)[0])) @ q.T if s else f
        left, k = np.einsum("ij,ij->i", r, r), r @ r.T
        gain = np.einsum("ij,ij->i", k, k) / left
        gain[s] = -np.inf
        assert scores[t] == pytest.approx(gain[i], rel=1e-6)
        assert gain[i] >= gain.max() * (1 - 1e-6)


def test_relative_rows_measure_error_against_the_solutions_size():
    """A candidate whose draws and mean are both scaled by c keeps its relative row; a row's
    squared norm is its summed variance over its mean's squared norm; a mean of zero is
    floored at 1e-3 of the median norm, not divided by."""
    from bdeeponet.acquire import solution_norms

    def relative_to(draws, mean):
        return draws / solution_norms(mean)[:, None]

    rng = np.random.default_rng(3)
    draws, mean = rng.standard_normal((5, 12)), rng.standard_normal((5, 4)) + 2.0
    rows = relative_to(draws, mean)
    scaled = relative_to(draws * [[10.0], [1], [1], [1], [1]], mean * [[10.0], [1], [1], [1], [1]])
    np.testing.assert_allclose(scaled, rows, rtol=1e-12)
    np.testing.assert_allclose(np.einsum("ij,ij->i", rows, rows),
                               np.einsum("ij,ij->i", draws, draws) / (mean**2).sum(1))
    mean[2] = 0.0
    floor = 1e-3 * np.median(np.linalg.norm(mean, axis=1))
    np.testing.assert_allclose(relative_to(draws, mean)[2], draws[2] / floor)


def test_noisy_picks_condition_on_a_noisy_observation():
    """With observation noise s_i², each greedy pick is the candidate whose noisy
    observation removes the most variance from the pool, sum_j K_ji² / (K_ii + s_i²), on
    the explicit matrix conditioned on the earlier noisy picks (K <- K - K_:i K_i: /
    (K_ii + s_i²)); the noise differs between candidates."""
    rng = np.random.default_rng(5)
    features = rng.standard_normal((40, 6)) @ rng.standard_normal((6, 30))
    noise = rng.uniform(0.0, 60.0, 40)
    picks, scores = greedy_picks(features, 8, "reduction", noise=noise)
    K = features @ features.T
    for t, i in enumerate(picks):
        gain = (K**2).sum(0) / (np.diag(K) + noise)
        gain[picks[:t]] = -np.inf
        assert scores[t] == pytest.approx(gain[i], rel=1e-8)
        assert gain[i] >= gain.max() * (1 - 1e-8)
        K = K - np.outer(K[:, i], K[i]) / (K[i, i] + noise[i])
    assert list(picks) != list(greedy_picks(features, 8, "reduction")[0])  # the noise mattered


def test_the_command_line_offers_every_criterion_and_error():
    """The CLI spells the choices out (its --help needs no torch): they are acquire's."""
    from bdeeponet.acquire import CRITERIA, ERRORS
    from bdeeponet.cli import build_parser

    sub = next(a for a in build_parser()._actions if a.dest == "command").choices["acquire"]
    choices = {a.dest: a.choices for a in sub._actions}
    assert tuple(choices["criterion"]) == CRITERIA and tuple(choices["error"]) == ERRORS


def test_solved_inputs_are_written_as_generate_writes_data(tmp_path):
    """``generate --inputs`` without ``--merge-into`` records the sensors and the periodic
    coordinates ``generate`` records; each set of inputs gets noise draws of its own (two
    rounds of picks merged one after the other do not repeat one noise), and the same
    inputs the same draws."""
    from bdeeponet.cli import main
    from bdeeponet.data import load

    data = tmp_path / "d.npz"
    assert main(["generate", "advection_diffusion", "--noise", "0.01", "--n-train", "8",
                 "--n-test", "2", "--out", str(data)]) == 0
    other = tmp_path / "other.npz"  # inputs the data do not hold, with their solutions
    assert main(["generate", "advection_diffusion", "--noise", "0.01", "--n-train", "8",
                 "--n-test", "2", "--seed", "1", "--out", str(other)]) == 0
    made = load(other)
    first, second = tmp_path / "a.npz", tmp_path / "b.npz"
    np.savez(first, u=made.u_train[:3])
    np.savez(second, u=made.u_test)
    alone = tmp_path / "alone.npz"
    assert main(["generate", "advection_diffusion", "--inputs", str(first), "--noise", "0.01",
                 "--out", str(alone)]) == 0
    solved = load(alone)
    np.testing.assert_allclose(solved.sensors, made.sensors, atol=1e-12)
    assert solved.meta["periodic"] == made.meta["periodic"] and solved.periodic == made.periodic
    np.testing.assert_allclose(solved.s_train_clean, made.s_train_clean[:3], atol=1e-6)
    merged = [tmp_path / "m1.npz", tmp_path / "m2.npz"]
    assert main(["generate", "advection_diffusion", "--inputs", str(first), "--merge-into",
                 str(data), "--out", str(merged[0])]) == 0
    assert main(["generate", "advection_diffusion", "--inputs", str(second), "--merge-into",
                 str(merged[0]), "--out", str(merged[1])]) == 0
    full = load(merged[1])
    noise = full.s_train - full.s_train_clean
    assert not np.allclose(noise[8:10], noise[11:13])  # round 1's first two rows, round 2's
    np.testing.assert_array_equal(noise[8:11], (solved.s_train - solved.s_train_clean))


@pytest.mark.parametrize("other", [["antiderivative"], ["advection_diffusion", "--param", "D=0.5"],
                                   ["advection_diffusion", "--n-train", "5"]])
def test_solved_inputs_merge_only_into_data_of_their_problem(tmp_path, capsys, other):
    """Merging solutions of another problem, or of the same with other parameters, into a
    data file made one file of two operators that described the first only; ``--n-train``
    was ignored. Each is one line, exit 2, nothing written."""
    from bdeeponet.cli import main

    data, picked, out = tmp_path / "d.npz", tmp_path / "p.npz", tmp_path / "m.npz"
    assert main(["generate", "advection_diffusion", "--noise", "0.01", "--n-train", "8",
                 "--n-test", "2", "--out", str(data)]) == 0
    np.savez(picked, u=np.load(data)["u_test"])
    capsys.readouterr()
    assert main(["generate", *other, "--inputs", str(picked), "--merge-into", str(data),
                 "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and not out.exists(), err


def test_inputs_the_solver_cannot_solve_are_one_error_line(tmp_path, capsys):
    """Darcy's exp(u) overflows for |u| ~ 1000: five RuntimeWarning lines came first, then an
    error naming the internal key 's_train'."""
    from bdeeponet.cli import main

    picked, out = tmp_path / "p.npz", tmp_path / "z.npz"
    np.savez(picked, u=1000 * np.random.default_rng(0).standard_normal((5, 100)))
    assert main(["generate", "darcy", "--inputs", str(picked), "--noise", "0.01",
                 "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: darcy's solver gave NaN or inf"), err
    assert not out.exists()


@pytest.mark.parametrize("criterion, noisy", [("reduction", False), ("variance", False),
                                              ("reduction", True)])
def test_copies_are_picked_once_and_blocked_rows_never(criterion, noisy):
    """Four exact copies of the most uncertain candidate: one is picked. Under observation
    noise a pick kept part of its variance and its copies were picked too (4 of the 5). Rows
    blocked (inputs already simulated) are never picked, nor their copies."""
    rng = np.random.default_rng(7)
    base = rng.standard_normal((30, 5)) @ rng.standard_normal((5, 20))
    top = int(np.argmax(np.einsum("ij,ij->i", base, base)))
    features = np.vstack([base, np.repeat(base[top:top + 1], 4, axis=0)])
    copies = np.concatenate([np.arange(30), [top] * 4])
    noise = np.full(34, 50.0) if noisy else None
    picks, _ = greedy_picks(features, 12, criterion, noise=noise, copies=copies)
    assert len(picks) == 12 and np.sum(copies[picks] == top) == 1, picks
    blocked = np.zeros(34, bool)
    blocked[top] = blocked[:3] = True
    blocked[30:] = True  # acquire blocks every copy of an input already simulated
    picks, _ = greedy_picks(features, 20, criterion, noise=noise, copies=copies, blocked=blocked)
    assert len(picks) == 20 and not blocked[picks].any() and len(set(copies[picks])) == 20
    assert len(greedy_picks(features, 40, criterion, noise=noise, copies=copies,
                            blocked=blocked)[0]) == 30 - 4  # all the free distinct rows


def test_a_merge_that_would_spoil_its_file_is_refused(tmp_path, capsys):
    """Inputs the file already holds (a second round from the same pool re-picked ~40% of
    them), a --noise other than the file's (it was recorded for all its rows), a file that
    records no problem (an imported one took another operator's solutions): each one line,
    exit 2, nothing written. Two merges in turn keep both records."""
    from bdeeponet.cli import main
    from bdeeponet.data import OperatorData, load

    data, other = tmp_path / "d.npz", tmp_path / "o.npz"
    for path, seed in ((data, "0"), (other, "1")):
        assert main(["generate", "advection_diffusion", "--noise", "0.01", "--n-train", "8",
                     "--n-test", "2", "--seed", seed, "--out", str(path)]) == 0
    made, fresh = load(data), load(other)
    plain = tmp_path / "plain.npz"
    OperatorData(made.u_train, made.s_train, made.u_test, made.s_test, made.y,
                 noise_std=0.01).save(plain)
    np.savez(tmp_path / "again.npz", u=np.vstack([fresh.u_train[:2], made.u_test[:1]]))
    np.savez(tmp_path / "new.npz", u=fresh.u_train[:2])
    np.savez(tmp_path / "new2.npz", u=fresh.u_train[2:4])
    out = tmp_path / "m.npz"
    capsys.readouterr()
    for inputs, into, extra, words in (
            ("again.npz", data, [], ["1 of the 3 inputs", "already in", "--exclude"]),
            ("new.npz", data, ["--noise", "0.05"], ["--noise 0.05", "0.01"]),
            ("new.npz", plain, [], ["records no problem"])):
        assert main(["generate", "advection_diffusion", "--inputs", str(tmp_path / inputs),
                     "--merge-into", str(into), *extra, "--out", str(out)]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and all(w in err[0] for w in words) and not out.exists(), err
    assert main(["generate", "advection_diffusion", "--inputs", str(tmp_path / "new.npz"),
                 "--merge-into", str(data), "--noise", "0.01", "--out", str(out)]) == 0
    out2 = tmp_path / "m2.npz"
    assert main(["generate", "advection_diffusion", "--inputs", str(tmp_path / "new2.npz"),
                 "--merge-into", str(out), "--out", str(out2)]) == 0
    merged = load(out2).meta["merged"]
    assert [m["solved_inputs"] for m in merged] == [str(tmp_path / f) for f in ("new.npz",
                                                                               "new2.npz")]


def test_a_signed_zero_is_the_same_input():
    """-0.0 where the data hold 0.0 is the same input: --exclude took it for a new one
    (15 of the data's own inputs picked) while the pool's copies were already matched by
    value."""
    from bdeeponet.acquire import input_keys

    u = np.random.default_rng(0).standard_normal((4, 5))
    u[:, 0] = 0.0
    flipped = u.copy()
    flipped[:, 0] = -0.0
    assert input_keys(u) == input_keys(flipped) and len(set(input_keys(u))) == 4
