"""The simulator against queueing theory and exact solutions.

Every check is statistical with a fixed seed; the tolerance is the batch-means confidence
half-width at two-sided level ``ALPHA`` (Student t, see ``tests/helpers/``), never a constant.

Insensitivity (what is and is not a theorem here). A processor-sharing server whose total rate
depends only on its number of jobs is a symmetric queue, so a single M/G/1/B-PS server (also with
state-dependent rates), or servers fed by their own Poisson streams, have the occupancy law of the
exponential case. Loss systems (B = 1) are insensitive too (Erlang), per server even under ordered
hunting, which is what PAS does in one group. A *multi-server* group with B > 1 under PAS
(first-fit) or uniform random dispatch is **not** insensitive: the overflow to the second server
depends on how long the first stays full. ``test_pas_multiserver_is_sensitive`` checks that the
general kernel reproduces that (it would not if it silently used exponential sizes).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from numba import njit
from scipy import stats as sps

from serverfarm_gym.envs.config import FarmConfig, JobSizeConfig, farm_from_dict
from serverfarm_gym.envs.kernels.dispatch import sample_size
from serverfarm_gym.envs.scenarios import load_preset, random_farm
from tests.helpers.stats import (
    ALPHA,
    Batches,
    assert_same_within_ci,
    assert_within_ci,
    batch_run,
    mean_ci,
    ratio_ci,
)

KERNELS = [pytest.param(False, id="fast"), pytest.param(True, id="general")]


# ---------------------------------------------------------------------------------------------
# closed forms
# ---------------------------------------------------------------------------------------------
def birth_death(lam: float, mu: list[float]) -> np.ndarray:
    """Stationary law of a single server with arrivals lam (n < B) and total rate mu[n-1]."""
    p = np.ones(len(mu) + 1)
    for n in range(1, len(mu) + 1):
        p[n] = p[n - 1] * lam / mu[n - 1]
    return p / p.sum()


def mm1b_blocking(rho: float, B: int) -> float:
    """Textbook M/M/1/B blocking probability (rho = 1 is the uniform limit)."""
    if rho == 1.0:
        return 1.0 / (B + 1)
    return rho**B * (1.0 - rho) / (1.0 - rho ** (B + 1))


def erlang_b(n: int, a: float) -> float:
    """Erlang-B blocking E(n, a) by the stable recursion (E(0, a) = 1)."""
    e = 1.0
    for i in range(1, n + 1):
        e = a * e / (i + a * e)
    return e


def single_server(
    lam: float,
    mu: float | list[float],
    busy_power: float | list[float],
    buffer: int,
    idle_power: float = 0.7,
    job_size: dict | None = None,
) -> FarmConfig:
    d = {
        "name": "single",
        "groups": [
            {
                "name": "s",
                "count": 1,
                "service_rate": mu,
                "busy_power": busy_power,
                "idle_power": idle_power,
                "buffer": buffer,
            }
        ],
        "job_types": [{"name": "j", "arrival_rate": lam, "groups": ["s"]}],
        "job_size": job_size or {"distribution": "exponential"},
    }
    return farm_from_dict(d)


def check_functionals(b: Batches, config: FarmConfig, p: list[np.ndarray], what: str) -> None:
    """Compare blocking (per type), throughput, power, acceptance and departure rates with the
    exact product of independent single-server laws ``p[k]`` (one server per group, group k)."""
    mu, pw = config.mu_table, config.power_table
    thr = sum(float(p[k] @ mu[k, : len(p[k])]) for k in range(len(p)))
    power = sum(float(p[k] @ pw[k, : len(p[k])]) for k in range(len(p)))
    lam = config.arrival_rates[0]
    # type j uses only group j here (or there is one group): blocked iff that server is full
    for j in range(config.n_job_types):
        k = config.job_types[j].groups[0]
        assert_within_ci(
            ratio_ci(b.blocked[:, j], b.arrivals[:, j]), p[k][-1], f"{what} blocking[{j}]"
        )
    assert_within_ci(ratio_ci(b.work, b.time), thr, f"{what} throughput")
    assert_within_ci(ratio_ci(b.energy, b.time), power, f"{what} power")
    accept = sum(lam[j] * (1 - p[config.job_types[j].groups[0]][-1]) for j in range(len(lam)))
    assert_within_ci(ratio_ci(b.accepted.sum(axis=1), b.time), accept, f"{what} acceptance rate")
    # sizes have mean 1: departures per unit time = work per unit time = acceptance rate
    assert_within_ci(ratio_ci(b.departures, b.time), thr, f"{what} departure rate")


# ---------------------------------------------------------------------------------------------
# M/M/1/B
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("general", KERNELS)
@pytest.mark.parametrize(("rho", "B"), [(0.5, 1), (0.8, 3), (1.0, 2), (1.0, 4), (1.7, 3), (4.0, 2)])
def test_mm1b_closed_form(rho: float, B: int, general: bool) -> None:
    mu = 1.5
    c = single_server(rho * mu, mu, 2.9, B)
    p = birth_death(rho * mu, [mu] * B)
    assert p[-1] == pytest.approx(mm1b_blocking(rho, B), rel=1e-12)
    b = batch_run(
        c, seed=11, policy="random", n_batches=30, batch_epochs=8_000, force_general=general
    )
    check_functionals(b, c, [p], f"M/M/1/{B} rho={rho}")
    # and the textbook formulas themselves
    assert_within_ci(ratio_ci(b.work, b.time), mu * (1 - p[0]), "throughput = mu (1 - p0)")
    assert_within_ci(
        ratio_ci(b.energy, b.time), 0.7 * p[0] + 2.9 * (1 - p[0]), "power = eps0 p0 + eps (1 - p0)"
    )


@pytest.mark.parametrize("general", KERNELS)
def test_speed_scaling_single_server(general: bool) -> None:
    """State-dependent rate and power: a birth-death chain with rates mu(n), power eps(n)."""
    mu, eps = [1.0, 1.6, 2.0, 2.2], [2.0, 3.5, 5.5, 6.0]
    c = single_server(1.8, mu, eps, 4, idle_power=1.0)
    b = batch_run(c, seed=5, policy="pas", n_batches=30, batch_epochs=8_000, force_general=general)
    check_functionals(b, c, [birth_death(1.8, mu)], "speed scaling")


# ---------------------------------------------------------------------------------------------
# insensitivity
# ---------------------------------------------------------------------------------------------
GENERAL_SIZES = [
    {"distribution": "deterministic"},
    {"distribution": "erlang", "k": 3},
    {"distribution": "hyperexponential", "scv": 8.0},
    {"distribution": "lognormal", "scv": 2.0},
    {"distribution": "pareto", "alpha": 2.5},
]


@pytest.mark.parametrize("size", GENERAL_SIZES, ids=lambda s: s["distribution"])
def test_mg1b_ps_occupancy_is_truncated_geometric(size: dict) -> None:
    """M/G/1/3-PS: the occupancy law is the M/M/1/3 one, p_n ∝ rho^n.

    With B = 3 the law is identified by three functionals: throughput gives p0, blocking p3
    (PASTA), and the power with eps(n) - eps0 = n gives the mean occupancy, hence p1 and p2.
    """
    lam, mu = 0.9, 1.0
    c = single_server(lam, mu, [1.0, 2.0, 3.0], 3, idle_power=0.0, job_size=size)
    p = birth_death(lam, [mu] * 3)
    b = batch_run(c, seed=3, policy="random", n_batches=30, batch_epochs=12_000)
    check_functionals(b, c, [p], f"M/G/1/3-PS {size}")
    assert_within_ci(ratio_ci(b.energy, b.time), float(p @ np.arange(4)), "mean occupancy")


@pytest.mark.parametrize(
    "size",
    [{"distribution": "deterministic"}, {"distribution": "pareto", "alpha": 2.5}],
    ids=lambda s: s["distribution"],
)
def test_symmetric_queue_with_state_dependent_rate(size: dict) -> None:
    """Kelly's symmetric queue: PS with total rate mu(n) is insensitive as well."""
    mu, eps = [0.6, 1.0, 1.3], [1.5, 2.5, 4.0]
    c = single_server(1.1, mu, eps, 3, idle_power=0.5, job_size=size)
    b = batch_run(c, seed=9, policy="pas", n_batches=30, batch_epochs=10_000)
    check_functionals(b, c, [birth_death(1.1, mu)], f"symmetric queue {size}")


def test_dedicated_servers_with_per_type_sizes() -> None:
    """Three servers, each fed by its own job type with its own size law: independent M/G/1/B."""
    groups, jobs, lams, mus, bufs = [], [], [0.7, 1.9, 0.8], [1.0, 1.5, 0.6], [1, 2, 3]
    sizes = [GENERAL_SIZES[0], GENERAL_SIZES[2], GENERAL_SIZES[4]]
    for k in range(3):
        groups.append(
            {
                "name": f"g{k}",
                "count": 1,
                "service_rate": mus[k],
                "busy_power": 1.0 + k,
                "idle_power": 0.2 * k,
                "buffer": bufs[k],
            }
        )
        jobs.append(
            {"name": f"j{k}", "arrival_rate": lams[k], "groups": [f"g{k}"], "job_size": sizes[k]}
        )
    c = farm_from_dict({"groups": groups, "job_types": jobs})
    p = [birth_death(lams[k], [mus[k]] * bufs[k]) for k in range(3)]
    b = batch_run(c, seed=21, policy="random", n_batches=30, batch_epochs=15_000)
    check_functionals(b, c, p, "dedicated servers")


def loss_farm(a: float, size: dict) -> FarmConfig:
    """Three unit-rate B = 1 servers as three one-server groups (power increments 1, 2, 4, so
    the power identifies a weighted sum of the per-server busy probabilities)."""
    groups = [
        {
            "name": f"s{i}",
            "count": 1,
            "service_rate": 1.0,
            "busy_power": 0.5 + 2**i,
            "idle_power": 0.5,
            "buffer": 1,
        }
        for i in range(3)
    ]
    return farm_from_dict(
        {
            "groups": groups,
            "job_types": [{"name": "j", "arrival_rate": a, "groups": ["s0", "s1", "s2"]}],
            "job_size": size,
        }
    )


@pytest.mark.parametrize("policy", ["pas", "random"])
@pytest.mark.parametrize(
    "size",
    [{"distribution": "exponential"}, {"distribution": "deterministic"}, GENERAL_SIZES[4]],
    ids=lambda s: s["distribution"],
)
def test_erlang_loss_insensitive(policy: str, size: dict) -> None:
    """M/G/3/3: blocking E(3, a); under PAS (ordered hunting: server i is busy with probability
    a [E(i-1, a) - E(i, a)]) and under random dispatch (a (1 - E(3, a)) / 3 each)."""
    a = 2.0
    c = loss_farm(a, size)
    assert np.all(np.diff(c.group_efficiency) < 0)  # PAS hunts s0, s1, s2 in order
    e = [erlang_b(i, a) for i in range(4)]
    if policy == "pas":
        busy = [a * (e[i] - e[i + 1]) for i in range(3)]
    else:
        busy = [a * (1 - e[3]) / 3] * 3
    b = batch_run(c, seed=4, policy=policy, n_batches=30, batch_epochs=10_000)
    assert_within_ci(ratio_ci(b.blocked.sum(axis=1), b.arrivals.sum(axis=1)), e[3], "Erlang B")
    power = 1.5 + sum(2**i * busy[i] for i in range(3))
    assert_within_ci(ratio_ci(b.energy, b.time), power, f"{policy} per-server busy probabilities")
    assert_within_ci(ratio_ci(b.work, b.time), a * (1 - e[3]), "carried load")


def test_pas_multiserver_is_sensitive() -> None:
    """One group of 3 servers, B = 3, PAS (first-fit): exponential sizes match the exact chain
    in both kernels, deterministic sizes block measurably more (no insensitivity here)."""
    ctmc = pytest.importorskip("serverfarm_gym.baselines.solvers.ctmc")
    d = {
        "groups": [
            {
                "name": "g",
                "count": 3,
                "service_rate": 1.0,
                "busy_power": 2.0,
                "idle_power": 1.0,
                "buffer": 3,
            }
        ],
        "job_types": [{"name": "j", "arrival_rate": 2.4, "groups": ["g"]}],
    }
    c = farm_from_dict(d)
    exact = ctmc.evaluate_policy(c, "pas")
    runs = {}
    for name, conf, general in [
        ("fast", c, False),
        ("general", c, True),
        ("deterministic", c.with_job_size({"distribution": "deterministic"}), True),
    ]:
        b = batch_run(
            conf, seed=17, policy="pas", n_batches=30, batch_epochs=20_000, force_general=general
        )
        runs[name] = ratio_ci(b.blocked.sum(axis=1), b.arrivals.sum(axis=1))
    assert_within_ci(runs["fast"], float(exact.blocking[0]), "PAS blocking (fast kernel)")
    assert_within_ci(runs["general"], float(exact.blocking[0]), "PAS blocking (general kernel)")
    det, ref = runs["deterministic"], runs["general"]
    assert det[0] - ref[0] > math.hypot(det[1], ref[1]), (
        f"deterministic sizes should raise PAS blocking beyond the CI: {det} vs {ref}"
    )


# ---------------------------------------------------------------------------------------------
# farms with exact solutions
# ---------------------------------------------------------------------------------------------
#: exact PAS efficiencies (CONTEXT.md / shared/data/reference-farms.yaml), exponential sizes
EXACT_PAS = {
    "tiny": 0.3273379092816369,
    "small-1": 0.5910345757882287,
    "small-2": 0.26458510460282,
    "small-3": 0.3540995212186525,
}


@pytest.mark.parametrize("name", list(EXACT_PAS))
def test_pas_efficiency_matches_exact(name: str) -> None:
    c = load_preset(name)
    b = batch_run(c, seed=2024, policy="pas", n_batches=30, batch_epochs=20_000)
    assert_within_ci(ratio_ci(b.work, b.energy), EXACT_PAS[name], f"{name} PAS efficiency")


@pytest.mark.parametrize("name", ["tiny", "small-1"])
def test_pas_efficiency_matches_exact_general_kernel(name: str) -> None:
    c = load_preset(name)
    b = batch_run(c, seed=7, policy="pas", n_batches=30, batch_epochs=10_000, force_general=True)
    assert_within_ci(ratio_ci(b.work, b.energy), EXACT_PAS[name], f"{name} PAS efficiency")


#: a blocking probability is checked only where this many blocked arrivals are expected: with
#: fewer, most batches see none and the batch-means normal approximation breaks down
MIN_EVENTS = 200

CTMC_FARMS = ["tiny", "small-1", "small-2", "small-3", "speed-scaling", 1, 5, 16, 22]


@pytest.mark.parametrize("policy", ["pas", "random"])
@pytest.mark.parametrize("farm", CTMC_FARMS, ids=str)
def test_efficiency_and_blocking_match_ctmc(farm: str | int, policy: str) -> None:
    """PAS and random dispatch against the exact per-server chain (serverfarm_gym.baselines.solvers.ctmc)."""
    ctmc = pytest.importorskip(
        "serverfarm_gym.baselines.solvers.ctmc",
        reason="baselines/solvers/ctmc.py not available yet",
    )
    c = load_preset(farm) if isinstance(farm, str) else random_farm(farm)
    exact = ctmc.evaluate_policy(c, policy)
    if farm in EXACT_PAS and policy == "pas":
        assert exact.efficiency == pytest.approx(EXACT_PAS[farm], rel=1e-9)
    b = batch_run(c, seed=99, policy=policy, n_batches=30, batch_epochs=10_000)
    assert_within_ci(ratio_ci(b.work, b.energy), exact.efficiency, f"{c.name} {policy} efficiency")
    assert_within_ci(ratio_ci(b.work, b.time), exact.throughput, f"{c.name} {policy} throughput")
    for j in range(c.n_job_types):
        if exact.blocking[j] * b.arrivals[:, j].sum() < MIN_EVENTS:
            continue  # too few expected blocked arrivals for a normal batch CI (rare type)
        assert_within_ci(
            ratio_ci(b.blocked[:, j], b.arrivals[:, j]),
            float(exact.blocking[j]),
            f"{c.name} {policy} blocking[{j}]",
        )


# ---------------------------------------------------------------------------------------------
# the two kernels agree; time-varying schedules
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("policy", ["pas", "random"])
def test_fast_and_general_kernels_agree(policy: str) -> None:
    """paper-100 (too large for an exact solution): same efficiency and throughput in both."""
    c = load_preset("paper-100")
    est = {}
    for general in (False, True):
        b = batch_run(
            c, seed=31 + general, policy=policy, n_batches=25, batch_epochs=8_000,
            warmup_epochs=20_000, force_general=general,
        )  # fmt: skip
        est[general] = (ratio_ci(b.work, b.energy), ratio_ci(b.work, b.time))
    assert_same_within_ci(est[False][0], est[True][0], f"paper-100 {policy} efficiency")
    assert_same_within_ci(est[False][1], est[True][1], f"paper-100 {policy} throughput")


def time_varying_tiny() -> FarmConfig:
    d = load_preset("tiny").to_dict()
    d["job_types"][0]["arrival_rate"] = [0.5, 3.0, 1.0, 0.0]
    d["job_types"][1]["arrival_rate"] = [1.5, 0.5, 1.0, 1.0]
    d["groups"][1]["price"] = [0.5, 2.0, 1.0, 1.5]
    d["interval_length"] = 0.5
    return farm_from_dict(d)


def test_time_varying_kernels_agree_and_rates_average() -> None:
    c = time_varying_tiny()
    est = {}
    for general in (False, True):
        b = batch_run(
            c, seed=8, policy="pas", n_batches=30, batch_epochs=10_000, force_general=general
        )
        for j in range(c.n_job_types):
            # the long-run arrival rate of a cyclic piecewise-constant schedule is its mean
            assert_within_ci(
                ratio_ci(b.arrivals[:, j], b.time), c.job_types[j].mean_rate, f"arrival rate {j}"
            )
        est[general] = (ratio_ci(b.work, b.energy), ratio_ci(b.work, b.cost))
    assert_same_within_ci(est[False][0], est[True][0], "time-varying efficiency")
    assert_same_within_ci(est[False][1], est[True][1], "time-varying cost efficiency")


@pytest.mark.parametrize("general", KERNELS)
def test_price_schedule_averages(general: bool) -> None:
    """Constant arrivals, one group with a price schedule: the state process ignores prices, so
    the long-run cost per unit energy is the time-average price."""
    c = single_server(1.2, 1.5, 2.9, 3, job_size={"distribution": "exponential"})
    d = c.to_dict()
    d["groups"][0]["price"] = [0.5, 2.0, 1.25]
    d["interval_length"] = 0.25
    c = farm_from_dict(d)
    b = batch_run(
        c, seed=12, policy="random", n_batches=30, batch_epochs=8_000, force_general=general
    )
    assert_within_ci(ratio_ci(b.cost, b.energy), (0.5 + 2.0 + 1.25) / 3, "mean price")
    # and the queue is still M/M/1/3
    check_functionals(b, c, [birth_death(1.2, [1.5] * 3)], "priced M/M/1/3")


# ---------------------------------------------------------------------------------------------
# the job-size sampler
# ---------------------------------------------------------------------------------------------
@njit(cache=True)
def _draw(code: int, p1: float, p2: float, rng: np.random.Generator, n: int) -> np.ndarray:
    out = np.empty(n)
    for i in range(n):
        out[i] = sample_size(code, p1, p2, rng)
    return out


def _frozen(js: JobSizeConfig):
    """The scipy distribution of a mean-1 job size."""
    d = js.distribution
    if d == "exponential":
        return sps.expon()
    if d == "erlang":
        return sps.gamma(js.k, scale=1.0 / js.k)
    if d == "lognormal":
        s2 = math.log1p(js.scv)
        return sps.lognorm(s=math.sqrt(s2), scale=math.exp(-s2 / 2))
    if d == "pareto":
        return sps.pareto(js.alpha, scale=(js.alpha - 1) / js.alpha)
    raise AssertionError(d)


def _scv(js: JobSizeConfig) -> float:
    d = js.distribution
    return {
        "exponential": 1.0,
        "deterministic": 0.0,
        "erlang": 1.0 / js.k if js.k else 0.0,
        "hyperexponential": js.scv or 0.0,
        "lognormal": js.scv or 0.0,
        "pareto": 1.0 / (js.alpha * (js.alpha - 2)) if js.alpha and js.alpha > 2 else math.inf,
    }[d]


SAMPLER_CASES = [
    JobSizeConfig("exponential"),
    JobSizeConfig("erlang", k=1),
    JobSizeConfig("erlang", k=4),
    JobSizeConfig("hyperexponential", scv=4.0),
    JobSizeConfig("hyperexponential", scv=1.5),
    JobSizeConfig("lognormal", scv=1.0),
    JobSizeConfig("lognormal", scv=0.25),
    JobSizeConfig("pareto", alpha=5.0),
    JobSizeConfig("pareto", alpha=2.5),
]


@pytest.mark.parametrize(
    "js", SAMPLER_CASES, ids=lambda j: f"{j.distribution}-{j.k or j.scv or j.alpha}"
)
def test_sampler_mean_scv_and_law(js: JobSizeConfig) -> None:
    n_batches, per = 25, 8_000
    x = _draw(js.code, *js.params(), np.random.default_rng(1234), n_batches * per)
    assert np.all(x > 0)
    xb = x.reshape(n_batches, per)
    assert_within_ci(mean_ci(xb.mean(axis=1)), 1.0, f"{js} mean")
    # E[X^2] = 1 + scv; its batch CI needs a finite 4th moment (not pareto alpha <= 4)
    if not (js.distribution == "pareto" and js.alpha <= 4):
        assert_within_ci(mean_ci((xb**2).mean(axis=1)), 1.0 + _scv(js), f"{js} E[X^2] = 1 + scv")
    if js.distribution == "hyperexponential":
        # balanced-means two-phase mixture with rates 2 p1 and 2 (1 - p1)
        p1 = js.params()[0]
        r1, r2 = 2 * p1, 2 * (1 - p1)

        def cdf(t):
            return 1 - p1 * np.exp(-r1 * t) - (1 - p1) * np.exp(-r2 * t)
    else:
        cdf = _frozen(js).cdf
    assert sps.kstest(x, cdf).pvalue > ALPHA, f"{js}: sample law differs from the exact CDF"


def test_sampler_deterministic_and_seeded() -> None:
    det = JobSizeConfig("deterministic")
    assert np.all(_draw(det.code, *det.params(), np.random.default_rng(0), 100) == 1.0)
    js = JobSizeConfig("lognormal", scv=2.0)
    a = _draw(js.code, *js.params(), np.random.default_rng(5), 50)
    b = _draw(js.code, *js.params(), np.random.default_rng(5), 50)
    np.testing.assert_array_equal(a, b)


# ---------------------------------------------------------------------------------------------
# longer versions (pytest -m slow)
# ---------------------------------------------------------------------------------------------
#: (size, force_general): exponential sizes in both kernels, the others (general kernel only)
SIZES_KERNELS = [
    pytest.param({"distribution": "exponential"}, False, id="exponential-fast"),
    pytest.param({"distribution": "exponential"}, True, id="exponential-general"),
    *[pytest.param(s, True, id=s["distribution"]) for s in GENERAL_SIZES],
]


@pytest.mark.slow
@pytest.mark.parametrize(("size", "general"), SIZES_KERNELS)
@pytest.mark.parametrize(("rho", "B"), [(0.6, 1), (0.95, 2), (1.0, 5), (2.5, 4)])
def test_mg1b_ps_long(rho: float, B: int, size: dict, general: bool) -> None:
    """The M/G/1/B-PS law over more loads, buffers and sizes, with 4x longer runs (the mean
    occupancy, via power increments eps(n) - eps0 = n, together with p0 and p_B)."""
    c = single_server(rho, 1.0, [float(n) for n in range(1, B + 1)], B, 0.0, size)
    p = birth_death(rho, [1.0] * B)
    b = batch_run(
        c, seed=77, policy="random", n_batches=30, batch_epochs=40_000, force_general=general
    )
    check_functionals(b, c, [p], f"M/G/1/{B}-PS rho={rho} {size}")
    assert_within_ci(ratio_ci(b.energy, b.time), float(p @ np.arange(B + 1)), "mean occupancy")


#: random farms whose per-server chain has at most a few thousand states
SLOW_CTMC_FARMS = [
    1,
    3,
    5,
    6,
    11,
    12,
    14,
    16,
    19,
    20,
    21,
    22,
    23,
    24,
    25,
    27,
    30,
    31,
    34,
    35,
    37,
    38,
]


@pytest.mark.slow
@pytest.mark.parametrize("policy", ["pas", "random"])
@pytest.mark.parametrize("seed", SLOW_CTMC_FARMS)
def test_random_farms_match_ctmc_long(seed: int, policy: str) -> None:
    ctmc = pytest.importorskip(
        "serverfarm_gym.baselines.solvers.ctmc",
        reason="baselines/solvers/ctmc.py not available yet",
    )
    c = random_farm(seed)
    exact = ctmc.evaluate_policy(c, policy)
    for general in (False, True):
        b = batch_run(
            c, seed=seed, policy=policy, n_batches=30, batch_epochs=20_000, force_general=general
        )
        tag = f"{c.name} {policy} {'general' if general else 'fast'}"
        assert_within_ci(ratio_ci(b.work, b.energy), exact.efficiency, f"{tag} efficiency")
        assert_within_ci(ratio_ci(b.energy, b.time), exact.power, f"{tag} power")
        for j in range(c.n_job_types):
            if exact.blocking[j] * b.arrivals[:, j].sum() >= MIN_EVENTS:
                assert_within_ci(
                    ratio_ci(b.blocked[:, j], b.arrivals[:, j]),
                    float(exact.blocking[j]),
                    f"{tag} blocking[{j}]",
                )


@pytest.mark.slow
@pytest.mark.parametrize("name", list(EXACT_PAS))
def test_pas_efficiency_matches_exact_long(name: str) -> None:
    """10x longer than the default check: a half-width of about 1e-4 relative."""
    b = batch_run(load_preset(name), seed=4242, policy="pas", n_batches=30, batch_epochs=200_000)
    assert_within_ci(ratio_ci(b.work, b.energy), EXACT_PAS[name], f"{name} PAS efficiency")
