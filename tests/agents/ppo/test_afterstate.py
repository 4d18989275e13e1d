"""The afterstate critic: afterstate observations are the env's own encoding of the farm one
job fuller, the afterstate lambda-returns match their recursion by hand, and PPO trains with it."""

from pathlib import Path

import numpy as np
import pytest
import torch

from serverfarm_gym.agents.ppo.afterstate import (
    AfterstateMap,
    afterstate_returns,
    afterstate_values,
)
from serverfarm_gym.agents.ppo.ppo import PPO
from serverfarm_gym.envs.observation import decode_group_action, encode_occupancy, n_actions
from serverfarm_gym.envs.scenarios import load_scenario

SCENARIOS = Path(__file__).resolve().parents[3] / "scenarios"


@pytest.mark.parametrize("name", ["tiny", "speed-scaling", "pas-gap"])
@pytest.mark.parametrize("mode", ["group", "server"])
def test_afterstate_is_the_encoding_one_job_fuller(name, mode):
    c = load_scenario(name)
    rng = np.random.default_rng(0)
    occ = rng.integers(0, c.buffers[c.server_group] + 1, size=(50, c.n_servers))
    amap = AfterstateMap(c, mode)
    J = c.n_job_types
    for j in range(J):
        obs, masks = encode_occupancy(c, mode, occ, j)
        after = amap.after(torch.from_numpy(obs)).numpy()
        assert after.shape == (len(occ), n_actions(c, mode), obs.shape[1])
        for n in range(len(occ)):
            for a in np.flatnonzero(masks[n]):
                nxt = occ[n].copy()
                if mode == "server":
                    nxt[a] += 1
                else:  # a server of the action's (group, level)
                    k, b = decode_group_action(c, int(a))
                    nxt[np.flatnonzero((c.server_group == k) & (occ[n] == b))[0]] += 1
                want, _ = encode_occupancy(c, mode, nxt[None], j)
                want[0, -J:] = 0.0  # the next job's type is not known in the afterstate
                np.testing.assert_allclose(after[n, a], want[0], atol=1e-6)


def test_a_farm_with_sleep_is_refused_naming_the_option():
    with pytest.raises(ValueError, match="advantage"):
        AfterstateMap(load_scenario(str(SCENARIOS / "sleep-tiny.yaml")), "group")


def test_afterstate_returns_follow_the_lambda_recursion():
    g = torch.Generator().manual_seed(0)
    r, v = torch.rand(5, 3, generator=g), torch.rand(5, 3, generator=g)
    last, rho = torch.rand(3, generator=g), 0.3
    # lambda 0: one step, then the state value of the next decision
    nxt = torch.cat([v[1:], last[None]])
    torch.testing.assert_close(afterstate_returns(r, v, last, 0.0, rho), r - rho + nxt)
    # lambda 1: the whole rest of the rollout, bootstrapped at its end
    tail = torch.flip(torch.cumsum(torch.flip(r - rho, [0]), 0), [0]) + last
    torch.testing.assert_close(afterstate_returns(r, v, last, 1.0, rho), tail)
    # any lambda: G_t = r_t - rho + (1 - lam) V(s_{t+1}) + lam G_{t+1}, G_T = V(s_T)
    lam, G = 0.7, afterstate_returns(r, v, last, 0.7, rho)
    after_g = torch.cat([G[1:], last[None]])
    torch.testing.assert_close(G, r - rho + (1 - lam) * nxt + lam * after_g)


def test_state_value_is_the_policy_expectation_over_valid_actions():
    c = load_scenario("tiny")
    amap = AfterstateMap(c, "group")
    obs, masks = encode_occupancy(c, "group", np.zeros((1, c.n_servers), np.int64), 0)
    logits = torch.tensor([[0.3, -1.0, 2.0, 0.5, 0.0, 0.1][: masks.shape[1]]])
    logp = torch.log_softmax(logits.masked_fill(~torch.from_numpy(masks), -1e8), -1)
    U, V = afterstate_values(amap.after(torch.from_numpy(obs)), lambda x: x.sum(-1), logp)
    p = torch.exp(logp)[0]
    assert float(p[~torch.from_numpy(masks[0])].sum()) == 0.0
    torch.testing.assert_close(V[0], (p * U[0]).sum())


def test_ppo_trains_with_the_afterstate_critic_and_reloads(tmp_path):
    t = PPO("tiny", action_mode="group", advantage="afterstate", n_envs=4, n_steps=64,
            batch_size=64, n_epochs=2, seed=0)  # fmt: skip
    t.learn(512)
    assert np.isfinite(t.rho) and t.history[-1]["timesteps"] == 512
    path = t.save(tmp_path / "m")
    back = PPO.load(path)
    assert back.cfg.advantage == "afterstate" and back.rho == pytest.approx(t.rho)
    back.learn(256)  # resumes with the afterstate buffers
