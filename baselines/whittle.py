"""Whittle (marginal productivity) index policy for per-level rate and power functions.

The relaxation (``docs/model.md``) decouples the farm into one birth-death chain per server. For a
server of group k with per-level service rate mu(n) and power eps(n), n = 0..B (mu(0) = 0,
eps(0) = idle power), offered Poisson arrivals at rate ``lam``, consider the threshold policies
"accept iff n < m", m = 0..B. With R(m) the long-run rate of reward ``mu - eta eps`` and A(m) the
long-run acceptance rate, the index of state n < B is

    nu(n) = [R(n+1) - R(n)] / [A(n+1) - A(n)].

Closed form used here (*derived*, unit-tested against a brute-force stationary solution):
accepted work leaves at the service rate (flow balance, mean size 1), so the throughput of every
threshold policy equals A(m) and R(m) = A(m) - eta P(m) with P(m) the mean power. Hence

    nu(n) = 1 - eta c(n),   c(n) = dP/dA = E_n[eps(n+1) - eps(X)] / E_n[mu(n+1) - mu(X)],

where X follows the stationary law of the chain truncated at n (weights prod_{i<=x} lam/mu(i)),
and A(n+1) - A(n) = Pblock(n+1) E_n[mu(n+1) - mu(X)] (Pblock: blocking probability of threshold n+1). Consequences:

* on/off groups: c(n) = (eps - eps0)/mu for every n, independent of ``lam``; the table entry is
  computed in closed form as ``1 - eta / group_efficiency[k]`` from the very same float as PAS's
  table, so tied efficiencies stay *exactly* tied and the Whittle policy makes PAS's decisions
  (a strict order could only collapse into a tie if two efficiencies were ~1 ulp apart).
* the ranking of the states of all servers depends on eta only through its sign: for every
  eta > 0 it is the ranking by c(n) ascending. The fixed-point iteration of :class:`WhittlePolicy`
  therefore changes the table's values (eta is then the efficiency the policy achieves) but not
  its decisions; it stops after one evaluation.

Offered rate ``lam`` (matters only for state-dependent groups). Default ``"full"``: the total mean
rate of the job types that may use the group, sum_{j: k in K_j} lambda_j, as in the relaxation,
where an active server is offered the whole stream of its types (and as a packing dispatcher offers
it to the server at the frontier). ``"share"``: each type's rate split over its groups in
proportion to their peak capacity R_k max_n mu_k(n), per server. Or a number / float[K].
Time-varying rates are averaged over the intervals.

Indexability: the marginal productivity index is consistent (the optimal threshold for a subsidy
is monotone in it) when nu(n) is non-increasing in n, i.e. c(n) non-decreasing, which by the above
does not depend on eta > 0. It often fails for state-dependent groups whose later levels are
the more efficient ones (economies of scale). If it is violated, ``on_violation`` decides:
``"iron"`` (default) replaces c by its weighted isotonic regression (pool-adjacent-violators,
weights A(n+1) - A(n)), i.e. the slopes of the lower convex hull of the points (A(m), P(m)): the
index of the Lagrangian-optimal threshold policies (states inside a pooled block share one index);
``"warn"`` does the same and issues a RuntimeWarning; ``"raise"`` raises ValueError; ``"ignore"``
keeps the raw marginal productivity values. :func:`indexability` reports the violations. If the
acceptance rate does not increase with the threshold (A(n+1) <= A(n), possible only when mu drops with
n) the index is undefined and a ValueError is raised in every mode.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

from serverfarm_gym.baselines.priority import PriorityPolicy
from serverfarm_gym.envs.config import FarmConfig
from serverfarm_gym.envs.simulator import FarmSimulator

__all__ = [
    "WhittlePolicy",
    "indexability",
    "induced_ordering",
    "initial_eta",
    "level_marginal_costs",
    "offered_rates",
    "simulated_efficiency",
    "whittle_table",
]

_VIOLATION_MODES = ("iron", "warn", "raise", "ignore")


def offered_rates(
    config: FarmConfig, arrival_rate: str | float | np.ndarray = "full"
) -> np.ndarray:
    """float64[K]: the per-server offered arrival rate used by the index (see module docstring)."""
    K = config.n_groups
    lam = config.arrival_rates.mean(axis=0)  # float[J], averaged over intervals
    avail = config.availability
    if isinstance(arrival_rate, str):
        if arrival_rate == "full":
            return avail.T.astype(np.float64) @ lam
        if arrival_rate == "share":
            peak = config.mu_table.max(axis=1)
            cap = np.array([g.count for g in config.groups]) * peak  # R_k max mu_k
            out = np.zeros(K)
            for j in range(config.n_job_types):
                ks = np.flatnonzero(avail[j])
                out[ks] += lam[j] * peak[ks] / cap[ks].sum()
            return out
        raise ValueError(
            f"arrival_rate: unknown mode {arrival_rate!r}; use 'full', 'share', a number or float[K]"
        )
    out = np.broadcast_to(np.asarray(arrival_rate, dtype=np.float64), (K,)).copy()
    if np.any(out < 0) or not np.all(np.isfinite(out)):
        raise ValueError(f"arrival_rate: must be finite and >= 0, got {out}")
    return out


def level_marginal_costs(
    mu: np.ndarray, eps: np.ndarray, lam: float
) -> tuple[np.ndarray, np.ndarray]:
    """Marginal power per marginal acceptance c(n) and log of the acceptance increments, n < B.

    Args:
        mu: float[B+1], mu(0..B) with mu(0) = 0.
        eps: float[B+1], eps(0..B) with eps(0) the idle power.
        lam: offered arrival rate (>= 0; at 0 the limit lam -> 0+ is returned).

    Returns:
        ``(c, log_dA)``, both float[B]: ``c[n] = (P(n+1) - P(n)) / (A(n+1) - A(n))`` and
        ``log(A(n+1) - A(n))`` (P, A: mean power and acceptance rate of threshold m; logs because
        the increments underflow when lam << mu). Both are NaN where A(n+1) <= A(n).
    """
    mu = np.asarray(mu, dtype=np.float64)
    eps = np.asarray(eps, dtype=np.float64)
    B = mu.shape[0] - 1
    with np.errstate(divide="ignore"):
        # log of the unnormalised stationary weights prod_{i<=x} lam/mu(i); lp[0] = 0
        lp = np.concatenate([[0.0], np.cumsum(np.log(lam) - np.log(mu[1:]))])
    c = np.full(B, np.nan)
    log_dA = np.full(B, np.nan)
    for n in range(B):
        head = lp[: n + 1]
        w = np.exp(head - head.max())
        w /= w.sum()  # stationary law of the chain truncated at n
        den = float(w @ (mu[n + 1] - mu[: n + 1]))
        if den <= 0:
            continue
        c[n] = float(w @ (eps[n + 1] - eps[: n + 1])) / den
        top = lp[: n + 2]
        m = top.max()
        log_pblock = top[-1] - (m + np.log(np.exp(top - m).sum()))  # blocking prob. of m = n+1
        log_dA[n] = log_pblock + np.log(den)
    return c, log_dA


def _pava(c: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Weighted isotonic (non-decreasing) regression by pool-adjacent-violators."""
    vals: list[float] = []
    wts: list[float] = []
    lens: list[int] = []
    for ci, wi in zip(c.tolist(), w.tolist(), strict=True):
        vals.append(ci)
        wts.append(wi)
        lens.append(1)
        while len(vals) > 1 and vals[-2] > vals[-1]:
            v2, w2, l2 = vals.pop(), wts.pop(), lens.pop()
            v1, w1, l1 = vals.pop(), wts.pop(), lens.pop()
            wt = w1 + w2
            vals.append((w1 * v1 + w2 * v2) / wt if wt > 0 else 0.5 * (v1 + v2))
            wts.append(wt)
            lens.append(l1 + l2)
    return np.repeat(vals, lens)


def _group_costs(config: FarmConfig, k: int, lam: float) -> tuple[np.ndarray, np.ndarray]:
    """(c, relative dA weights) of group k; ValueError if the index is undefined."""
    B = int(config.buffers[k])
    c, log_dA = level_marginal_costs(
        config.mu_table[k, : B + 1], config.power_table[k, : B + 1], lam
    )
    bad = np.flatnonzero(np.isnan(c))
    if bad.size:
        n = int(bad[0])
        raise ValueError(
            f"group {config.groups[k].name!r}: the acceptance rate does not increase from threshold "
            f"{n} to {n + 1} (service rate drops with the number of jobs), so the Whittle index is "
            "undefined; use non-decreasing service_rate levels or another policy"
        )
    top = log_dA.max()
    w = np.exp(log_dA - top) if np.isfinite(top) else np.ones(B)
    return c, w


def _violation(c: np.ndarray) -> float:
    """Largest relative decrease of c(n) in n (0 if non-decreasing up to rounding)."""
    if c.size < 2:
        return 0.0
    drop = c[:-1] - c[1:]
    scale = np.abs(c[:-1]) + np.abs(c[1:]) + 1e-300
    rel = drop / scale
    return float(max(rel.max(), 0.0))


#: relative decrease of c(n) treated as rounding noise rather than a violation of indexability
INDEXABILITY_RTOL = 1e-9


def indexability(
    config: FarmConfig, arrival_rate: str | float | np.ndarray = "full"
) -> dict[str, dict[str, Any]]:
    """Per group: ``{"indexable": bool, "violation": float, "c": float[B_k]}`` (eta-independent)."""
    lam = offered_rates(config, arrival_rate)
    out = {}
    for k, g in enumerate(config.groups):
        if g.is_on_off:
            c = np.full(g.buffer, 1.0 / config.group_efficiency[k])
        else:
            c, _ = _group_costs(config, k, float(lam[k]))
        v = _violation(c)
        out[g.name] = {"indexable": v <= INDEXABILITY_RTOL, "violation": v, "c": c}
    return out


def whittle_table(
    config: FarmConfig,
    eta: float,
    arrival_rate: str | float | np.ndarray = "full",
    on_violation: str = "iron",
) -> np.ndarray:
    """float64[K, Bmax+1]: Whittle index ``nu_k(n) = 1 - eta c_k(n)`` (module docstring).

    Entries at levels ``b >= B_k`` (never used) repeat the value at ``B_k - 1``.

    Args:
        eta: efficiency parameter of the reward ``mu - eta eps``; must be > 0 (at eta = 0 every
            index equals 1 and the ranking is lost).
        arrival_rate: ``"full"``, ``"share"``, a number or float[K] (see :func:`offered_rates`).
        on_violation: ``"iron"``, ``"warn"``, ``"raise"`` or ``"ignore"`` when c(n) decreases in n.
    """
    eta = float(eta)
    if not (np.isfinite(eta) and eta > 0):
        raise ValueError(f"eta: must be a finite number > 0 (an efficiency), got {eta!r}")
    if on_violation not in _VIOLATION_MODES:
        raise ValueError(
            f"on_violation: unknown mode {on_violation!r}; choose one of {list(_VIOLATION_MODES)}"
        )
    lam = offered_rates(config, arrival_rate)
    table = np.empty((config.n_groups, config.max_buffer + 1))
    for k, g in enumerate(config.groups):
        B = g.buffer
        if g.is_on_off:
            # closed form from the same float PAS uses: exact ties, same ranking as PAS
            table[k, :] = 1.0 - eta / config.group_efficiency[k]
            continue
        c, w = _group_costs(config, k, float(lam[k]))
        v = _violation(c)
        if v > INDEXABILITY_RTOL and on_violation != "ignore":
            msg = (
                f"group {g.name!r} is not indexable under threshold policies at offered rate "
                f"{lam[k]:.6g}: the marginal cost c(n) = dP/dA decreases with n (relative drop {v:.3g})"
            )
            if on_violation == "raise":
                raise ValueError(msg + "; pass on_violation='iron' to use the convex-hull index")
            if on_violation == "warn":
                warnings.warn(
                    msg + "; using the ironed (convex-hull) index", RuntimeWarning, stacklevel=2
                )
            c = _pava(c, w)
        table[k, :B] = 1.0 - eta * c
        table[k, B:] = table[k, B - 1]
    return table


def induced_ordering(config: FarmConfig, table: np.ndarray) -> np.ndarray:
    """int8 sign matrix of the table over the usable entries (k, b < B_k): what decisions depend on."""
    levels = np.arange(config.max_buffer + 1)
    usable = levels[None, :] < config.buffers[:, None]
    v = np.asarray(table)[usable]
    return np.sign(v[:, None] - v[None, :]).astype(np.int8)


def initial_eta(config: FarmConfig) -> float:
    """Starting point of the eta iteration: the efficiency of the farm with every server full."""
    counts = np.array([g.count for g in config.groups], dtype=np.float64)
    B = config.buffers
    rows = np.arange(config.n_groups)
    return float(counts @ config.mu_table[rows, B] / (counts @ config.power_table[rows, B]))


def simulated_efficiency(
    config: FarmConfig, table: np.ndarray, n_epochs: int = 200_000, seed: int = 0
) -> float:
    """Long-run efficiency of the built-in priority dispatcher with ``table`` (simulated).

    A tenth of ``n_epochs`` is run first as warm-up from the empty farm and discarded.
    """
    sim = FarmSimulator(config, seed=seed)
    sim.run(max(n_epochs // 10, 1), policy="priority", table=table)
    return float(sim.run(n_epochs, policy="priority", table=table).efficiency)


class WhittlePolicy(PriorityPolicy):
    """Whittle index policy with eta set self-consistently.

    With ``eta=None`` (default): starting from :func:`initial_eta`, repeat ``eta <- evaluate(table(eta))``
    (the efficiency the index policy achieves) until the induced ordering of the table stops
    changing or ``|delta eta| <= eta_tol * eta``, at most ``max_iter`` evaluations. Since the
    ranking does not depend on eta > 0 (module docstring) this takes one evaluation. Each step is
    recorded in ``iterations`` (dicts with ``eta``, ``efficiency``, ``ordering_changed``).
    With a given ``eta`` no evaluation is done.

    Args:
        eta: fixed efficiency parameter, or None for the fixed point.
        arrival_rate, on_violation: see :func:`whittle_table`.
        evaluate: ``evaluate(table) -> efficiency``; default :func:`simulated_efficiency` with
            ``n_epochs`` and ``sim_seed``.
        max_iter: maximal number of evaluations.
        eta_tol: relative tolerance on eta.
    """

    name = "whittle"

    def __init__(
        self,
        config: FarmConfig,
        action_mode: str = "server",
        seed: int | None = None,
        eta: float | None = None,
        arrival_rate: str | float | np.ndarray = "full",
        on_violation: str = "iron",
        evaluate: Callable[[np.ndarray], float] | None = None,
        n_epochs: int = 200_000,
        sim_seed: int = 0,
        max_iter: int = 10,
        eta_tol: float = 1e-4,
    ):
        def table_at(e: float) -> np.ndarray:
            return whittle_table(config, e, arrival_rate, on_violation)

        self.iterations: list[dict[str, Any]] = []
        if eta is not None:
            table = table_at(eta)
        else:
            if evaluate is None:

                def evaluate(t: np.ndarray) -> float:
                    return simulated_efficiency(config, t, n_epochs, sim_seed)

            eta = initial_eta(config)
            table = table_at(eta)
            order = induced_ordering(config, table)
            for _ in range(max_iter):
                eff = float(evaluate(table))
                new_table = table_at(eff)
                new_order = induced_ordering(config, new_table)
                changed = not np.array_equal(new_order, order)
                self.iterations.append({"eta": eta, "efficiency": eff, "ordering_changed": changed})
                done = not changed or abs(eff - eta) <= eta_tol * abs(eta)
                eta, table, order = eff, new_table, new_order
                if done:
                    break
        self.eta = float(eta)
        self.arrival_rate = arrival_rate
        #: names of the groups whose index was ironed (not indexable under threshold policies)
        self.non_indexable = [
            g for g, r in indexability(config, arrival_rate).items() if not r["indexable"]
        ]
        super().__init__(config, action_mode, seed, table=table)
