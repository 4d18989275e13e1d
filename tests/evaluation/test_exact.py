"""Exact evaluation of any policy (serverfarm_gym.evaluation.exact) and ``evaluate.py --exact``."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import evaluate
from serverfarm_gym.baselines.registry import make_policy
from serverfarm_gym.baselines.solvers.ctmc import n_full_states
from serverfarm_gym.envs import ServerFarmEnv, load_scenario
from serverfarm_gym.envs.observation import encode_occupancy
from serverfarm_gym.evaluation.exact import (
    exact_evaluation,
    exact_table_solvable,
    exact_unsupported_reason,
    policy_decisions,
)
from serverfarm_gym.evaluation.policy_report import evaluate_exact
from tests.helpers.env import expected_mask, expected_obs
from tests.helpers.farms import random_env_configs

# exact values (independent solvers, tests/baselines), copied here on purpose
EXACT = {
    "tiny": {"pas": 0.3273379092816369, "optimum": 0.3289309341181227},
    "small-1": {"pas": 0.5910345757882287, "optimum": 0.593175867673168},
}


class _Opaque:
    """A policy seen only through ``predict`` (no table, no built-in): the generic route."""

    def __init__(self, policy):
        self._policy = policy
        self.action_mode = policy.action_mode

    def predict(self, obs, action_masks=None, deterministic=True):
        return self._policy.predict(obs, action_masks=action_masks, deterministic=deterministic)


@pytest.mark.parametrize("config", random_env_configs(), ids=lambda c: c.name)
@pytest.mark.parametrize("mode", ["server", "group"])
def test_encoder_is_what_the_env_shows(config, mode):
    env = ServerFarmEnv(config, action_mode=mode)
    obs, info = env.reset(seed=4)
    rng = np.random.default_rng(0)
    for _ in range(300):
        j = env.unwrapped._job
        o, m = encode_occupancy(config, mode, env.sim.occ[None], j, env.sim.interval)
        assert np.array_equal(o[0], obs) and np.array_equal(o[0], expected_obs(env))
        assert np.array_equal(m[0], info["action_mask"])
        assert np.array_equal(m[0], expected_mask(env))
        obs, _, _, _, info = env.step(int(rng.choice(np.flatnonzero(info["action_mask"]))))


@pytest.mark.parametrize("name", sorted(EXACT))
def test_exact_values_of_pas_and_the_optimum(name):
    rep = evaluate_exact(name, ["pas", "optimal"])
    for policy, key in (("pas", "pas"), ("optimal", "optimum")):
        eff = rep["policies"][policy]["efficiency"]
        assert eff["mean"] == pytest.approx(EXACT[name][key], rel=1e-9)
        assert eff["ci95"] == 0.0
    assert rep["optimum"]["efficiency"] == pytest.approx(EXACT[name]["optimum"], rel=1e-9)
    assert rep["policies"]["optimal"]["gap_to_optimum_pct"] == pytest.approx(0.0, abs=1e-7)


@pytest.mark.parametrize("name", ["pas", "jsq", "meesf", "slowest", "whittle"])
def test_generic_route_equals_the_table_route(name):
    """Asking the policy state by state through the env's encoding gives the chain the priority
    table gives: the encoder, the decisions and the ties agree."""
    cfg = load_scenario("small-1")
    pol = make_policy(name, cfg)
    direct = exact_evaluation(pol, cfg)
    generic = exact_evaluation(_Opaque(pol), cfg)
    assert generic.efficiency == pytest.approx(direct.efficiency, rel=1e-12)
    assert np.allclose(generic.pi, direct.pi, atol=1e-12)


def test_group_mode_decisions_go_to_the_smallest_index_server():
    cfg = load_scenario("tiny")
    pas = make_policy("pas", cfg, action_mode="group")
    states = np.array([[0, 0, 0, 0], [0, 0, 1, 0], [3, 3, 3, 3]])

    def pred(obs, masks):
        return pas.predict(obs, action_masks=masks)[0]

    dec = policy_decisions(pred, cfg, "group", states)
    # PAS: slow (mu/(eps-eps0) = 1) before fast (0.5); gpu jobs may only use the fast group
    assert dec[0].tolist() == [0, 2]
    assert dec[2].tolist() == [-1, -1]  # all full: blocked
    g = cfg.server_group
    for i, occ in enumerate(states):
        for s in dec[i][dec[i] >= 0]:
            same = np.flatnonzero((g == g[s]) & (occ == occ[s]))
            assert s == same[0]  # the env's group-mode rule


def test_masked_choices_are_refused():
    cfg = load_scenario("tiny")

    def bad(obs, masks):
        return np.argmin(masks, axis=1)

    with pytest.raises(ValueError, match="masked action"):
        exact_evaluation(bad, cfg)


def test_reasons_when_the_chain_is_not_exact():
    assert exact_unsupported_reason(load_scenario("tiny")) is None
    msg = exact_unsupported_reason(load_scenario("paper-100"))
    assert "states, above the limit 50000" in msg
    # large-10k: 4^10,000 states, an integer past Python's int-to-str limit (was a ValueError
    # from the message itself); the count is given in decimal digits
    msg = exact_unsupported_reason(load_scenario("large-10k"))
    assert "about 10^" in msg and "states, above the limit 50000" in msg
    small = load_scenario("small-1")  # just above a limit: the exact count
    n = n_full_states(small)
    assert exact_unsupported_reason(small, max_states=n - 1).startswith(
        f"the per-server chain has {n} states"
    )
    assert exact_unsupported_reason(small, max_states=n) is None
    det = load_scenario("tiny").with_job_size({"distribution": "deterministic"})
    with pytest.raises(ValueError, match="not exponential"):
        exact_evaluation(make_policy("pas", "tiny"), det)


def test_a_table_is_exact_where_the_chain_is_and_no_group_sleeps():
    tiny = load_scenario("tiny")
    assert exact_table_solvable(tiny)
    assert not exact_table_solvable(tiny, max_states=n_full_states(tiny) - 1)
    sleepy = load_scenario(
        str(Path(__file__).resolve().parents[2] / "scenarios" / "sleep-tiny.yaml")
    )
    assert sleepy.has_sleep and not exact_table_solvable(sleepy)
    assert not exact_table_solvable(tiny.with_job_size({"distribution": "deterministic"}))


def test_cli_exact_json_has_zero_intervals(tmp_path, capsys):
    out = tmp_path / "r.json"
    rc = evaluate.main(["tiny", "--policies", "pas,jsq,optimal", "--exact", "--json", str(out)])
    assert rc == 0
    rep = json.loads(out.read_text())
    assert rep["settings"]["method"] == "exact"
    assert rep["policies"]["pas"]["efficiency"] == {
        "mean": pytest.approx(EXACT["tiny"]["pas"], rel=1e-12), "ci95": 0.0, "std": 0.0, "n": 1,
    }  # fmt: skip
    assert "exact stationary values" in capsys.readouterr().out


def test_cli_exact_says_why_not(capsys):
    assert evaluate.main(["paper-100", "--exact", "--no-optimum", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "states, above the limit 50000" in err and "paper-100" in err
