"""The token network with a per-farm check (``make_policy("generalist-checked", config)``): on
each farm it is built for, it checks itself against PAS. Its results are per-farm selections
measured on the farm, not zero-shot ones. (``make_policy("generalist", config)`` is another
network, alone: the table network of ``serverfarm_gym.agents.generalist.policy``, which needs no check.) The check's CPU time is ``check_cpu_seconds`` (also ``guard_report["cpu_s"]``); every
report of this policy should show it.

Why: the shipped network is right on most farms and wrong on some (paper-100: on 83% of its
decisions it leaves PAS and loses 0.6%, while on held-out sampled farms of the same size it gains
2%; nothing in the tokens tells the two apart). A user who takes the generalist instead of
training should never get less than PAS. The farm is known when the policy is built, and so is
its simulator, so the policy measures what its deviations are worth there before it acts:

* candidates: the network under PAS anchors ``factors`` x its own anchor (a larger anchor
  deviates only where the network is more confident; ``sim_factors``, fewer, when simulated),
  and PAS itself;
* **exactly** where the per-server chain is small (``serverfarm_gym.evaluation.exact``; milliseconds): each
  candidate's stationary efficiency, and the best one is kept (PAS when none beats it);
* **by paired simulation** otherwise (``serverfarm_gym.evaluation.efficiency``'s vector route, group mode, ``replications``
  replications with common random numbers, seeds from ``GUARD_SEED`` on, never the seeds
  evaluations use; 10 mean job durations under the policy before 2 are measured, so that what
  is measured is the policy's long-run regime, not the transient after PAS's): a candidate is eligible only if the lower end of the 95% interval of its
  paired gain over PAS is above 0, and the eligible one with the highest mean gain is kept; none
  eligible: PAS.

No weight changes: this chooses one scalar (the anchor) or PAS, per farm, from the farm's own
simulator (as ``best-priority`` searches its table against the simulator). ``guard_report`` says what was measured and chosen. Cost: exact, a few ms per candidate;
simulated (12 mean job durations per replication), tens of CPU-s on a 100-server farm, several
CPU minutes on 10,000 servers (with one torch thread; more threads than cores make it many
times slower): read ``check_cpu_seconds`` rather than these figures.
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

import numpy as np

from serverfarm_gym.agents.generalist.token_policy import TokenGeneralistPolicy
from serverfarm_gym.agents.generalist.validate import with_anchor
from serverfarm_gym.baselines.pas import PASPolicy
from serverfarm_gym.envs.config import FarmConfig
from serverfarm_gym.evaluation.efficiency import Window, consecutive_seeds, measure
from serverfarm_gym.evaluation.exact import exact_solvable
from serverfarm_gym.evaluation.stats import mean_ci

__all__ = ["GUARD_SEED", "GuardedGeneralistPolicy"]

#: first replication seed of the guard's simulations (evaluations use 10,000+ and 20,000+)
GUARD_SEED = 30_000


class GuardedGeneralistPolicy(TokenGeneralistPolicy):
    """The generalist network or PAS, whichever measures better on ``config`` (module docstring).

    Args:
        config, action_mode, seed, model, net, max_groups, max_levels: as
            :class:`serverfarm_gym.agents.generalist.TokenGeneralistPolicy`.
        factors: the candidate anchors, as multiples of the network's own (exact check).
        sim_factors: the same for the simulated check (fewer: each costs a simulation, and
            each more candidate is one more chance to pick a lucky one).
        replications: paired replications of the simulated check.
    """

    name = "generalist-checked"

    def __init__(
        self,
        config: FarmConfig,
        action_mode: str = "server",
        seed: int | None = None,
        model: str | Path | None = None,
        net: Any = None,
        max_groups: int | None = None,
        max_levels: int | None = None,
        factors: tuple[float, ...] = (0.25, 0.5, 1.0, 2.0),
        sim_factors: tuple[float, ...] = (1.0, 2.0),
        replications: int = 8,
    ) -> None:
        super().__init__(config, action_mode, seed, model, net, max_groups, max_levels)
        for name, fs in (("factors", factors), ("sim_factors", sim_factors)):
            if not fs or any(not (f > 0 and math.isfinite(f)) for f in fs):
                raise ValueError(f"{name}: positive finite multiples of the anchor, got {fs}")
        if replications < 2:
            raise ValueError(f"replications: at least 2 for an interval, got {replications}")
        t0 = time.process_time()
        self._pas_only: PASPolicy | None = None  # the network acts while it is checked
        base = self.net
        exact = exact_solvable(config)
        # keyed by the anchor: a network without one (anchor 0) has a single candidate, itself
        nets = {round(f * base.cfg.anchor, 9): with_anchor(base, f * base.cfg.anchor)
                for f in (factors if exact else sim_factors)}  # fmt: skip
        if exact:
            rows, method = self._exact_gains(nets), "exact"
        else:
            rows, method = self._simulated_gains(nets, replications), "simulation (paired)"
        ok = [r for r in rows if r["eligible"]]
        best = max(ok, key=lambda r: (r["gain_pct"], r["anchor"])) if ok else None
        if best is None:
            self._pas_only = PASPolicy(config, action_mode)
        else:
            self.net = nets[best["anchor"]]
        self.guard_report: dict[str, Any] = {
            "method": method, "candidates": rows,
            "chosen": "pas" if best is None else f"anchor {best['anchor']:g}",
            "cpu_s": time.process_time() - t0,
        }  # fmt: skip
        #: CPU seconds (time.process_time) of the per-farm check, model loading excluded
        self.check_cpu_seconds: float = self.guard_report["cpu_s"]

    def _exact_gains(self, nets: dict[float, Any]) -> list[dict[str, Any]]:
        c, mode = self.config, self.action_mode
        pas = measure(PASPolicy(c, mode), c, action_mode=mode, method="exact").efficiency
        rows = []
        for anchor, net in nets.items():
            self.net = net
            eff = measure(self, c, action_mode=mode, method="exact").efficiency
            gain = 100.0 * (eff - pas) / pas
            rows.append({"anchor": anchor, "gain_pct": gain, "eligible": gain > 1e-9})
        return rows

    def _simulated_gains(self, nets: dict[float, Any], replications: int) -> list[dict[str, Any]]:
        c = self.config
        per = c.epochs_per_duration
        # the policy's own stationary regime first, as long as evaluations wait for it (10 mean
        # job durations, serverfarm_gym.evaluation.efficiency.Window): a shorter wait measures the transient after
        # PAS's regime, where a network's deviations can pay that cost in the long run; then 2
        # durations (>= 4,000 epochs) measured
        kw = {"window": Window.for_farm(c, max(math.ceil(2 * per), 4_000), pas_warmup=True),
              "seeds": consecutive_seeds(GUARD_SEED, replications), "action_mode": "group",
              "method": "vector"}  # fmt: skip
        pas = measure(PASPolicy(c, "group"), c, **kw).per_replication
        L, G = self.encoding.max_levels, self.encoding.max_groups
        scale = 100.0 / float(np.mean(pas))  # a difference in % of PAS's efficiency
        rows = []
        for anchor, net in nets.items():
            gen = TokenGeneralistPolicy(c, "group", net=net, max_groups=G, max_levels=L)
            d = measure(gen, c, **kw).per_replication - pas
            mean, half = mean_ci(d, 0.95)
            rows.append({"anchor": anchor, "gain_pct": mean * scale, "ci95_pct": half * scale,
                         "eligible": mean - half > 0.0})  # fmt: skip
        return rows

    def _act_batch(
        self, obs: np.ndarray, masks: np.ndarray, deterministic: bool = True
    ) -> np.ndarray:
        if self._pas_only is not None:  # the guard chose PAS: exactly PAS, at PAS's cost
            return self._pas_only._act_batch(obs, masks)
        return super()._act_batch(obs, masks, deterministic)
