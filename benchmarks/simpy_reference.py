"""A straightforward SimPy model of the farm under PAS: the speed reference for the compiled
simulator (``bench_simulation.py``) and an independent check of its efficiency
(``tests/scripts/test_benchmarks_smoke.py``).

The model is what one would write first with SimPy, with no attempt at speed:

* one arrival process per job type, Poisson with the type's rate (constant-rate scenarios only);
* the dispatcher scans all servers: among those of the type's groups that are not full it picks
  the highest PAS priority mu_k / (eps_k - eps0_k), ties to the smallest server index, exactly
  the rule of the compiled ``priority`` dispatcher; a job finding all of them full is blocked;
* one process per server, in processor sharing: it keeps the remaining work of each of its n
  jobs (sizes drawn at arrival, exponential with mean 1), serves each at rate mu_k(n) / n and
  sleeps until the smallest one finishes; an arrival interrupts it (the elapsed service is
  subtracted and the new job added). This works for any size distribution; with
  ``model="memoryless"`` the process instead draws the next departure as Exp(mu_k(n)) and
  redraws it after each arrival (exact for exponential sizes only, and faster);
* work and energy are integrated exactly between state changes (service rate and power are
  piecewise constant).

Randomness comes from one ``numpy.random.Generator``; the draws differ from the compiled
simulator's, so the two agree in distribution, not path by path.

Usage: ``python benchmarks/simpy_reference.py --scenario tiny --epochs 20000``.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass

import numpy as np
import simpy

from serverfarm_gym.envs.config import FarmConfig
from serverfarm_gym.envs.scenarios import load_scenario


@dataclass
class SimpyResult:
    """Totals of one run: model time, work and energy integrals, counts, CPU seconds."""

    time: float
    work: float
    energy: float
    arrivals: int
    blocked: int
    departures: int
    epochs: int
    cpu_seconds: float
    batch_efficiency: np.ndarray  # efficiency of each of ``n_batches`` consecutive batches

    @property
    def events(self) -> int:
        """Arrivals (blocked ones included) plus departures, as the compiled simulator counts."""
        return self.arrivals + self.departures

    @property
    def efficiency(self) -> float:
        return self.work / self.energy if self.energy > 0 else 0.0


class SimpyFarm:
    """The farm as SimPy processes (see the module doc)."""

    def __init__(self, config: FarmConfig, seed: int = 0, model: str = "job"):
        if model not in ("job", "memoryless"):
            raise ValueError(f"model: choose 'job' or 'memoryless', got {model!r}")
        if config.is_time_varying or not config.all_exponential:
            raise ValueError(
                "scenario: the SimPy reference models constant rates and exponential sizes only"
            )
        self.c = config
        self.rng = np.random.default_rng(seed)
        self.env = simpy.Environment()
        S = config.n_servers
        self.group = [int(k) for k in config.server_group]
        self.buffer = [int(config.buffers[k]) for k in self.group]
        self.mu = config.mu_table.tolist()
        self.pw = config.power_table.tolist()
        self.prio = [float(config.group_efficiency[k]) for k in self.group]
        self.allowed = [[bool(a) for a in row] for row in config.server_availability]
        self.occ = [0] * S
        # totals
        self.work = self.energy = 0.0
        self.last = 0.0
        self.rate = 0.0
        self.power = float(sum(self.pw[k][0] for k in self.group))
        self.arrivals = self.blocked = self.departures = self.epochs = 0
        server = self._server if model == "job" else self._memoryless_server
        self.procs = [self.env.process(server(s)) for s in range(S)]
        for j in range(config.n_job_types):
            self.env.process(self._arrivals(j, float(config.arrival_rates[0, j])))

    # ---- bookkeeping ------------------------------------------------------------------------
    def _advance(self) -> None:
        now = self.env.now
        dt = now - self.last
        self.work += self.rate * dt
        self.energy += self.power * dt
        self.last = now

    def _set_occupancy(self, s: int, n: int) -> None:
        self._advance()
        k, old = self.group[s], self.occ[s]
        self.rate += self.mu[k][n] - self.mu[k][old]
        self.power += self.pw[k][n] - self.pw[k][old]
        self.occ[s] = n

    # ---- processes --------------------------------------------------------------------------
    def _arrivals(self, j: int, rate: float):
        while True:
            yield self.env.timeout(self.rng.exponential(1.0 / rate))
            self.arrivals += 1
            best, best_p = -1, -np.inf
            allowed = self.allowed[j]
            for s in range(len(self.occ)):  # the straightforward dispatcher: scan every server
                if allowed[s] and self.occ[s] < self.buffer[s] and self.prio[s] > best_p:
                    best, best_p = s, self.prio[s]
            if best < 0:
                self.blocked += 1
                continue
            self.epochs += 1
            self._set_occupancy(best, self.occ[best] + 1)
            self.procs[best].interrupt()  # its departure clock must be redrawn

    def _server(self, s: int):
        k = self.group[s]
        work: list[float] = []  # remaining work of each job on the server
        while True:
            n = len(work)
            start = self.env.now
            try:
                if n == 0:
                    yield self.env.event()  # idle until an arrival interrupts
                else:
                    each = self.mu[k][n] / n  # PS: every job is served at this rate
                    yield self.env.timeout(min(work) / each)
                    done = min(work)
                    work = [w - done for w in work]
                    work.remove(0.0)
                    self._set_occupancy(s, n - 1)
                    self.departures += 1
            except simpy.Interrupt:
                if n > 0:
                    served = (self.env.now - start) * self.mu[k][n] / n
                    work = [w - served for w in work]
                work.append(self.rng.exponential(1.0))  # the new job

    def _memoryless_server(self, s: int):
        k = self.group[s]
        while True:
            n = self.occ[s]
            try:
                if n == 0:
                    yield self.env.event()  # idle until an arrival interrupts
                else:
                    yield self.env.timeout(self.rng.exponential(1.0 / self.mu[k][n]))
                    self._set_occupancy(s, n - 1)
                    self.departures += 1
            except simpy.Interrupt:
                pass

    def run(self, n_epochs: int, n_batches: int = 1) -> SimpyResult:
        """Simulate ``n_epochs`` decision epochs (in ``n_batches`` equal batches)."""
        t0 = time.process_time()
        start = (self.env.now, self.work, self.energy, self.arrivals, self.blocked,
                 self.departures, self.epochs)  # fmt: skip
        per = max(1, n_epochs // n_batches)
        effs = []
        for _ in range(n_batches):
            w0, e0 = self.work, self.energy
            target = self.epochs + per
            while self.epochs < target:
                self.env.step()
            self._advance()
            effs.append((self.work - w0) / (self.energy - e0))
        return SimpyResult(
            time=self.env.now - start[0],
            work=self.work - start[1],
            energy=self.energy - start[2],
            arrivals=self.arrivals - start[3],
            blocked=self.blocked - start[4],
            departures=self.departures - start[5],
            epochs=self.epochs - start[6],
            cpu_seconds=time.process_time() - t0,
            batch_efficiency=np.array(effs),
        )


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--scenario", default="tiny")
    p.add_argument("--epochs", type=int, default=20_000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--model", choices=["job", "memoryless"], default="job")
    a = p.parse_args(argv)
    farm = SimpyFarm(load_scenario(a.scenario), seed=a.seed, model=a.model)
    farm.run(a.epochs // 10)  # warm-up
    r = farm.run(a.epochs, n_batches=20)
    half = 1.96 * r.batch_efficiency.std(ddof=1) / np.sqrt(len(r.batch_efficiency))
    print(
        f"{a.scenario}: efficiency {r.efficiency:.5f} +- {half:.5f} (95%), "
        f"{r.events / r.cpu_seconds:,.0f} events per CPU second"
    )


if __name__ == "__main__":
    main()
