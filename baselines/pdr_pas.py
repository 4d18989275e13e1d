"""PDR+PAS: the PDR optimiser picks the cluster of each arrival, PAS picks the server inside it.

Two time scales (``docs/pdr.md``):

1. **Between clusters, per interval.** At construction the routing LP of every interval of the
   geo scenario is solved once (:func:`serverfarm_gym.baselines.solvers.pdr.solve_interval`, ~2 ms each) with that
   interval's demand and prices, giving the split ``P[t, i, j] = x_ij / r_i``
   (:func:`serverfarm_gym.baselines.solvers.pdr.routing_probabilities`). Ingress point i is job type i of the farm built
   by :meth:`serverfarm_gym.envs.geo.GeoConfig.to_farm`. At each arrival of type i in interval t (read from the
   observation's interval one-hot, :func:`serverfarm_gym.envs.observation.decode_interval`), a cluster j is drawn
   with probability ``P[t, i, j]`` *renormalised over the clusters that have a vacancy* (a
   masked-in server / (group, level) action). So while no cluster is full the long-run split is
   exactly the optimiser's ``x_ij / r_i``; a full cluster's share goes to the other clusters of
   the plan in proportion to their shares.
2. **Inside the cluster, per arrival.** PAS restricted to the chosen cluster: the vacant server
   with the highest ``mu_k / (eps_k - eps0_k)``, ties to the smallest server index (group mode:
   the (k, b) action PAS's group rule picks, ties smallest k then highest b; see
   :mod:`serverfarm_gym.baselines.priority`).

**Fallback.** When every cluster with positive probability is full (the plan has no room left
for this arrival), the job goes where PAS over *all* vacant servers available to its type would
send it, rather than being lost: blocking is worse than a detour, and a job is blocked only when
every available server is full, as for every other policy of the farm.

**Randomised by definition.** The cluster draw is what makes the split equal the LP's flows, so
``deterministic=True`` still samples (it only silences exploration noise of learned policies);
the draws come from ``self.rng`` (seeded by the policy's ``seed``; :meth:`reset` re-seeds), one
uniform number per arrival that has a planned cluster with a vacancy.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from serverfarm_gym.baselines.base import Policy
from serverfarm_gym.baselines.pas import PASPolicy
from serverfarm_gym.baselines.solvers.pdr import (
    DEFAULT_PIECES,
    routing_probabilities,
    solve_interval,
)
from serverfarm_gym.envs.config import FarmConfig
from serverfarm_gym.envs.observation import (
    decode_interval,
    decode_job_type,
    hist_offsets,
    level_offsets,
)

__all__ = ["PDRPASPolicy"]


class PDRPASPolicy(Policy):
    """Randomised cluster routing by the per-interval PDR flows, then PAS inside the cluster.

    Args:
        config: a farm built from a geo scenario (``load_scenario("geo-us-eu")``, or any farm whose
            ``geo`` field holds the :class:`~serverfarm_gym.envs.geo.GeoConfig`).
        action_mode: ``"server"`` or ``"group"``.
        seed: seed of the cluster draws.
        weights, eps_constraints, pieces: passed to :func:`serverfarm_gym.baselines.solvers.pdr.solve_interval` for every
            interval (default: its defaults, all weights 1).
        interval: use this interval's routing at every arrival instead of the observation's (for a
            constant farm built by ``geo.to_farm(t)``); default: follow the observation.

    Attributes:
        solutions: the :class:`~serverfarm_gym.baselines.solvers.pdr.PDRSolution` of each interval.
        probabilities: float64[T, m, n], ``x_ij / r_i`` per interval (rows sum to 1).

    Raises:
        ValueError: ``config`` has no geo scenario, or it does not match it; an interval is
            infeasible (:class:`~serverfarm_gym.baselines.solvers.pdr.PDRInfeasibleError`, a ValueError).
    """

    name = "pdr-pas"
    builtin = None  # randomised and per-interval: no built-in dispatcher of the simulator

    def __init__(
        self,
        config: FarmConfig,
        action_mode: str = "server",
        seed: int | None = None,
        weights: Mapping[str, float] | Sequence[float] | None = None,
        eps_constraints: Mapping[str, float] | None = None,
        pieces: int | None = None,
        interval: int | None = None,
    ):
        super().__init__(config, action_mode, seed)
        geo = getattr(config, "geo", None)
        if geo is None:
            raise ValueError(
                f"pdr-pas needs a geo scenario (clusters, ingress points, latencies): farm "
                f"{config.name!r} has none. Load one with serverfarm_gym.envs.scenarios.load_scenario('geo-us-eu') "
                "(or a geo file/dict), which keeps the GeoConfig in FarmConfig.geo"
            )
        cluster_of_group = np.asarray(geo.cluster_of_farm_group(), dtype=np.int64)
        if config.n_job_types != geo.n_ingress or config.n_groups != len(cluster_of_group):
            raise ValueError(
                f"config: farm {config.name!r} ({config.n_job_types} job types, {config.n_groups} "
                f"groups) does not match its geo scenario {geo.name!r} ({geo.n_ingress} ingress "
                f"points, {len(cluster_of_group)} cluster groups); build the farm with "
                "geo.to_farm()"
            )
        if interval is None and config.n_intervals not in (1, geo.n_intervals):
            raise ValueError(
                f"config: farm has {config.n_intervals} intervals, its geo scenario "
                f"{geo.n_intervals}; build the farm with geo.to_farm()"
            )
        if interval is not None:
            interval = geo.check_interval(interval)
        self.geo = geo
        self.fixed_interval = interval
        kw: dict[str, Any] = {"pieces": DEFAULT_PIECES if pieces is None else int(pieces)}
        wanted = range(geo.n_intervals) if interval is None else [interval]
        self.solutions = {t: solve_interval(geo, t, weights, eps_constraints, **kw) for t in wanted}
        n = geo.n_clusters
        probs = np.zeros((geo.n_intervals, geo.n_ingress, n))
        for t, sol in self.solutions.items():
            probs[t] = routing_probabilities(sol)
        probs.setflags(write=False)
        self.probabilities = probs
        self._n_clusters = n
        self._pas = PASPolicy(config, action_mode)

        c = config
        if action_mode == "server":
            self._act_cluster = cluster_of_group[c.server_group]
            self._sbuf = c.buffers[c.server_group]
            self._avail = c.server_availability  # bool[J, S]
        else:
            act_k = np.repeat(np.arange(c.n_groups), c.buffers).astype(np.int64)
            act_b = np.arange(int(level_offsets(c)[-1])) - level_offsets(c)[act_k]
            self._act_cluster = cluster_of_group[act_k]
            self._act_col = hist_offsets(c)[act_k] + act_b
            self._act_count = np.array([c.groups[k].count for k in act_k], dtype=np.float64)
            self._avail = c.availability[:, act_k]  # bool[J, A]
        # PAS's choice among any set of actions = the one of smallest rank in PAS's total order:
        # highest efficiency first, then (server mode) smallest server index, or (group mode,
        # the rule of serverfarm_gym.baselines.priority) smallest group, then highest level
        eff = c.group_efficiency
        if action_mode == "server":
            order = np.lexsort((np.arange(c.n_servers), -eff[c.server_group]))
        else:
            order = np.lexsort((-act_b, act_k, -eff[act_k]))
        self._rank = np.empty(len(order), dtype=np.int64)
        self._rank[order] = np.arange(len(order))
        self._no_rank = len(order)

    # ---- decisions ---------------------------------------------------------------------------
    def _vacant(self, obs: np.ndarray) -> np.ndarray:
        """bool[A]: actions that lead to a non-full server according to the observation."""
        if self.action_mode == "server":
            occ = np.rint(np.asarray(obs[: len(self._sbuf)], dtype=np.float64) * self._sbuf)
            return occ < self._sbuf
        counts = np.rint(np.asarray(obs[self._act_col], dtype=np.float64) * self._act_count)
        return counts > 0

    def interval_of(self, obs: np.ndarray) -> int:
        """The interval whose routing applies to ``obs`` (the fixed one, if given)."""
        if self.fixed_interval is not None:
            return self.fixed_interval
        return decode_interval(self.config, obs)

    def cluster_probabilities(self, obs: np.ndarray, mask: np.ndarray) -> np.ndarray:
        """float64[n]: the cluster distribution of this arrival (all zeros means the fallback)."""
        obs = np.asarray(obs)
        i = decode_job_type(self.config, obs)
        valid = np.asarray(mask, dtype=bool) & self._vacant(obs) & self._avail[i]
        has = np.bincount(self._act_cluster[valid], minlength=self._n_clusters) > 0
        p = self.probabilities[self.interval_of(obs), i] * has
        tot = p.sum()
        return p / tot if tot > 0 else p

    def act(self, obs: np.ndarray, mask: np.ndarray, deterministic: bool = True) -> int:
        # deterministic is ignored on purpose: the cluster draw *is* the policy (module doc)
        obs = np.asarray(obs)
        mask = np.asarray(mask, dtype=bool)
        i = decode_job_type(self.config, obs)
        valid = mask & self._vacant(obs) & self._avail[i]
        if not valid.any():
            # a hand-made mask with no vacant server of this type: PAS's own rule decides
            return int(self._pas.act(obs, mask))
        has = np.bincount(self._act_cluster[valid], minlength=self._n_clusters) > 0
        p = self.probabilities[self.interval_of(obs), i] * has
        cum = np.cumsum(p)
        tot = cum[-1]
        if tot > 0:
            # inverse-CDF draw: the first cluster whose cumulative share exceeds u * tot has p > 0
            j = int(np.searchsorted(cum, self.rng.random() * tot, side="right"))
            j = min(j, int(np.flatnonzero(p)[-1]))  # u * tot rounded up to tot: last planned one
            chosen = valid & (self._act_cluster == j)
        else:
            chosen = valid  # fallback: PAS over every vacant server of this type
        return int(np.argmin(np.where(chosen, self._rank, self._no_rank)))
