"""The PPO trainer's criterion, optimised exactly over every deterministic policy of a small farm.

The trainer sees the farm at its decision epochs (the arrivals that have a vacancy); a step's
reward is the integral of ``W - eta P`` to the next decision (``serverfarm_gym.envs.server_farm``, "Rewards").
On a farm whose per-server chain is small (``serverfarm_gym.baselines.solvers.ctmc.full_states``), that
decision process is a finite Markov decision process:

* a decision state is ``(z, j)``: the occupancy vector ``z`` and the arriving job type ``j``,
  which has a non-full server it may use; an action is a server (``action_mode="server"``) or a
  (group, level) pair, served by the group's smallest-index server at that level (``"group"``,
  as the env does);
* after the action the farm is in the post-decision state ``y``; until the next decision it
  evolves by departures (generator ``D``) while decisions happen at the rate ``K(x) = sum of
  lambda_j`` over the types with a vacancy in ``x`` (blocked arrivals are no decisions). With
  ``M = (K - D)^-1`` the step's expected reward is ``(M c)(y)``, ``c = W - eta P``, and the next
  decision state is ``(z', j')`` with probability ``M[y, z'] lambda_j'``.

:func:`best_policy` solves it exactly by policy iteration, over all deterministic stationary
policies at once: with ``gamma`` the discounted criterion of ``advantage="discounted"``,
without it the average reward per decision of ``advantage="average"``. ``eta`` defaults to the
fixed point ``eta = efficiency of the chosen policy`` (the running eta of a converged run),
reached by Dinkelbach's iteration. At that fixed point the average criterion ranks best exactly
the policies with the largest long-run efficiency: the average reward per decision is the
time-average of ``W - eta P`` (zero for the optimum at ``eta = eta*``, negative for every worse
policy) divided by the policy's decision rate, so its sign and its argmax are Dinkelbach's. A
discount has no such guarantee: it weighs the next few decisions' rewards, and the policy it
ranks best can be a worse one (tiny with gamma 0.6 or 0.9: ``tests/agents/ppo/test_criterion.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from serverfarm_gym.agents.ppo.config import auto_gamma
from serverfarm_gym.baselines.solvers.ctmc import (
    evaluate_policy,
    full_states,
    n_full_states,
    stationary_distribution,
)
from serverfarm_gym.envs.config import FarmConfig
from serverfarm_gym.envs.scenarios import load_scenario
from serverfarm_gym.evaluation.references import reference_values

__all__ = [
    "DecisionMDP", "PolicyOptimum", "average_reward", "best_policy", "decision_mdp", "loss_by_state",
]  # fmt: skip

#: the largest per-server chain solved here (dense matrices)
MAX_STATES = 4_096


@dataclass
class DecisionMDP:
    """The decision process of a small farm (module doc): ``states[N, S]``, their work and power
    rates ``W[N]``, ``P[N]``; decision states ``dec_z[n_dec]``, ``dec_j[n_dec]``; per decision
    state the post-decision states of its actions (``post[d]``) and the servers that serve them
    (``servers[d]``); ``M = (K - D)^-1`` and the decision types' rates ``lam``."""

    config: FarmConfig
    states: np.ndarray
    strides: np.ndarray
    W: np.ndarray
    P: np.ndarray
    dec_z: np.ndarray
    dec_j: np.ndarray
    post: list[np.ndarray]
    servers: list[np.ndarray]
    M: np.ndarray
    T: np.ndarray  # T[y, d]: probability that the next decision state of post-state y is d

    def step_reward(self, eta: float) -> np.ndarray:
        """Expected reward of a step from each post-decision state (``reward_scale`` 1)."""
        return self.M @ (self.W - eta * self.P)

    def rule(self, choice: np.ndarray) -> Callable[[np.ndarray, int], int]:
        """``rule(occ, j) -> server`` of ``choice[d]`` (an index into ``post[d]``), for
        ``serverfarm_gym.baselines.solvers.ctmc.evaluate_policy``; -1 (blocked) where there is no decision."""
        table = np.full((len(self.states), self.config.n_job_types), -1, dtype=np.int64)
        for d, c in enumerate(choice):
            table[self.dec_z[d], self.dec_j[d]] = self.servers[d][c]
        strides = self.strides

        def rule(occ: np.ndarray, j: int) -> int:
            return int(table[int(occ @ strides), j])

        return rule


def _actions(config: FarmConfig, occ: np.ndarray, j: int, action_mode: str) -> np.ndarray:
    """The servers that the actions of type ``j`` in ``occ`` reach (group mode: one per
    (group, level) pair, its smallest-index server)."""
    sg = config.server_group
    cand = np.flatnonzero((occ < config.buffers[sg]) & config.server_availability[j])
    if action_mode == "server":
        return cand
    seen: dict[tuple[int, int], int] = {}
    for s in cand:
        seen.setdefault((int(sg[s]), int(occ[s])), int(s))
    return np.array(sorted(seen.values()), dtype=np.int64)


def decision_mdp(config: FarmConfig, action_mode: str = "group") -> DecisionMDP:
    """The decision process of ``config`` in ``action_mode`` (module doc)."""
    if action_mode not in ("group", "server"):
        raise ValueError(f"action_mode: choose 'group' or 'server', got {action_mode!r}")
    n = n_full_states(config)
    if n > MAX_STATES or not config.all_exponential or config.is_time_varying:
        raise ValueError(
            f"scenario {config.name!r}: needs exponential sizes, constant rates and at most "
            f"{MAX_STATES:,} per-server states (it has {n:,})"
        )
    states, strides = full_states(config)
    occ = states.astype(np.int64)
    N, sg = len(occ), config.server_group
    lam = np.asarray(config.arrival_rates[0], dtype=np.float64)
    D = np.zeros((N, N))
    for s in range(config.n_servers):  # departures
        on = np.flatnonzero(occ[:, s] > 0)
        D[on, on - strides[s]] += config.mu_table[sg[s], occ[on, s]]
    D -= np.diag(D.sum(axis=1))
    dec_z, dec_j, post, servers = [], [], [], []
    K = np.zeros(N)
    for z in range(N):
        for j in range(config.n_job_types):
            srv = _actions(config, occ[z], j, action_mode)
            if len(srv):
                dec_z.append(z)
                dec_j.append(j)
                servers.append(srv)
                post.append(z + strides[srv])
                K[z] += lam[j]
    M = np.linalg.inv(np.diag(K) - D)
    dz, dj = np.asarray(dec_z), np.asarray(dec_j)
    W = config.mu_table[sg[None, :], occ].sum(axis=1)
    P = config.power_table[sg[None, :], occ].sum(axis=1)
    T = M[:, dz] * lam[dj][None, :]
    return DecisionMDP(config, states, strides, W, P, dz, dj, post, servers, M, T)


def _evaluate(mdp: DecisionMDP, R: np.ndarray, choice: np.ndarray,
              gamma: float | None) -> tuple[np.ndarray, float]:  # fmt: skip
    """(values per decision state, average reward per decision): discounted ``V`` (and NaN),
    or (``gamma`` None) the average reward's relative values ``h`` with ``h[0] = 0`` and ``g``."""
    y = np.array([p[c] for p, c in zip(mdp.post, choice, strict=True)])
    P_pi, R_pi = mdp.T[y], R[y]
    n = len(y)
    if gamma is not None:
        return np.linalg.solve(np.eye(n) - gamma * P_pi, R_pi), float("nan")
    # [I - P] h + g 1 = R with h[0] = 0: the column of h[0] carries g instead
    A = np.eye(n) - P_pi
    A[:, 0] = 1.0
    sol = np.linalg.solve(A, R_pi)
    h = sol.copy()
    h[0] = 0.0
    return h, float(sol[0])


def average_reward(mdp: DecisionMDP, choice: np.ndarray, eta: float) -> float:
    """The long-run average reward per decision of the policy ``choice`` at ``eta`` (exact)."""
    return _evaluate(mdp, mdp.step_reward(eta), np.asarray(choice, dtype=np.int64), None)[1]


def _improve(mdp: DecisionMDP, R: np.ndarray, v: np.ndarray, choice: np.ndarray,
             gamma: float | None) -> np.ndarray:  # fmt: skip
    """The greedy policy of ``v``, keeping the current action unless another is better by more
    than a rounding error."""
    g = 1.0 if gamma is None else gamma
    future = R + g * (mdp.T @ v)  # value of each post-decision state
    new = choice.copy()
    for d, p in enumerate(mdp.post):
        q = future[p]
        best = int(np.argmax(q))
        if q[best] > q[choice[d]] + 1e-12 * max(1.0, abs(q[best])):
            new[d] = best
    return new


def _policy_iteration(mdp: DecisionMDP, eta: float, gamma: float | None,
                      choice: np.ndarray) -> np.ndarray:  # fmt: skip
    R = mdp.step_reward(eta)
    for _ in range(1_000):
        v = _evaluate(mdp, R, choice, gamma)[0]
        new = _improve(mdp, R, v, choice, gamma)
        if np.array_equal(new, choice):
            return choice
        choice = new
    raise RuntimeError("policy iteration did not converge in 1,000 steps")


@dataclass
class PolicyOptimum:
    """The policy a criterion ranks best (``choice[d]``: an index into ``mdp.post[d]``), its
    exact long-run efficiency, the eta it was ranked at and the rule for ``evaluate_policy``."""

    choice: np.ndarray
    efficiency: float
    eta: float
    gamma: float | None
    rule: Callable[[np.ndarray, int], int]


def best_policy(mdp: DecisionMDP, gamma: float | None = None, eta: float | None = None,
                max_iter: int = 50) -> PolicyOptimum:  # fmt: skip
    """The deterministic policy that the trainer's criterion ranks best (module doc): the
    discounted one with ``gamma``, else the average reward per decision; at ``eta`` if given,
    else at the fixed point ``eta = its efficiency`` (Dinkelbach's iteration from PAS)."""
    if gamma is not None and not 0.0 < gamma < 1.0:
        raise ValueError(f"gamma: must be in (0, 1) or None (average reward), got {gamma}")
    choice = np.zeros(len(mdp.post), dtype=np.int64)
    cur = float(evaluate_policy(mdp.config, "pas").efficiency) if eta is None else float(eta)
    for _ in range(max_iter):
        choice = _policy_iteration(mdp, cur, gamma, choice)
        rule = mdp.rule(choice)
        eff = float(evaluate_policy(mdp.config, rule).efficiency)
        if eta is not None or abs(eff - cur) <= 1e-12 * max(1.0, abs(eff)):
            return PolicyOptimum(choice, eff, cur, gamma, rule)
        cur = eff
    raise RuntimeError(f"the fixed point eta = efficiency not reached in {max_iter} iterations")


def loss_by_state(
    mdp: DecisionMDP, choice: np.ndarray, opt: PolicyOptimum
) -> dict[str, np.ndarray]:
    """Where the deterministic policy ``choice`` loses against the optimum ``opt`` (from
    :func:`best_policy`), exactly: at ``opt.eta``, with ``q[d, b]`` the value of action ``b`` in
    decision state ``d`` under the optimum's relative values, the average-reward performance
    difference ``g* - g = sum_d mu(d) (max_b q[d, b] - q[d, choice[d]])`` (``mu``: the policy's
    stationary distribution over decision states). Returns ``mu``, ``loss`` (each state's term;
    they sum to ``g* - g``) and ``q`` (one array per state, the actions of ``mdp.post[d]``)."""
    R = mdp.step_reward(opt.eta)
    h = _evaluate(mdp, R, opt.choice, None)[0]
    future = R + mdp.T @ h  # each post-decision state's value under the optimum
    choice = np.asarray(choice, dtype=np.int64)
    P = mdp.T[np.array([p[c] for p, c in zip(mdp.post, choice, strict=True)])]
    # the decision chain's stationary distribution: that of the generator P - I
    mu = stationary_distribution(sp.csr_matrix(P - np.eye(len(P))))
    q = [future[p] for p in mdp.post]
    loss = np.array([m * (qd.max() - qd[c]) for m, qd, c in zip(mu, q, choice, strict=True)])
    return {"mu": mu, "loss": loss, "q": np.array(q, dtype=object)}


def criterion_table(names: list[str], horizons: tuple[float, ...] = (1.0, 4.0)) -> str:
    """Markdown: per farm (group actions) the exact optimum and the share of it of the policy
    each criterion ranks best at its fixed point eta: the average reward, and the discounts of
    ``horizons`` mean job durations (``serverfarm_gym.agents.ppo.config.auto_gamma``)."""
    head = ["farm", "states", "optimum (LP)", "average reward"]
    head += [f"discount, {h:g} duration{'s' * (h != 1)} (gamma)" for h in horizons]
    rows = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name in names:
        config = load_scenario(name)
        opt = float(reference_values(config, compute_optimum=True)["optimum"]["efficiency"])
        mdp = decision_mdp(config, "group")
        cells = [name, f"{len(mdp.states):,}", f"{opt:.6f}"]
        cells.append(f"{100 * best_policy(mdp).efficiency / opt:.3f}%")
        for h in horizons:
            g = auto_gamma(config, h)
            cells.append(f"{100 * best_policy(mdp, g).efficiency / opt:.3f}% ({g:.3f})")
        rows.append("| " + " | ".join(cells) + " |")
    return "\n".join(rows)


if __name__ == "__main__":
    import sys

    print(criterion_table(sys.argv[1:] or ["tiny", "small-1", "small-2", "small-3", "pas-gap",
                                           "speed-scaling"]))  # fmt: skip
