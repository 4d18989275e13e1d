"""Evaluation harness and ``evaluate.py`` / ``sweep.py``: the JSON contract, intervals, gaps,
determinism across backends, the two simulation routes, error handling, atomic outputs."""

from __future__ import annotations

import csv
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from scipy import stats as sps

import evaluate as evaluate_cli
import sweep as sweep_cli
from serverfarm_gym.envs.scenarios import load_scenario
from serverfarm_gym.evaluation import (
    atomic_open,
    atomic_write,
    evaluate,
    gap_pct,
    mean_ci,
    paired_gap_pct,
    register_policy_resolver,
    replication_seeds,
    rollout,
    shortfall_pct,
    simulate_builtin,
    summarize,
    sweep,
)
from serverfarm_gym.evaluation.rollout import policy_route, resolve_policy

ROOT = Path(__file__).resolve().parents[2]

# exact long-run PAS efficiency of the tiny preset (docs/model.md; CTMC solution)
TINY_PAS_EXACT = 0.3273379092816369
TINY_OPT_EXACT = 0.3289309341181227
#: two-sided error probability of the statistical checks (a ~4-sigma tolerance)
ALPHA = 1e-4

DETERMINISTIC_KEYS = ("scenario", "optimum", "upper_bound", "policies", "seeds", "skipped")


def _small(**kw):
    """A fast in-process evaluation of tiny (overridable)."""
    args = {
        "scenario": "tiny",
        "policies": ["pas", "jsq", "random"],
        "replications": 3,
        "horizon": 1_000,
        "workers": 1,
        "progress": False,
    }
    args.update(kw)
    return evaluate(args.pop("scenario"), args.pop("policies"), **args)


# ---------------------------------------------------------------------------------------------
# statistics
# ---------------------------------------------------------------------------------------------
def test_ci_half_width_matches_scipy():
    x = np.random.default_rng(5).normal(3.0, 0.7, size=7)
    m, half = mean_ci(x, 0.95)
    lo, hi = sps.t.interval(0.95, len(x) - 1, loc=x.mean(), scale=sps.sem(x))
    assert m == pytest.approx(x.mean(), rel=1e-15)
    assert half == pytest.approx((hi - lo) / 2, rel=1e-12)
    s = summarize(x)
    assert s["mean"] == m and s["ci95"] == half and s["n"] == 7
    # one replication: no variance estimate, reported as None (JSON null), not 0
    assert mean_ci([1.0])[1] is None and summarize([1.0])["ci95"] is None


def test_gap_arithmetic():
    assert gap_pct(0.30, 0.25) == pytest.approx(20.0)
    assert gap_pct(0.25, 0.30) == pytest.approx(-100 * 0.05 / 0.30)
    assert shortfall_pct(0.30, 0.32) == pytest.approx(6.25)
    assert shortfall_pct(0.30, None) is None
    p = paired_gap_pct([1.1, 2.2, 3.3], [1.0, 2.0, 3.0])
    assert p["mean"] == pytest.approx(10.0) and p["ci95"] == pytest.approx(0.0, abs=1e-12)


def test_report_gaps_follow_from_its_own_numbers():
    rep = _small()
    pas = rep["policies"]["pas"]["efficiency"]["mean"]
    for e in rep["policies"].values():
        eff = e["efficiency"]["mean"]
        assert e["gap_to_pas_pct"] == pytest.approx(100 * (eff - pas) / pas, rel=1e-12, abs=1e-12)
        opt = rep["optimum"]
        if opt is None:
            assert e["gap_to_optimum_pct"] is None
        else:
            want = 100 * (opt["efficiency"] - eff) / opt["efficiency"]
            assert e["gap_to_optimum_pct"] == pytest.approx(want, rel=1e-12)
        if rep["upper_bound"] is not None:
            b = rep["upper_bound"]["efficiency"]
            assert e["gap_to_bound_pct"] == pytest.approx(100 * (b - eff) / b, rel=1e-12)
    assert rep["policies"]["pas"]["gap_to_pas_pct"] == 0.0


def test_replication_seeds_are_deterministic_distinct_and_shared():
    a, b = replication_seeds(0, 50), replication_seeds(0, 50)
    assert a == b and len(set(a)) == 50
    assert replication_seeds(1, 5) != a[:5]
    assert replication_seeds(0, 5) == a[:5]  # adding replications keeps the first ones
    rep = _small()
    for e in rep["policies"].values():  # common random numbers: same seeds for every policy
        assert [r["seed"] for r in e["replications"]] == rep["seeds"]


# ---------------------------------------------------------------------------------------------
# end to end
# ---------------------------------------------------------------------------------------------
def test_cli_end_to_end_tiny(tmp_path, capsys):
    out_json, out_csv, out_png = tmp_path / "o.json", tmp_path / "o.csv", tmp_path / "o.png"
    rc = evaluate_cli.main(
        [
            "tiny",
            "--policies",
            "jsq,random,optimal",
            "--replications",
            "3",
            "--horizon",
            "1500",
            "--seed",
            "0",
            "--workers",
            "1",
            "--json",
            str(out_json),
            "--csv",
            str(out_csv),
            "--plot",
            str(out_png),
        ]
    )
    assert rc == 0
    printed = capsys.readouterr().out
    assert "policy" in printed and "pas" in printed  # the console table
    rep = json.loads(out_json.read_text())
    for key in ("scenario", "optimum", "upper_bound", "policies", "config", "seeds", "versions",
                "wall_time_s", "settings", "skipped"):  # fmt: skip
        assert key in rep, key
    assert rep["scenario"] == "tiny" and len(rep["seeds"]) == 3
    assert rep["settings"]["warmup"] == 150  # default: 10% of the horizon
    assert "pas" in rep["policies"], "PAS is always evaluated"
    assert set(rep["policies"]) | set(rep["skipped"]) == {"pas", "jsq", "random", "optimal"}
    # exact references of tiny (docs/model.md): optimum 0.3289309341181227 <= relaxation bound
    assert rep["optimum"]["efficiency"] == pytest.approx(TINY_OPT_EXACT, rel=1e-7)
    assert rep["optimum"]["efficiency"] <= rep["upper_bound"]["efficiency"] * (1 + 1e-9)
    assert rep["optimum_reason"] is None
    assert "optimal" in rep["policies"] and rep["policies"]["optimal"]["route"] == "env"
    for e in rep["policies"].values():
        for m in ("efficiency", "throughput", "power", "blocking"):
            assert isinstance(e[m]["mean"], float) and isinstance(e[m]["ci95"], float), m
        assert set(e["blocking_per_type"]) == {"web", "gpu"}
        assert isinstance(e["gap_to_pas_pct"], float)
        assert "gap_to_optimum_pct" in e and "gap_to_bound_pct" in e
        assert len(e["replications"]) == 3
        assert all(r["epochs"] == 1500 for r in e["replications"])
    rows = list(csv.DictReader(out_csv.open()))
    assert [r["policy"] for r in rows] == list(rep["policies"])
    assert float(rows[0]["efficiency_mean"]) == pytest.approx(
        rep["policies"][rows[0]["policy"]]["efficiency"]["mean"], rel=1e-12
    )
    assert out_png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")], "temporary files left"


def test_unknown_policy_is_a_clear_error(capsys):
    with pytest.raises(ValueError, match=r"unknown policy 'nope'.*valid policies.*pas"):
        _small(policies=["pas", "nope"])
    rc = evaluate_cli.main(["tiny", "--policies", "pas,nope", "--horizon", "100"])
    assert rc == 2
    err = capsys.readouterr().err
    assert "error: policy: unknown policy 'nope'" in err and "jsq" in err


def test_cli_script_exits_2_on_usage_errors(tmp_path):
    # the real script, as a user runs it: message on stderr, exit status 2, no traceback
    out = tmp_path / "o.json"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "evaluate.py"), "tiny", "--policies", "pas,nope", "--json", str(out)],
        capture_output=True, text=True, cwd=tmp_path, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    assert "unknown policy 'nope'" in proc.stderr and "Traceback" not in proc.stderr
    assert not out.exists()
    proc = subprocess.run(
        [sys.executable, str(ROOT / "evaluate.py"), "no-such-farm"],
        capture_output=True, text=True, cwd=tmp_path, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 2 and "neither a preset" in proc.stderr


def test_large_instance_optimum_is_null_with_reason():
    rep = _small(scenario="paper-100", policies=["pas", "optimal"], replications=2, horizon=300)
    assert rep["optimum"] is None
    assert isinstance(rep["optimum_reason"], str) and rep["optimum_reason"]
    assert "optimal" in rep["skipped"] and rep["skipped"]["optimal"]
    assert rep["policies"]["pas"]["gap_to_optimum_pct"] is None
    # the relaxation bound does not depend on the farm's size: it is there, and so is the gap
    assert rep["upper_bound"] is not None
    assert isinstance(rep["policies"]["pas"]["gap_to_bound_pct"], float)
    # 300 epochs are ~2.5 mean job durations on this farm: the report says so; the default
    # warm-up is the rule's 50 durations (5,982 epochs), a shorter one is flagged
    assert any("horizon" in w for w in rep["warnings"])
    assert rep["settings"]["warmup"] == 5_982
    assert not any("warm-up" in w for w in rep["warnings"])
    short = _small(scenario="paper-100", policies=["pas"], replications=2, horizon=300, warmup=30)
    assert any("warm-up" in w for w in short["warnings"])
    assert _small(horizon=20_000)["warnings"] == []


def test_workers_1_and_2_give_identical_reports():
    # "optimal" is rolled out through the env and may randomise (LP policy): its generator is
    # reseeded per replication, so it is reproducible whichever worker runs it
    pols = ["pas", "jsq", "random", "optimal"]
    a = _small(workers=1, policies=pols)
    b = _small(workers=2, policies=pols)
    assert b["backend"]["kind"] == "process-pool"
    for key in DETERMINISTIC_KEYS:
        assert a[key] == b[key], key


def test_pas_efficiency_within_ci_of_exact_value():
    """PAS on tiny: 10 independent replications; the estimate must be within the
    (1 - ALPHA) Student-t interval of the exact CTMC value. The harness reports the 95% half-width
    ci95 = t_{0.975, R-1} se, so the tolerance is t_{1-ALPHA/2, R-1} / t_{0.975, R-1} * ci95
    (the window bias is O(1/horizon), far below se)."""
    rep = _small(policies=["pas"], replications=10, horizon=20_000)
    e = rep["policies"]["pas"]["efficiency"]
    R = e["n"]
    tol = sps.t.ppf(1 - ALPHA / 2, R - 1) / sps.t.ppf(0.975, R - 1) * e["ci95"]
    assert abs(e["mean"] - TINY_PAS_EXACT) <= tol, (e, tol)


# ---------------------------------------------------------------------------------------------
# routes: compiled built-in vs env rollout
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["pas", "jsq", "whittle"])
def test_builtin_and_env_routes_agree(name):
    """The same priority policy through the compiled dispatcher and through ServerFarmEnv +
    predict(): same seed, same window, so the same statistics (bit-identical on tiny, whose rates
    are exact binary fractions)."""
    cfg = load_scenario("tiny")
    pol = resolve_policy(name, cfg)
    kind, table = policy_route(pol)
    assert kind == "priority"
    fast = simulate_builtin(cfg, kind, horizon=2_000, warmup=200, seed=11, table=table)
    slow = rollout(pol, cfg, horizon=2_000, warmup=200, seed=11)
    assert slow.invalid_actions == 0
    assert fast.stats.epochs == slow.stats.epochs == 2_000
    assert fast.stats.work == slow.stats.work and fast.stats.energy == slow.stats.energy
    assert np.array_equal(fast.stats.blocked, slow.stats.blocked)


def test_no_builtin_flag_reproduces_builtin_numbers():
    a = _small(policies=["pas", "jsq"], horizon=800)
    b = _small(policies=["pas", "jsq"], horizon=800, use_builtin=False)
    assert b["policies"]["jsq"]["route"] == "env"
    for name in ("pas", "jsq"):
        ea, eb = dict(a["policies"][name]), dict(b["policies"][name])
        ea.pop("route"), eb.pop("route")
        assert ea == eb


class FirstAllowed:
    """A user policy: the lowest-index allowed server (any object with predict works)."""

    name = "first-allowed"

    def predict(self, obs, action_masks=None, deterministic=True):
        return int(np.flatnonzero(action_masks)[0]), None


def test_user_policy_object_is_evaluated_through_the_env():
    rep = _small(policies=["pas", FirstAllowed()], horizon=500)
    e = rep["policies"]["first-allowed"]
    assert e["route"] == "env" and e["invalid_actions"] == 0
    assert 0 < e["efficiency"]["mean"] < 1


def _const_loader(arg, config, action_mode, seed):
    return resolve_policy(arg, config, action_mode, seed)


def test_prefix_resolvers_extend_policy_names():
    register_policy_resolver("alias", _const_loader)
    rep = _small(policies=["alias:jsq"], horizon=400)
    direct = _small(policies=["jsq"], horizon=400)
    assert rep["policies"]["alias:jsq"]["efficiency"] == direct["policies"]["jsq"]["efficiency"]
    with pytest.raises(ValueError, match="unknown policy 'nothere:x'"):
        _small(policies=["nothere:x"])


# ---------------------------------------------------------------------------------------------
# atomic outputs
# ---------------------------------------------------------------------------------------------
def test_atomic_writer_keeps_old_file_when_interrupted(tmp_path):
    path = tmp_path / "out.json"
    atomic_write(path, '{"old": true}\n')
    for exc in (RuntimeError("boom"), KeyboardInterrupt()):
        with pytest.raises(type(exc)), atomic_open(path) as fh:
            fh.write('{"new": ')  # half a document ...
            fh.flush()
            raise exc  # ... then the interruption
        assert path.read_text() == '{"old": true}\n'
    fresh = tmp_path / "fresh.json"
    with pytest.raises(RuntimeError), atomic_open(fresh) as fh:
        fh.write("partial")
        raise RuntimeError
    assert not fresh.exists()
    assert sorted(os.listdir(tmp_path)) == ["out.json"], "temporary files left behind"
    atomic_write(path, b"new bytes")
    assert path.read_bytes() == b"new bytes"


def test_missing_output_directory_fails_before_running(tmp_path, capsys):
    rc = evaluate_cli.main(["tiny", "--horizon", "100", "--json", str(tmp_path / "no" / "o.json")])
    assert rc == 2 and "does not exist" in capsys.readouterr().err


# ---------------------------------------------------------------------------------------------
# sweeps
# ---------------------------------------------------------------------------------------------
def test_sweep_over_farm_sizes(tmp_path):
    # compute_optimum=False: the exact LP of tiny x3 (49k variables) takes minutes
    res = sweep(["tiny"], ["pas", "jsq"], seeds=[0, 1], scales=[1, 3], replications=2,
                horizon=400, workers=1, progress=False, compute_optimum=False)  # fmt: skip
    assert len(res["runs"]) == 4 and len(res["rows"]) == 8
    assert sorted({r["n_servers"] for r in res["rows"]}) == [4, 12]
    # a sweep run equals the stand-alone evaluation of the same (scenario, scale, seed)
    one = _small(policies=["pas", "jsq"], replications=2, horizon=400, seed=1, scale=3,
                 compute_optimum=False)  # fmt: skip
    run = next(r for r in res["runs"] if r["scale"] == 3 and r["settings"]["seed"] == 1)
    assert run["policies"] == one["policies"]
    out = tmp_path / "s.csv"
    rc = sweep_cli.main(["--scenarios", "tiny", "--scales", "1,2", "--policies", "jsq",
                         "--replications", "2", "--horizon", "300", "--workers", "1",
                         "--csv", str(out), "--json", str(tmp_path / "s.json"),
                         "--plot", str(tmp_path / "s.png"), "--quiet",
                         "--optimum-max-variables", "1000"])  # fmt: skip
    assert rc == 0
    rows = list(csv.DictReader(out.open()))
    assert len(rows) == 4 and {r["policy"] for r in rows} == {"pas", "jsq"}
    assert all(math.isfinite(float(r["efficiency_mean"])) for r in rows)
    # tiny (460 LP variables) is solved, tiny x2 (7,525) is refused by the limit: null + reason
    runs = json.loads((tmp_path / "s.json").read_text())["runs"]
    assert runs[0]["optimum"] is not None and runs[1]["optimum"] is None
    assert "1000" in runs[1]["optimum_reason"]


# ---- work that cannot fit is refused before anything is built ----------------------------------
@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"replications": 10**9}, r"replications: at most 10,000 \(MAX_REPLICATIONS\)"),
        ({"replications": 0}, r"replications: must be an integer >= 1"),
        ({"seed": -1}, r"seed: must be an integer >= 0, got -1"),
        ({"seed": 1.5}, r"seed: must be an integer >= 0"),
        ({"horizon": 10**21}, r"horizon \+ warmup: .* at most 10,000,000,000"),
        ({"horizon": float("nan")}, r"horizon: must be a positive integer"),
        ({"horizon": 100, "warmup": -1}, r"warmup: must be an integer >= 0"),
        ({"policies": []}, r"policies: give at least one policy"),
    ],
)
def test_plan_refuses_work_that_cannot_fit_before_building_anything(kwargs, match, monkeypatch):
    import serverfarm_gym.evaluation.policy_report as harness

    # neither the scenario nor a seed is built: a billion replications built every seed first
    monkeypatch.setattr(harness, "load_scenario", lambda *a: pytest.fail("scenario built"))
    monkeypatch.setattr(harness, "replication_seeds", lambda *a: pytest.fail("seeds built"))
    with pytest.raises(ValueError, match=match):
        harness.plan_evaluation("tiny", **({"policies": ["pas"]} | kwargs))


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"scales": []}, r"scales: give at least one"),
        ({"seeds": []}, r"seeds: give at least one"),
        ({"policies": []}, r"policies: give at least one"),
        ({"seeds": [0, -1]}, r"seed: must be an integer >= 0, got -1"),
        ({"seeds": list(range(100)), "replications": 300}, r"120,000 work units; at most 100,000"),
    ],
)
def test_sweep_refuses_empty_lists_and_oversized_sweeps_before_planning(kwargs, match, monkeypatch):
    import serverfarm_gym.evaluation.sweep_report as sweeps

    monkeypatch.setattr(sweeps, "plan_evaluation", lambda *a, **k: pytest.fail("planned"))
    with pytest.raises(ValueError, match=match):
        sweeps.sweep(["tiny"], **kwargs)


def test_replication_seeds_are_bounded_and_named():
    with pytest.raises(ValueError, match=r"replications: must be between 1 and 10,000"):
        replication_seeds(0, 10**9)
    with pytest.raises(ValueError, match=r"seed: must be an integer >= 0, got -1"):
        replication_seeds(-1, 2)


class _CheckedPAS:
    """PAS with a stated per-farm check cost, as ``generalist-checked`` states its own."""

    check_cpu_seconds = 1.25

    def __init__(self, config):
        from serverfarm_gym.baselines.registry import make_policy

        self._pas = make_policy("pas", config)
        self.action_mode = "server"

    def predict(self, obs, state=None, episode_start=None, deterministic=True, action_masks=None):
        return self._pas.predict(obs, action_masks=action_masks)


@pytest.mark.parametrize("exact", [False, True])
def test_a_policy_that_checks_itself_on_the_farm_shows_the_cost(exact):
    from serverfarm_gym.evaluation import evaluate_exact
    from serverfarm_gym.evaluation.outputs import format_table

    config = load_scenario("tiny")
    if exact:
        rep = evaluate_exact(config, ["pas", _CheckedPAS(config)], compute_optimum=False)
    else:
        rep = evaluate(config, ["pas", _CheckedPAS(config)], replications=2, horizon=400,
                       warmup=100, workers=1, progress=False, compute_optimum=False)  # fmt: skip
    (label,) = [k for k in rep["policies"] if k != "pas"]
    assert rep["policies"][label]["check_cpu_s"] == 1.25
    assert "check_cpu_s" not in rep["policies"]["pas"]
    assert f"note: {label} checked itself on this farm before acting (1.2 CPU-s" in format_table(
        rep
    )
