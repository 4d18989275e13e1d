"""Training to an SLO (serverfarm_gym.agents.ppo.slo): the dual ascent between rollouts, the exact measure of
the network's sampling policy, and the constrained selection."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from serverfarm_gym.agents.ppo.config import PPOConfig
from serverfarm_gym.agents.ppo.ppo import PPO
from serverfarm_gym.agents.ppo.slo import (
    DualAscent,
    SLOEstimate,
    SLOSelector,
    exact_slo,
    exact_space,
    lp_multiplier,
    measure_slo,
    simulated_slo,
    slo_teacher,
)
from serverfarm_gym.baselines.solvers.aggregated import (
    aggregated_efficiency,
    aggregated_response_time,
)
from serverfarm_gym.baselines.solvers.ctmc import GeneratorSolver
from serverfarm_gym.envs.scenarios import load_scenario

D = 0.9
FARM = load_scenario("tiny-slo")


def _trainer(seed: int = 0, n_steps: int = 512) -> PPO:
    cfg = PPOConfig(n_envs=4, n_steps=n_steps, batch_size=256, n_epochs=1, action_mode="group",
                    seed=seed, warmup_epochs=1000, critic_warmup=100)  # fmt: skip
    return PPO(FARM, cfg)


def test_the_preset_carries_the_slo():
    assert FARM.slo is not None and FARM.slo.mean_response_time == D


@pytest.mark.parametrize(("teacher", "direction"), [("pas", +1), ("jsq", -1)])
def test_the_multiplier_moves_against_the_rollouts_violation(teacher, direction):
    """PAS (exact E[T] 1.53 > D) raises beta rollout after rollout, JSQ (0.81 < D) lowers it;
    the rollout's E[T] (Little's law over the rollout) is on the teacher's side of D. With a
    critic warm-up (value-only updates) the policy stays the hard clone of the teacher."""
    t = _trainer(n_steps=2048)  # rollouts of 8,192 decisions: E[T] within a few % of its mean
    # a sharp clone: a soft one samples other actions often enough to move E[T] past D
    clone = t.clone_pas(n_steps=2048, teacher=teacher, smoothing=0.0, epochs=40)
    assert clone["p_pas"] > 0.95
    dual = DualAscent(t.venv, FARM, step=-1.0)
    assert t.venv.slo_multiplier == pytest.approx(1 / D) and dual.step == pytest.approx(1 / D)
    betas = [t.venv.slo_multiplier]
    t.learn(3 * 2048 * 4, lambda tr: betas.append(
        dual.after_rollout(tr.num_timesteps, tr.history[-1]["mean_response_time"])))  # fmt: skip
    assert len(betas) == 4
    steps = np.diff(betas)
    assert np.all(np.sign(steps) == direction), betas
    measured = [h[1] for h in dual.history]
    assert all((m - D) * direction > 0 for m in measured), measured
    assert t.venv.slo_multiplier == betas[-1]


def test_a_zero_step_holds_the_multiplier():
    t = _trainer()
    dual = DualAscent(t.venv, FARM, step=0.0)
    assert dual.after_rollout(1, 5.0) == pytest.approx(1 / D)
    for bad in (-0.5, float("nan")):
        with pytest.raises(ValueError, match="--slo-step"):
            DualAscent(t.venv, FARM, step=bad)


def test_the_multiplier_starts_at_the_lps_dual_price_in_the_rewards_units():
    """beta0 = mu / (1 + mu D), mu the SLO row's dual price: the LP optimum maximises
    ``E[(1 + mu D) W - mu N] / E[P]``, the env's ``W - eta P - beta N`` up to that factor."""
    from serverfarm_gym.baselines.solvers.slo_optimum import solve_slo

    mu = solve_slo(FARM).info["dual_price"]
    beta0 = lp_multiplier(exact_space(FARM, "group"))
    assert beta0 == pytest.approx(mu / (1 + mu * D), rel=1e-12) and 0 < beta0 < 1 / D
    t = _trainer()
    dual = DualAscent(t.venv, FARM, step=-1.0, start=beta0)
    assert t.venv.slo_multiplier == beta0 and dual.step == pytest.approx(1 / D)
    assert dual.after_rollout(1, 0.5 * D) == 0.0  # projected: half of D lowers it by 0.5 / D


def test_exact_measure_of_a_uniform_network_is_the_uniform_randomised_chain():
    """A zero policy head samples uniformly over the allowed (group, level) actions: the exact
    measure equals the aggregated chain of that policy, built from the chain's own masks."""
    t = _trainer()
    with torch.no_grad():
        t.policy.action_net.weight.zero_()
        t.policy.action_net.bias.zero_()
    space = exact_space(FARM, "group")
    assert space is not None and exact_space(FARM, "server") is None
    eff, et = exact_slo(t.policy, FARM, space)
    probs = space.valid / np.maximum(space.valid.sum(axis=2, keepdims=True), 1)
    pi = GeneratorSolver(space.generator(probs)).stationary()
    # the network's probabilities are float32 softmaxes: 1/n to about 1e-7 relative
    assert eff == pytest.approx(aggregated_efficiency(space, pi), rel=1e-6)
    assert et == pytest.approx(aggregated_response_time(space, pi)[2], rel=1e-6)


def test_selection_refuses_a_model_missing_the_slo():
    sel = SLOSelector()
    meets = SLOEstimate(0.318, 0.0, 0.89, 0.0, "exact", D)
    misses = SLOEstimate(0.327, 0.0, 1.53, 0.0, "exact", D)  # more efficient (PAS), too slow
    assert not sel.consider(misses) and sel.best is None
    assert sel.consider(meets) and sel.best is meets
    assert not sel.consider(misses) and sel.best is meets
    better = SLOEstimate(0.320, 0.0, 0.9, 0.0, "exact", D)  # exactly at D: met
    assert sel.consider(better) and sel.best is better
    # simulated: met when the mean minus the 95% half-width is at most D
    assert SLOEstimate(0.3, 0.01, 0.95, 0.06, "simulation", D).slo_met
    assert not SLOEstimate(0.3, 0.01, 0.95, 0.04, "simulation", D).slo_met


def test_a_pas_clone_is_measured_missing_the_slo_and_not_kept():
    t = _trainer()
    t.clone_pas(n_steps=256, teacher="pas", smoothing=0.0)

    class Evaluator:  # measure_slo reads the farm only on the exact path
        config = FARM

    est = measure_slo(t, Evaluator(), exact_space(FARM, "group"))
    assert est.method == "exact" and est.mean_response_time > D and not est.slo_met
    assert not SLOSelector().consider(est)


@pytest.mark.slow
def test_train_py_meets_the_slo_near_the_constrained_optimum(tmp_path):
    """The acceptance run: ``python train.py --scenario tiny-slo`` (seed 0, the derived
    settings) keeps a model whose sampling policy meets the SLO exactly and is within 0.2% of
    the exact SLO-constrained optimum (serverfarm_gym.baselines.solvers.slo_optimum); every kept model meets it."""
    import train

    summary = train.main(["--scenario", "tiny-slo", "--output-dir", str(tmp_path / "run"),
                          "--no-progress-bar", "--no-tensorboard"])  # fmt: skip
    slo = summary["slo"]
    assert slo["kept"]["method"] == "exact" and slo["kept"]["slo_met"]
    assert slo["kept"]["mean_response_time"] <= D * (1 + 1e-9)
    assert slo["optimum"]["efficiency"] == pytest.approx(0.3202699492, rel=1e-8)
    assert 0.0 <= slo["gap_to_optimum_pct"] <= 0.2
    evals = [json.loads(line) for line in (tmp_path / "run" / "evaluations.jsonl").open()]
    assert all(e["slo"]["slo_met"] for e in evals if e["replaced_best"] and e["timesteps"] > 0)


def test_simulated_measure_agrees_with_the_exact_one():
    """The simulated measure of the sampling policy (farms without an exact chain) on the clone
    of ``slo-optimal``: efficiency and E[T] within their 99.9% Student-t intervals (scaled from
    the reported 95% half-widths, 8 replications) of the exact values."""
    from scipy.stats import t as student_t

    t = _trainer()
    t.clone_pas(n_steps=1024, teacher="slo-optimal", smoothing=0.0)
    eff, et = exact_slo(t.policy, FARM, exact_space(FARM, "group"))
    s_eff, h_eff, s_et, h_et = simulated_slo(t.policy, FARM, "group", 10_000, 8, 123, 1000)
    widen = student_t.ppf(0.9995, 7) / student_t.ppf(0.975, 7)
    assert abs(s_eff - eff) <= widen * h_eff
    assert abs(s_et - et) <= widen * h_et


def test_the_slo_start_is_the_requested_one_where_it_can_be():
    """``--init`` of an SLO farm (derived: serverfarm_gym.agents.common.farm_settings.slo_init): slo-optimal
    where the chain is solved, slo-mix on request or (with a note) without the chain; a start
    that may miss the SLO is refused, naming the choices."""
    t, space = _trainer(), exact_space(FARM, "group")
    assert slo_teacher(t, space, 0, "slo-optimal")[0].name == "slo-optimal"
    assert slo_teacher(t, space, 0, "slo-mix")[0].name == "slo-mix"
    teacher, note = slo_teacher(t, None, 0, "slo-optimal")
    assert teacher.name == "slo-mix" and "cloning slo-mix" in note
    with pytest.raises(ValueError, match=r"--init pas: .*slo-optimal or slo-mix"):
        slo_teacher(t, space, 0, "pas")
