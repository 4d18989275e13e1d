"""The table network: a farm's parameters in, one priority table out (numpy only at run time).

The shipped generalist (:class:`serverfarm_gym.agents.table_generalist.policy.GeneralistPolicy`) is a priority-table
policy whose table is computed from the farm by one forward pass of a small permutation-
equivariant network over the farm's usable (group, level) entries. The table then runs in the
compiled simulator's own priority dispatcher, like PAS's: no network call per decision.

Tokens (:func:`table_features`): one per usable entry (k, b), ``b < B_k``, of unit-free features
of the farm: the group's PAS efficiency relative to the farm's best and its rank, the level
relative to the buffer, the efficiency and speed of the server once it holds b+1 jobs, the idle
share of its power, its share of servers and capacity, the load that the job types allowed on it
bring relative to their capacity, how many types may use it, and how good those types'
best alternative group is; plus the farm's load, size, number of groups and types.

Network (:func:`forward`): a token MLP, then attention blocks (multi-head self-attention over
the farm's entries and a feed-forward layer, each residual; :func:`n_blocks`, none in a network
without them), then (DeepSets) the mean of the token embeddings over the farm and over the
token's own group are concatenated to each token, and two heads give

    score(k, b) = p * pas(k) + g(k) + d(k, b)

``pas(k)`` is PAS's ranking of the group (minus its efficiency rank: 0 for the most efficient
group, -1 for the next, ...; the weights' ``prior.scale`` is ``p``, 0 or absent = no prior), so
the network learns a correction to PAS and a network that outputs little is PAS (its ties within
a group are PAS's smallest-server-index tie-break). ``g`` (the mean of a head over the group's
tokens) ranks the groups, ``d`` orders the levels within a group and moves single entries across
groups (reservation: the top levels of a group below another group). Permuting the groups
permutes the table.

Files: ``NAME.npz`` (the weights, float32 arrays, read with ``allow_pickle=False``) and
``NAME.json`` (the feature list, sizes, how it was trained and validated).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from serverfarm_gym.envs.config import FarmConfig

__all__ = [
    "FEATURES",
    "MAIN_ENSEMBLE",
    "SMALL_EXPERT",
    "TWIN_SERVERS",
    "chain_states_log10",
    "expert_prefix",
    "expert_scores",
    "feature_farm",
    "forward",
    "load_weights",
    "members",
    "merge_expert",
    "save_weights",
    "table_features",
    "table_from_scores",
]

FEATURES = (
    "log_eff_rel", "eff_rank", "level_frac", "next_level_frac", "buffer_8", "top_level",
    "empty_level", "log_eff_at_level", "log_speed_at_level", "log_speed_rel", "idle_share",
    "server_share", "capacity_share", "log_count", "types_load", "log_demand_over_capacity",
    "type_share", "exclusive_share", "log_best_alt", "no_alt_share", "state_dependent",
    "farm_load", "log_servers", "groups_8", "types_4",
    # read by experts whose first layer takes them (a model reads the first F features, F its
    # input width): the marginal efficiency and speed of the (b+1)-th job on the server
    "log_marginal_eff", "log_marginal_speed", "constant_beyond",
)  # fmt: skip


_EFF_RANK = FEATURES.index("eff_rank")

#: farms larger than this are read through their scaled-down twin of about 100 servers
TWIN_SERVERS = 200


def feature_farm(config: FarmConfig) -> FarmConfig:
    """The farm whose features the network reads: ``config`` itself up to :data:`TWIN_SERVERS`
    servers, else its scaled-down twin of about 100 servers (``FarmConfig.scaled_down``: the
    same groups, buffers, sets and load), the farm the teacher searched for it. A farm and its
    copy scaled by F then get the same table."""
    if config.n_servers <= TWIN_SERVERS:
        return config
    return config.scaled_down(max(1, config.n_servers // 100))


#: the name prefix of the small-farm expert's weights in a model file (see :func:`expert_prefix`)
SMALL_EXPERT = "small."


def chain_states_log10(config: FarmConfig) -> float:
    """log10 of the number of states of the farm's per-server chain, prod_k (B_k+1)^R_k: the
    size that decides whether the exact teacher reaches the farm. In log space and numpy only,
    not ``serverfarm_gym.baselines.solvers.ctmc.n_full_states``: the policy is built without the solvers'
    imports, and at 10,000 servers the exact count has thousands of digits."""
    return float(sum(g.count * np.log10(g.buffer + 1) for g in config.groups))


def expert_prefix(w: dict[str, np.ndarray], config: FarmConfig) -> str:
    """Which of a model's experts reads ``config``: :data:`SMALL_EXPERT` when the model has a
    small-farm expert and the farm's per-server chain has at most ``small.max_states`` states
    (the farms that expert was trained on: those its exact teacher reaches), else ``""`` (the
    main network). A fixed rule on the farm's size: nothing is measured."""
    cap = w.get(SMALL_EXPERT + "max_states")
    if cap is None:
        return ""
    limit = float(np.asarray(cap).reshape(-1)[0])
    if limit < 1.0:  # an expert for no farm
        return ""
    return SMALL_EXPERT if chain_states_log10(config) <= np.log10(limit) + 1e-9 else ""


#: the name prefix of the main network's members when it is an ensemble (``main.0.``, ...)
MAIN_ENSEMBLE = "main."


def members(w: dict[str, np.ndarray], prefix: str) -> list[str]:
    """The networks of the expert ``prefix`` (an ensemble whose scores are averaged): the main
    network (``prefix=""``) is one, ``""``, or an ensemble ``main.0.``, ``main.1.``, ...; the
    small-farm expert's are ``small.0.``, ``small.1.``, ..."""
    if not prefix:
        if "embed.0.weight" in w:
            return [""]
        prefix = MAIN_ENSEMBLE
    n = sum(k.startswith(prefix) and k.endswith(".embed.0.weight") for k in w)
    return [f"{prefix}{i}." for i in range(n)]


def merge_expert(
    base: dict[str, np.ndarray],
    nets: Sequence[dict[str, np.ndarray]],
    max_states: int,
    keep: bool = False,
) -> dict[str, np.ndarray]:
    """The base model's main network with ``nets`` as its small-farm expert (an ensemble,
    ``small.0.``, ``small.1.``, ...; an expert already in ``base`` is replaced, or with
    ``keep`` kept, ``nets`` written after its members) and the range it reads,
    ``small.max_states``."""
    first = len(members(base, SMALL_EXPERT)) if keep else 0
    drop = SMALL_EXPERT + "max_states" if keep else SMALL_EXPERT
    kept = {k: v for k, v in base.items() if not k.startswith(drop)}
    for i, net in enumerate(nets, start=first):
        kept |= {f"{SMALL_EXPERT}{i}.{k}": v for k, v in net.items()}
    return kept | {SMALL_EXPERT + "max_states": np.array([max_states], dtype=np.float32)}


def expert_scores(
    w: dict[str, np.ndarray], x: np.ndarray, group: np.ndarray, prefix: str = ""
) -> np.ndarray:
    """float64[T]: the mean of the scores of the expert's networks (:func:`members`)."""
    nets = members(w, prefix)
    return np.mean([forward(w, x, group, m) for m in nets], axis=0)


def _type_view(c: FarmConfig) -> tuple[np.ndarray, ...]:
    """Per group: load of the types allowed on it, their demand over its capacity, the share of
    types allowed, the share of its demand from types with no other group, and the (demand-
    weighted) log efficiency of those types' best other group relative to it."""
    A = c.availability.astype(np.float64)  # [J, K]
    lam = c.arrival_rates.mean(axis=0)
    cap = np.array([g.count * max(g.service_rate) for g in c.groups])
    eff = np.log(c.group_efficiency)
    K = c.n_groups
    type_cap = A @ cap
    type_load = lam / np.maximum(type_cap, 1e-12)
    demand = A.T @ lam
    types_load = (A.T @ (lam * type_load)) / np.maximum(demand, 1e-12)
    n_alt = A.sum(axis=1)
    excl = (A.T @ (lam * (n_alt == 1))) / np.maximum(demand, 1e-12)
    best_alt, no_alt = np.zeros(K), np.zeros(K)
    for k in range(K):
        w_tot = 0.0
        for j in np.flatnonzero(A[:, k]):
            others = [q for q in np.flatnonzero(A[j]) if q != k]
            if others:
                best_alt[k] += lam[j] * (max(eff[others]) - eff[k])
                w_tot += lam[j]
            else:
                no_alt[k] += lam[j]
        best_alt[k] = best_alt[k] / w_tot if w_tot > 0 else 0.0
        no_alt[k] = no_alt[k] / max(demand[k], 1e-12)
    over = np.log(np.maximum(demand / np.maximum(cap, 1e-12), 1e-3))
    return types_load, over, A.mean(axis=0), excl, best_alt, no_alt


def table_features(config: FarmConfig) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(features float32[T, F], group int64[T], level int64[T]) of the farm's usable entries
    (k, b), b < B_k, group by group (see the module docstring and :data:`FEATURES`)."""
    c = config
    K, B = c.n_groups, c.buffers
    eff = c.group_efficiency
    log_eff_rel = np.log(eff / eff.max())
    rank = np.argsort(np.argsort(-eff, kind="stable"), kind="stable") / max(K - 1, 1)
    mu, pw = c.mu_table, c.power_table
    peak = np.array([max(g.service_rate) for g in c.groups])
    count = np.array([g.count for g in c.groups], dtype=np.float64)
    cap = count * peak
    types_load, over, type_share, excl, best_alt, no_alt = _type_view(c)
    farm = [min(c.load, 2.0), np.log(c.n_servers) / 10.0, K / 8.0, c.n_job_types / 4.0]
    rows, gk, lb = [], [], []
    for k in range(K):
        sd = float(len(set(c.groups[k].service_rate)) > 1 or len(set(c.groups[k].busy_power)) > 1)
        for b in range(int(B[k])):
            n = b + 1
            e_n = mu[k, n] / max(pw[k, n] - pw[k, 0], 1e-9)
            d_mu, d_pw = mu[k, n] - mu[k, b], pw[k, n] - pw[k, b]
            # a constant-rate server's further jobs add neither speed nor power: no margin
            m_eff = d_mu / d_pw if d_pw > 1e-9 else 0.0
            rows.append([
                log_eff_rel[k], rank[k], b / B[k], n / B[k], B[k] / 8.0, float(n == B[k]),
                float(b == 0), np.log(e_n / eff.max()), np.log(mu[k, n] / peak[k]),
                np.log(peak[k] / peak.max()), pw[k, 0] / pw[k, B[k]], count[k] / count.sum(),
                cap[k] / cap.sum(), np.log(count[k]) / 10.0, min(types_load[k], 2.0), over[k],
                type_share[k], excl[k], best_alt[k], no_alt[k], sd, *farm,
                np.log(max(m_eff / eff.max(), 1e-3)), np.log(max(d_mu / peak[k], 1e-3)),
                float(d_mu <= 1e-12 and d_pw <= 1e-12),
            ])  # fmt: skip
            gk.append(k)
            lb.append(b)
    x = np.asarray(rows, dtype=np.float32)
    return x, np.asarray(gk, dtype=np.int64), np.asarray(lb, dtype=np.int64)


def _mlp(x: np.ndarray, w: dict[str, np.ndarray], name: str, n: int) -> np.ndarray:
    for i in range(n):
        x = x @ w[f"{name}.{i}.weight"].T + w[f"{name}.{i}.bias"]
        if i < n - 1:
            x = np.maximum(x, 0.0)
    return x


def n_blocks(w: dict[str, np.ndarray], prefix: str = "") -> int:
    """The number of attention blocks of the network ``prefix``."""
    return sum(k.startswith(prefix + "blocks.") and k.endswith(".qkv.weight") for k in w)


def _block(h: np.ndarray, w: dict[str, np.ndarray], name: str, heads: int) -> np.ndarray:
    """One attention block (the numpy twin of ``table_torch._Block``): multi-head
    self-attention over the entries, then a feed-forward layer, each residual."""
    T, W = h.shape
    d = W // heads
    qkv = (h @ w[name + "qkv.weight"].T + w[name + "qkv.bias"]).reshape(T, 3, heads, d)
    q, k, v = qkv[:, 0], qkv[:, 1], qkv[:, 2]
    a = np.einsum("thd,shd->hts", q, k) / np.float32(np.sqrt(d))
    a = np.exp(a - a.max(axis=2, keepdims=True))
    a /= a.sum(axis=2, keepdims=True)
    att = np.einsum("hts,shd->thd", a, v).reshape(T, W)
    h = h + att @ w[name + "o.weight"].T + w[name + "o.bias"]
    return h + _mlp(h, w, name + "ff", 2)


def forward(
    w: dict[str, np.ndarray], x: np.ndarray, group: np.ndarray, prefix: str = ""
) -> np.ndarray:
    """float64[T] scores of the tokens by the expert ``prefix`` (``""``: the main network;
    numpy, the same computation as the torch trainer's
    :class:`serverfarm_gym.agents.table_generalist.table_torch.TableNet`)."""
    K = int(group.max()) + 1
    width_in = w[prefix + "embed.0.weight"].shape[1]  # the expert reads the first features
    h = _mlp(x[:, :width_in].astype(np.float32), w, prefix + "embed", 2)
    h = np.maximum(h, 0.0)
    for i in range(n_blocks(w, prefix)):  # attention blocks over the entries (the experts)
        h = _block(h, w, f"{prefix}blocks.{i}.", int(w[prefix + "blocks.heads"].reshape(-1)[0]))
    cnt = np.bincount(group, minlength=K).astype(np.float32)[:, None]
    gsum = np.zeros((K, h.shape[1]), dtype=np.float32)
    np.add.at(gsum, group, h)
    z = np.concatenate([h, np.broadcast_to(h.mean(axis=0), h.shape), (gsum / cnt)[group]], axis=1)
    out = _mlp(z, w, prefix + "head", 2).astype(np.float64)  # [T, 2]: group score, level term
    gscore = np.zeros(K)
    np.add.at(gscore, group, out[:, 0])
    gscore /= cnt[:, 0]
    return gscore[group] + out[:, 1] + pas_prior(w, x, group, prefix)


def pas_prior(
    w: dict[str, np.ndarray], x: np.ndarray, group: np.ndarray, prefix: str = ""
) -> np.ndarray:
    """float64[T]: the expert's ``prior.scale`` times minus the token's group's PAS rank (0 =
    the most efficient group), read back from the ``eff_rank`` feature; zeros without a prior."""
    scale = float(np.asarray(w.get(prefix + "prior.scale", 0.0)).reshape(-1)[0])
    if scale == 0.0:
        return np.zeros(len(group))
    K = int(group.max()) + 1
    return -scale * np.rint(x[:, _EFF_RANK].astype(np.float64) * max(K - 1, 1))


def _tie_packing_runs(scores: np.ndarray, group: np.ndarray) -> np.ndarray:
    """The scores with every run of a group's consecutive levels that rises with the level and
    that no other entry falls inside set to one value (the run's top): the ties that the
    training labels wrote as "higher level first" (the dispatcher breaks ties by the smallest
    server index, which packs). No order with any other entry changes."""
    s = scores.astype(np.float64).copy()
    T = len(s)
    i = 0
    while i < T:
        j = i
        while j + 1 < T and group[j + 1] == group[i] and s[j + 1] > s[j]:
            j += 1
        while j > i:  # shrink the run until no other entry lies within its range
            lo, hi = s[i], s[j]
            others = np.ones(T, dtype=bool)
            others[i : j + 1] = False
            if not np.any(others & (s >= lo) & (s <= hi)):
                break
            j -= 1
        s[i : j + 1] = s[j]
        i = j + 1
    return s


def table_from_scores(
    config: FarmConfig, scores: np.ndarray, group: np.ndarray, level: np.ndarray
) -> np.ndarray:
    """float64[K, Bmax+1]: the scores at the usable entries (packing runs tied, see
    :func:`_tie_packing_runs`), below all of them elsewhere."""
    s = _tie_packing_runs(scores, group)
    t = np.full((config.n_groups, config.max_buffer + 1), float(s.min()) - 1.0)
    t[group, level] = s
    return t


def save_weights(weights: dict[str, np.ndarray], path: str | Path, **meta: Any) -> Path:
    """Write ``path`` (``.npz``) and its ``.json`` sidecar, each atomically; ValueError, and
    nothing written, when a weight is not finite."""
    p = Path(path).with_suffix(".npz")
    with np.errstate(over="ignore"):  # an overflow is reported below, by name
        arrays = {k: np.asarray(v, dtype=np.float32) for k, v in weights.items()}
    bad = _not_finite(arrays)  # in the stored precision: a float64 beyond float32's range too
    if bad:  # a model that would only be refused when read back: refuse it before writing
        raise ValueError(f"weights: {bad[0]} is not finite ({len(bad)} arrays); {p} not written")
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_name(f".{p.stem}.tmp.npz")
    np.savez(tmp, **arrays)
    tmp.replace(p)
    side = p.with_suffix(".json")
    tmp_side = side.with_name(f".{side.name}.tmp")
    tmp_side.write_text(json.dumps({"features": list(FEATURES), **meta}, indent=1, default=str))
    tmp_side.replace(side)
    return p


def load_weights(path: str | Path) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """(weights, sidecar) of a file written by :func:`save_weights`; ValueError naming the file
    when it is missing, foreign or not finite."""
    p = Path(path).with_suffix(".npz")
    side = p.with_suffix(".json")
    if not p.is_file() or not side.is_file():
        raise ValueError(
            f"model: {p} and its sidecar {side.name} are needed (written by "
            "serverfarm_gym.agents.table_generalist.table_train)"
        )
    meta = json.loads(side.read_text())
    feats = tuple(meta.get("features", ())) if isinstance(meta, dict) else ()
    if not feats or feats != FEATURES[: len(feats)]:
        raise ValueError(f"model: {side} does not list this version's table features")
    with np.load(p, allow_pickle=False) as z:
        w = {k: np.asarray(z[k], dtype=np.float32) for k in z.files}
    has_small = SMALL_EXPERT + "max_states" in w
    main = members(w, "")
    if not main:
        raise ValueError(f"model: {p} has no main network (embed.* or {MAIN_ENSEMBLE}0.embed.*)")
    experts = main + (members(w, SMALL_EXPERT) if has_small else [])
    if has_small and len(experts) == len(main):
        raise ValueError(f"model: {p} has {SMALL_EXPERT}max_states but no small-farm network")
    need = [f"{e}{n}.{i}.{t}" for e in experts for n in ("embed", "head") for i in (0, 1)
            for t in ("weight", "bias")]  # fmt: skip
    missing = [k for k in need if k not in w]
    if missing:
        raise ValueError(f"model: {p} lacks {missing}")
    for e in experts:
        if w[e + "embed.0.weight"].shape[1] > len(feats):
            raise ValueError(f"model: {p}'s {e or 'main '}expert reads more features than listed")
    known = re.compile(r"(embed|head)\.[01]\.(weight|bias)|prior\.scale|blocks\.heads"
                       r"|blocks\.\d+\.(qkv|o|ff\.[01])\.(weight|bias)")  # fmt: skip
    unknown = [k for k in w if k != SMALL_EXPERT + "max_states"
               and not any(k.startswith(e) and known.fullmatch(k[len(e):]) for e in experts)]  # fmt: skip
    if unknown:
        raise ValueError(f"model: {p} has weights this version does not read: {unknown[:4]}")
    singles = [e + n for e in experts for n in ("prior.scale", "blocks.heads")]
    for k in [*singles, SMALL_EXPERT + "max_states"]:
        if k in w and w[k].size != 1:
            raise ValueError(f"model: {p} has a {k} of {w[k].size} values, not 1")
    for e in experts:
        if n_blocks(w, e) and not w.get(e + "blocks.heads", np.zeros(1))[0] >= 1:
            raise ValueError(f"model: {p}'s {e or 'main '}network has attention blocks but no "
                             "blocks.heads (one number, >= 1)")  # fmt: skip
    if _not_finite(w):
        raise ValueError(f"model: {p} has non-finite weights")
    return w, meta


def _not_finite(weights: dict[str, np.ndarray]) -> list[str]:
    """The names of the arrays holding a NaN or an infinity (what neither reading nor writing
    a model accepts)."""
    return [k for k, v in weights.items() if not np.isfinite(v).all()]
