"""The masked PPO (agents/ppo/ppo.py): its math against direct formulas, masking, the
saved model behind PPOAgent, that a short run on tiny learns (exact evaluation), and that the
learning-rate schedule spans the whole run (so a resumed run continues it)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

pytest.importorskip("sb3_contrib")

from serverfarm_gym.agents.ppo.agent import MASKED_LOGIT, numpy_predictor
from serverfarm_gym.agents.ppo.config import PPOConfig, auto_gamma, recommended
from serverfarm_gym.agents.ppo.losses import clone_loss, gae, ppo_losses
from serverfarm_gym.agents.ppo.ppo import PPO
from serverfarm_gym.envs.scenarios import load_scenario

SMALL = {"n_envs": 8, "n_steps": 32, "batch_size": 128, "n_epochs": 2}


def test_gae_matches_the_direct_sum():
    """A_t = sum_l (gamma lam)^l delta_{t+l}, delta_t = r_t - rho + gamma V_{t+1} - V_t, with
    V_T the bootstrap value; discounted (rho 0) and differential (gamma 1, rho > 0)."""
    g = torch.Generator().manual_seed(0)
    T, N = 5, 3
    r, v, last = torch.randn(T, N, generator=g), torch.randn(T, N, generator=g), torch.randn(N)
    for gamma, lam, rho in ((0.9, 0.8, 0.0), (1.0, 0.7, 0.37), (0.99, 1.0, 0.0)):
        adv, ret = gae(r, v, last, gamma, lam, rho)
        vnext = torch.cat([v[1:], last[None]])
        delta = r - rho + gamma * vnext - v
        for t in range(T):
            direct = sum((gamma * lam) ** k * delta[t + k] for k in range(T - t))
            torch.testing.assert_close(adv[t], direct, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(ret, adv + v)
    # lam = 1, gamma = 1, rho = 0: the advantage is the plain return-to-go minus V
    adv, _ = gae(r, v, last, 1.0, 1.0)
    togo = torch.flip(torch.cumsum(torch.flip(r, [0]), 0), [0]) + last
    torch.testing.assert_close(adv, togo - v, rtol=1e-5, atol=1e-5)


def test_ppo_losses_on_a_hand_computed_batch():
    # two samples, three actions; sample 1 has action 2 masked
    logits = torch.tensor([[0.0, math.log(3.0), 0.0], [math.log(2.0), 0.0, 5.0]])
    masks = torch.tensor([[True, True, True], [True, True, False]])
    actions = torch.tensor([1, 0])
    # probabilities: [0.2, 0.6, 0.2] and [2/3, 1/3, 0]
    p_new = torch.tensor([0.6, 2.0 / 3.0])
    ratio_target = torch.tensor([1.5, 0.5])  # one ratio above 1 + eps, one below 1 - eps
    old_logp = torch.log(p_new / ratio_target)
    adv = torch.tensor([1.0, -2.0])
    values, returns = torch.tensor([0.5, -1.0]), torch.tensor([1.5, 1.0])
    t = ppo_losses(logits, masks, values, actions, old_logp, adv, returns, clip_range=0.2)
    # sample 0: A > 0, ratio 1.5 -> min(1.5, 1.2) * 1 = 1.2; sample 1: A < 0, ratio 0.5 ->
    # min(0.5 * -2, 0.8 * -2) = -1.6; loss = -mean(1.2, -1.6) = 0.2
    assert float(t["policy"]) == pytest.approx(0.2, rel=1e-5)
    assert float(t["value"]) == pytest.approx((1.0 + 4.0) / 2)
    h0 = -(0.2 * math.log(0.2) * 2 + 0.6 * math.log(0.6))
    h1 = -(2 / 3 * math.log(2 / 3) + 1 / 3 * math.log(1 / 3))
    assert float(t["entropy"]) == pytest.approx((h0 + h1) / 2, rel=1e-5)
    assert float(t["clip_fraction"]) == 1.0
    # gradients stay finite with masked actions (the reason for MASKED_LOGIT, not -inf)
    lg = logits.clone().requires_grad_(True)
    out = ppo_losses(lg, masks, values, actions, old_logp, adv, returns, 0.2)
    (out["policy"] - 0.01 * out["entropy"]).backward()
    assert torch.isfinite(lg.grad).all()


def test_clone_loss_with_label_smoothing_on_a_hand_computed_batch():
    # the batch of test_ppo_losses: probabilities [0.2, 0.6, 0.2] and [2/3, 1/3, (masked)]
    logits = torch.tensor([[0.0, math.log(3.0), 0.0], [math.log(2.0), 0.0, 5.0]])
    masks = torch.tensor([[True, True, True], [True, True, False]])
    actions = torch.tensor([1, 0])
    # smoothing 0.3: targets [0.1, 0.8, 0.1] (3 valid) and [0.85, 0.15, 0] (2 valid)
    l0 = -(0.1 * math.log(0.2) + 0.8 * math.log(0.6) + 0.1 * math.log(0.2))
    l1 = -(0.85 * math.log(2 / 3) + 0.15 * math.log(1 / 3))
    assert float(clone_loss(logits, masks, actions, 0.3)) == pytest.approx((l0 + l1) / 2, rel=1e-6)
    # smoothing 0 is the plain cross-entropy of PAS's choice
    hard = -(math.log(0.6) + math.log(2 / 3)) / 2
    assert float(clone_loss(logits, masks, actions, 0.0)) == pytest.approx(hard, rel=1e-6)
    # its minimiser is the smoothed target itself: zero gradient at logits = log(target)
    target = torch.tensor([[0.1, 0.8, 0.1], [0.85, 0.15, 1e-3]])
    lg = target.log().requires_grad_(True)
    clone_loss(lg, masks, actions, 0.3).backward()
    torch.testing.assert_close(lg.grad, torch.zeros_like(lg), rtol=0, atol=1e-7)


def test_smoothed_clone_keeps_pas_argmax_and_entropy():
    """A hard clone is near-deterministic; with smoothing s the probability of PAS's choice
    approaches 1 - s + s / n_valid < 1 (the fit is not exact: a few states err), while the
    deterministic policy is still PAS's on the cloned states."""
    kw = {"n_steps": 128, "epochs": 200}  # 1,024 states, 200 Adam steps: the fit converges
    h = PPO("tiny", action_mode="server", seed=3, clone_smoothing=0.0, **SMALL)
    hard = h.clone_pas(**kw)
    soft = PPO("tiny", action_mode="server", seed=3, clone_smoothing=0.3, **SMALL)
    s = soft.clone_pas(**kw)
    assert hard["accuracy"] > 0.97 and s["accuracy"] > 0.97
    assert hard["p_pas"] > 0.95
    # tiny has 2-4 valid actions: the target puts 0.775-0.85 on PAS's choice
    assert 0.745 < s["p_pas"] < 0.88
    assert s["entropy"] > 3 * hard["entropy"]
    with pytest.raises(ValueError, match="smoothing"):
        soft.clone_pas(n_steps=1, smoothing=1.0)


def test_critic_warmup_updates_only_the_value_net():
    t = PPO("tiny", action_mode="server", seed=4, critic_warmup=1, **SMALL)
    params = {k: v.clone() for k, v in t.policy.state_dict().items()}
    per = SMALL["n_envs"] * SMALL["n_steps"]
    t.learn(per)
    after = {k: v.clone() for k, v in t.policy.state_dict().items()}
    changed = {k for k in params if not torch.equal(params[k], after[k])}
    assert changed and all(k.startswith(("mlp_extractor.value_net", "value_net")) for k in changed)
    assert t.history[-1]["critic_only"] == 1.0
    t.learn(per)  # the warm-up is over: now the policy moves too
    assert not torch.equal(after["action_net.weight"], t.policy.state_dict()["action_net.weight"])
    assert t.history[-1]["critic_only"] == 0.0


def test_pas_anchor_records_pas_choices_and_pulls_towards_them():
    from serverfarm_gym.baselines.registry import make_policy

    t = PPO("tiny", action_mode="group", seed=5, pas_anchor=1.0, **SMALL)
    buf = t._buffer()
    t.collect(buf)
    pas = make_policy("pas", t.config, "group")
    obs, masks = buf["obs"].flatten(0, 1).numpy(), buf["masks"].flatten(0, 1).numpy()
    want, _ = pas.predict(obs, action_masks=masks)
    np.testing.assert_array_equal(buf["pas"].flatten().numpy(), want)
    flat_obs, flat_m, flat_pas = (
        buf["obs"].flatten(0, 1),
        buf["masks"].flatten(0, 1),
        buf["pas"].flatten(),
    )

    def anchor_loss() -> float:
        with torch.no_grad():
            return float(clone_loss(t.forward(flat_obs)[0], flat_m, flat_pas, 0.2))

    before = anchor_loss()
    t.cfg.pas_anchor = 50.0  # dominant over PPO's terms: the updates must lower it
    for _ in range(5):
        t.update(buf, 1.0)
    after = anchor_loss()
    assert after < before - 0.05


def test_masked_actions_are_never_sampled():
    t = PPO("tiny", action_mode="server", seed=1, **SMALL)
    with torch.no_grad():  # make every action but the last overwhelmingly preferred
        t.policy.action_net.bias.copy_(torch.tensor([50.0, 50.0, 50.0, -50.0]))
    buf = t._buffer()
    t.collect(buf)
    chosen = buf["masks"].gather(2, buf["actions"][..., None]).squeeze(-1)
    assert chosen.all()
    assert (~buf["masks"]).any()  # masks did exclude something in this rollout
    assert MASKED_LOGIT < -1e7


def test_save_load_gives_identical_predictions(tmp_path):
    from serverfarm_gym.agents.ppo import PPOAgent

    t = PPO("tiny", action_mode="group", seed=2, **SMALL)
    t.learn(SMALL["n_envs"] * SMALL["n_steps"])
    path = t.save(tmp_path / "model.zip")
    agent = PPOAgent.load(path)
    assert agent.action_mode == "group" and agent.meta["trainer"] == "ppo"
    venv = t.venv
    obs, _ = venv.reset(seed=11)
    fast = numpy_predictor(agent.policy)
    for _ in range(50):
        m = venv.action_masks()
        a_agent, _ = agent.predict(obs, action_masks=m)
        a_ppo = t.predict_batch(obs, m)
        np.testing.assert_array_equal(a_agent, a_ppo)
        np.testing.assert_array_equal(fast(obs, m), a_ppo)
        obs = venv.step(a_ppo)[0]
    # continuing from the file: same network, same Adam state, same step count
    again = PPO.load(path)
    assert again.num_timesteps == t.num_timesteps and again.cfg == t.cfg
    assert again.n_updates == t.n_updates == 1  # a critic warm-up is not repeated on resume
    for a, b in zip(
        again.policy.state_dict().values(), t.policy.state_dict().values(), strict=True
    ):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    sa, sb = again.optimizer.state_dict()["state"], t.optimizer.state_dict()["state"]
    assert sa.keys() == sb.keys()
    for k in sa:
        torch.testing.assert_close(sa[k]["exp_avg"], sb[k]["exp_avg"], rtol=0, atol=0)


def test_a_file_with_the_earlier_sidecar_tag_loads(tmp_path):
    """Files written by earlier versions (``"trainer": "lean_ppo"``, settings in
    ``lean_ppo_config``) load for training and as a policy; an untagged one is refused."""
    import json

    from serverfarm_gym.agents.ppo import PPOAgent

    t = PPO("tiny", action_mode="group", seed=2, **SMALL)
    path = t.save(tmp_path / "model.zip")
    side = path.with_suffix(".json")
    meta = json.loads(side.read_text())
    meta["trainer"], meta["lean_ppo_config"] = "lean_ppo", meta.pop("ppo_config")
    side.write_text(json.dumps(meta))
    again = PPO.load(path)
    assert again.cfg == t.cfg and again.num_timesteps == t.num_timesteps
    assert PPOAgent.load(path).action_mode == "group"
    meta["trainer"] = "other"
    side.write_text(json.dumps(meta))
    with pytest.raises(ValueError, match=r"not saved by PPO\.save"):
        PPO.load(path)


def test_config_errors_name_the_field():
    with pytest.raises(ValueError, match="batch_size"):
        PPOConfig(n_envs=2, n_steps=4, batch_size=64).check()
    with pytest.raises(ValueError, match="advantage"):
        PPOConfig(advantage="mean").check()
    with pytest.raises(ValueError, match="gamma"):
        PPOConfig(gamma=1.5).check()
    with pytest.raises(ValueError, match="clone_smoothing"):
        PPOConfig(clone_smoothing=1.0).check()
    with pytest.raises(ValueError, match="pas_anchor"):
        PPOConfig(pas_anchor=-1.0).check()
    with pytest.raises(ValueError, match="critic_warmup"):
        PPOConfig(critic_warmup=-1).check()


def test_auto_gamma_is_a_horizon_in_model_time():
    from serverfarm_gym.evaluation.policy_report import epochs_per_duration

    tiny, p100 = load_scenario("tiny"), load_scenario("paper-100")
    # tiny: 2.5 decision epochs per mean duration -> 4 durations = 10 epochs -> gamma 0.9
    assert auto_gamma(tiny) == pytest.approx(0.9, abs=1e-9)
    # the effective horizon 1 / (1 - gamma) is 4 mean durations in epochs on every farm
    for c in (tiny, p100):
        assert 1 / (1 - auto_gamma(c)) == pytest.approx(4 * epochs_per_duration(c), rel=1e-9)
    assert 1 / (1 - auto_gamma(p100, 8.0)) == pytest.approx(8 * epochs_per_duration(p100))


@pytest.mark.slow
def test_short_training_on_tiny_beats_random_exactly():
    """Exact (CTMC) efficiencies: no sampling error, so a strict comparison is sound. A random
    initial policy, then 40,960 steps; the learnt policy must beat it and reach PAS's exact
    efficiency (PAS is optimal up to 0.4% on tiny; the optimum bounds both)."""
    from serverfarm_gym.evaluation.efficiency import measure, pas_efficiency
    from serverfarm_gym.evaluation.references import optimum_solution

    config = load_scenario("tiny")
    t = PPO(
        config, action_mode="server", seed=0, n_envs=16, n_steps=128, batch_size=512,
        horizon_durations=4.0,  # gamma 0.9: on tiny 1 duration (0.6) drifts late (BENCHMARKS.md)
    )  # fmt: skip
    start = measure(t.predict_batch, config, action_mode="server", method="exact").efficiency
    t.learn(40_960)
    end = measure(t.predict_batch, config, action_mode="server", method="exact").efficiency
    pas = pas_efficiency(config).efficiency
    sol, _ = optimum_solution(config)
    opt = None if sol is None else float(sol.value)
    assert end > start
    assert end >= pas * (1 - 1e-9)  # equal decisions: equal up to the CTMC solve's tolerance
    assert opt is None or end <= opt + 1e-9


def test_recommended_settings_follow_decisions_per_duration():
    tiny, p100 = load_scenario("tiny"), load_scenario("paper-100")
    small, large = recommended(tiny), recommended(p100)
    # tiny: 2.5 decisions per mean duration (<= 30): many Adam steps per sample, no anchor
    assert small["batch_size"] == 128 and small["n_epochs"] == 10 and "pas_anchor" not in small
    # paper-100: ~120 per duration: large minibatches, a low rate and the anchor to PAS
    assert large["pas_anchor"] == 1.0 and large["learning_rate"] == 1e-4
    assert (large["n_envs"], large["n_steps"]) == (64, 256)
    # large-10k: ~12,000 per duration: fewer, longer envs (each starts with a 50-duration warm-up)
    huge = recommended(load_scenario("large-10k"))
    assert (huge["n_envs"], huge["n_steps"]) == (16, 1024) and huge["pas_anchor"] == 1.0
    for rec in (small, large):
        cfg = PPOConfig(**rec).check()
        assert cfg.n_envs * cfg.n_steps >= cfg.batch_size
    # a horizon of one mean duration: tiny's discount 1 - 1 / 2.5 = 0.6, paper-100's 1 - 1 / 119.6
    assert small["horizon_durations"] == large["horizon_durations"] == 1.0
    t = PPO(tiny, action_mode="server", **(small | {"n_envs": 2}))
    assert t.gamma == pytest.approx(0.6, abs=1e-9)
    assert auto_gamma(p100, 1.0) == pytest.approx(1 - 1 / 119.625, rel=1e-4)


# ---- the run's schedule ----------------------------------------------------------------
SMALL_NET = {"n_envs": 4, "n_steps": 32, "batch_size": 64, "n_epochs": 2, "net_arch": (16, 16)}


def test_learning_rate_schedule_spans_the_run():
    """With schedule_total = 2 rollouts, the first update uses the full rate and the second half
    of it, whether both run in one learn call or the second after a 'resume'."""
    cfg = PPOConfig(action_mode="server", seed=1, learning_rate=1e-3, **SMALL_NET)
    per = cfg.n_envs * cfg.n_steps
    t = PPO(load_scenario("tiny"), cfg)
    t.schedule_total = 2 * per
    t.learn(per)
    t.learn(per)  # a second call continues the schedule instead of restarting it
    assert [h["lr"] for h in t.history] == pytest.approx([1e-3, 5e-4])
