"""The guarded generalist (agents/generalist/guard.py): never below PAS where it can check."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from serverfarm_gym.agents.generalist import (  # noqa: E402
    GeneralistConfig,
    GeneralistTrainer,
    TokenGeneralistPolicy,
)
from serverfarm_gym.agents.generalist.guard import GuardedGeneralistPolicy  # noqa: E402
from serverfarm_gym.agents.generalist.policy import GeneralistPolicy  # noqa: E402
from serverfarm_gym.baselines.pas import PASPolicy  # noqa: E402
from serverfarm_gym.baselines.registry import make_policy  # noqa: E402
from serverfarm_gym.envs.config import farm_from_dict  # noqa: E402
from serverfarm_gym.envs.scenarios import load_scenario  # noqa: E402
from serverfarm_gym.evaluation.efficiency import measure  # noqa: E402
from serverfarm_gym.evaluation.exact import exact_solvable  # noqa: E402


def _bad_net(anchor: float = 4.0):
    """A network that prefers low levels of the first groups by 30 nats: far from PAS."""
    tr = GeneralistTrainer(GeneralistConfig(anchor=anchor))
    with torch.no_grad():
        tr.net.logit_head[-1].bias.copy_(torch.linspace(30.0, 0.0, tr.cfg.max_levels))
    return tr.net, {"max_groups": tr.cfg.max_groups, "max_levels": tr.cfg.max_levels}


def test_registry_names() -> None:
    c = load_scenario("tiny")
    # "generalist" is the table network alone (zero-shot); the token network's per-farm check
    # has its own name
    assert type(make_policy("generalist", c)) is GeneralistPolicy
    checked = make_policy("generalist-checked", c)
    assert type(checked) is GuardedGeneralistPolicy and checked.name == "generalist-checked"
    # the check's CPU time is on the policy, for reports to show
    assert checked.check_cpu_seconds == checked.guard_report["cpu_s"] >= 0.0


@pytest.mark.parametrize("name", ["tiny", "pas-gap", "speed-scaling"])
def test_exact_guard_keeps_the_best_candidate(name: str) -> None:
    """Exactly solvable: the guarded policy's efficiency is the best of its candidates' and
    PAS's (so never below PAS), and its report says which."""
    c = load_scenario(name)
    g = GuardedGeneralistPolicy(c, "server")
    rep = g.guard_report
    assert rep["method"] == "exact" and len(rep["candidates"]) == 4
    pas = measure(PASPolicy(c), c, action_mode="server", method="exact").efficiency
    eff = measure(g, c, action_mode="server", method="exact").efficiency
    best = max(r["gain_pct"] for r in rep["candidates"])
    assert eff >= pas
    assert 100.0 * (eff - pas) / pas == pytest.approx(max(best, 0.0), abs=1e-9)


def test_a_bad_network_is_replaced_by_pas_exactly() -> None:
    c = load_scenario("tiny")
    net, sizes = _bad_net()
    raw = TokenGeneralistPolicy(c, "server", net=net, **sizes)
    pas = measure(PASPolicy(c), c, action_mode="server", method="exact").efficiency
    assert measure(raw, c, action_mode="server", method="exact").efficiency < pas
    g = GuardedGeneralistPolicy(c, "server", net=net, **sizes)
    assert g.guard_report["chosen"] == "pas"
    assert measure(g, c, action_mode="server", method="exact").efficiency == pytest.approx(
        pas, rel=1e-12
    )


def test_simulated_guard_on_a_farm_beyond_the_exact_chain() -> None:
    """Not exactly solvable: the paired simulation decides; a network not shown better than PAS
    (lower end of the paired interval <= 0) gives way to PAS's own actions."""
    c = farm_from_dict({
        "name": "guard-30",
        "groups": [{"name": "a", "count": 12, "service_rate": 1.0, "busy_power": 2.0,
                    "idle_power": 1.0, "buffer": 3},
                   {"name": "b", "count": 18, "service_rate": 2.0, "busy_power": 3.0,
                    "idle_power": 1.0, "buffer": 3}],
        "job_types": [{"name": "j", "arrival_rate": 25.0, "groups": ["a", "b"]}],
    })  # fmt: skip
    assert not exact_solvable(c)
    net, sizes = _bad_net()
    g = GuardedGeneralistPolicy(c, "server", net=net, sim_factors=(1.0,), replications=4, **sizes)
    rep = g.guard_report
    assert rep["method"] == "simulation (paired)" and rep["chosen"] == "pas"
    (row,) = rep["candidates"]
    assert not row["eligible"] and row["gain_pct"] - row["ci95_pct"] <= 0  # not shown better
    env_obs = np.zeros((3, c.n_servers + c.n_job_types), dtype=np.float32)
    env_obs[:, c.n_servers] = 1.0
    masks = np.ones((3, c.n_servers), dtype=bool)
    pas = PASPolicy(c, "server")
    np.testing.assert_array_equal(g.predict(env_obs, action_masks=masks)[0],
                                  pas.predict(env_obs, action_masks=masks)[0])  # fmt: skip


def test_bad_guard_arguments_and_a_network_without_anchor() -> None:
    c = load_scenario("tiny")
    with pytest.raises(ValueError, match="factors: positive finite"):
        GuardedGeneralistPolicy(c, factors=(0.0,))
    with pytest.raises(ValueError, match="replications: at least 2"):
        GuardedGeneralistPolicy(c, replications=1)
    net, sizes = _bad_net(anchor=0.0)  # no anchor to vary: the network itself or PAS
    g = GuardedGeneralistPolicy(c, net=net, **sizes)
    assert [r["anchor"] for r in g.guard_report["candidates"]] == [0.0]
    assert g.guard_report["chosen"] == "pas"
