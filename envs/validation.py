"""Validation primitives shared by the farm format (``serverfarm_gym.envs.config``) and the geo format
(``serverfarm_gym.envs.geo``), and the limits that keep a valid scenario simulable and solvable.

Every check raises :class:`ConfigError` (a ``ValueError``) whose message starts with the field's
path (``groups[0] (slow).service_rate``) and says what would be accepted.

Limits (why they exist; the farm-wide ones are checked in ``serverfarm_gym.envs.config.farm_from_dict``):

* :data:`VALUE_MIN`, :data:`VALUE_MAX`: every non-zero rate, power, price and interval length lies
  in ``[1e-6, 1e6]``. Units are the user's choice and any farm can be rescaled into this range
  (the efficiency only changes by the scale factors); values outside it are almost always a unit
  slip. Within the range, the product of two values (rate x power in the objectives, rate x rate
  in the balance rows) lies in [1e-12, 1e12], far from float64 overflow in the simulator's
  integrals, and the LPs (exact optimum, relaxation bound, PDR; all solved by HiGHS) keep their
  coefficients inside HiGHS's default ``small_matrix_value`` (1e-9: smaller entries are treated
  as zero) and ``large_matrix_value`` (1e15: larger entries are treated as infinite). Outside
  it, ``service_rate: 1e300`` failed inside HiGHS and ``arrival_rate: 1e300`` never advanced the
  clock. A farm with service rates 1e-6 and 1e6 side by side simulates and solves, but see
  :data:`MAX_EPOCHS_PER_DURATION`.
* :data:`MAX_BUFFER`, :data:`MAX_LEVELS`: the per-level tables (K x (B+1)), the group-mode
  observation and action (sum_k B_k + K and sum_k B_k entries), Whittle's per-level recursions
  and above all the relaxation-bound LP (``sum_k (2 B_k + 1)`` variables, built row by row in
  Python; HiGHS time grows faster than linearly) all grow with the buffers: a buffer of 10^6 ran
  the bound LP for minutes at 3.8 GB, while sum_k B_k = 10,000 takes seconds. So one group holds at
  most 1,000 jobs per server (far beyond any modelled processor-sharing machine) and the farm
  at most 10,000 levels in all.
* :data:`MAX_SERVERS`, :data:`MAX_JOB_SLOTS`: the simulator keeps about ten int64/float64 arrays
  of length S, and with general job sizes one remaining-work slot per (server, buffer place),
  S x max B float64; 10^6 servers and 10^8 job slots (800 MB) are what one machine can hold
  next to the rest (100x the largest preset, ``large-10k``).
* :data:`MAX_OVERLOAD`: an arrival that finds all its groups full is blocked and the event loop
  draws the next event without returning; with type j arriving at rate lambda_j into groups whose
  total peak service rate is c_j, a decision costs about lambda_j / c_j events, so the loop ran
  forever at ``arrival_rate: 1e300``. A type may offer at most 1000x the capacity of its groups
  (blocking above 99.9%, no longer a dispatching problem), which bounds that cost.
* :data:`MAX_EPOCHS_PER_DURATION`: decision epochs are arrivals, and every window (warm-up,
  evaluation, the discount of a learner) is sized in mean job durations of the *slowest* group,
  ``FarmConfig.epochs_per_duration`` = total arrival rate / that group's peak service rate. With
  service rates 1e-6 and 1e6 side by side that is ~1e12 epochs per duration: every value lies in
  range and each piece runs, but no feasible run leaves the empty-farm transient, so simulated
  efficiencies (and their tight confidence intervals, which do not cover transient bias) are
  misleading. 1e7 epochs per duration (a 50-duration warm-up of 5e8 events, under a minute
  compiled) is the limit; ``large-10k`` has ~1.2e4, a homogeneous farm of 10^6 servers at load 1
  has 1e6.
* :data:`MAX_NAME_LENGTH`, :data:`MAX_DESCRIPTION_LENGTH`, :data:`MAX_INTERVALS`,
  :data:`MAX_SCHEDULE_ENTRIES`: names and descriptions must be strings (a ``null`` or a list is
  refused, not turned into ``"None"``) of at most 200 and 10,000 characters; they are checked
  before anything converts a value to text. YAML aliases let a file of a few hundred bytes hold
  a list of lists that *prints* as billions of items (``str()`` of it never returned), so no
  message shows a value it has not bounded first (:func:`shown`: a list or mapping is named by
  its type and length, a long string or a huge integer is cut). A schedule (``arrival_rate``,
  ``price``) has at most 100,000 intervals (as a geo scenario), and the per-interval tables of
  rates and prices (intervals x (job types + groups) numbers) at most 10^7 entries (80 MB).
* :data:`MIN_ARRIVALS_PER_INTERVAL`: in a time-varying scenario the loop stops at every interval
  boundary; with intervals much shorter than the time between arrivals it spends
  ``1 / (interval_length x total arrival rate)`` iterations per arrival, and the boundary index
  ``t / interval_length`` would pass 2^53 (where float64 stops counting) after about
  2^53 x that many arrivals. At least one arrival per 1000 intervals on average bounds both.
"""

from __future__ import annotations

import math
import reprlib
from collections.abc import Mapping
from typing import Any

import numpy as np

__all__ = [
    "MAX_BUFFER",
    "MAX_DESCRIPTION_LENGTH",
    "MAX_EPOCHS_PER_DURATION",
    "MAX_INTERVALS",
    "MAX_JOB_SLOTS",
    "MAX_LEVELS",
    "MAX_NAME_LENGTH",
    "MAX_OVERLOAD",
    "MAX_SCHEDULE_ENTRIES",
    "MAX_SERVERS",
    "MIN_ARRIVALS_PER_INTERVAL",
    "VALUE_MAX",
    "VALUE_MIN",
    "ConfigError",
    "check_keys",
    "count_argument",
    "integer",
    "is_sequence",
    "levels",
    "name_list",
    "number",
    "real_argument",
    "require",
    "schedule",
    "server_group_fields",
    "shown",
    "shown_items",
    "text",
]

VALUE_MIN = 1e-6
VALUE_MAX = 1e6
MAX_BUFFER = 1_000
MAX_LEVELS = 10_000
MAX_SERVERS = 1_000_000
MAX_JOB_SLOTS = 100_000_000
MAX_OVERLOAD = 1000.0
MAX_EPOCHS_PER_DURATION = 1e7
MIN_ARRIVALS_PER_INTERVAL = 1e-3
MAX_NAME_LENGTH = 200
MAX_DESCRIPTION_LENGTH = 10_000
MAX_INTERVALS = 100_000
MAX_SCHEDULE_ENTRIES = 10_000_000


class ConfigError(ValueError):
    """A scenario is invalid. The message names the offending field and how to fix it."""


_SHOWN_CHARS = 60


class _BoundedRepr(reprlib.Repr):
    """``reprlib`` with small limits: a few items of a few levels, whatever the container holds
    (integers go through :func:`shown`, whose ``repr`` cannot fail)."""

    def __init__(self) -> None:
        super().__init__()
        self.maxlevel, self.maxlist, self.maxtuple, self.maxdict = 2, 4, 4, 4
        self.maxstring = self.maxother = 30

    def repr_int(self, x: int, level: int) -> str:
        return shown(x)


def shown(v: Any) -> str:
    """A bounded rendering of a value for an error message. ``repr`` of a list built with YAML
    aliases can be billions of characters (it never returns) and ``repr`` of an integer past
    4,300 digits raises, so containers show a few items of a few levels and their length, and
    long strings and huge integers are cut."""
    if isinstance(v, (Mapping, list, tuple)):
        out = _BoundedRepr().repr(v if isinstance(v, (dict, list, tuple)) else dict(v))
        return out if len(v) <= 4 else f"{out} ({len(v):,} items)"
    if isinstance(v, str):
        if len(v) <= _SHOWN_CHARS:
            return repr(v)
        return f"{v[:_SHOWN_CHARS]!r}... ({len(v):,} characters)"
    if isinstance(v, (int, np.integer)) and not isinstance(v, bool):
        bits = abs(int(v)).bit_length()
        if bits > 200:  # repr would be over 60 digits (and fails past 4,300)
            return f"an integer of about {int(bits * math.log10(2)) + 1:,} digits"
        return repr(v)
    if v is None or isinstance(v, (bool, float, np.floating)):
        return repr(v)
    return f"a value of type {type(v).__name__}"


def shown_items(items: list[Any], n: int = 10) -> str:
    """The first ``n`` items of a list for a message (a farm may have 10,000 groups)."""
    head = ", ".join(shown(x) for x in items[:n])
    return f"[{head}{f', ... ({len(items):,} in all)' if len(items) > n else ''}]"


def text(v: Any, where: str, *, max_length: int = MAX_NAME_LENGTH) -> str:
    """A string of at most ``max_length`` characters (names, descriptions): anything else (a
    ``null``, a number, a list) is refused rather than converted, so nothing is renamed to
    ``"None"`` and no YAML alias expansion is ever printed."""
    if not isinstance(v, str):
        raise ConfigError(f"{where}: expected a string, got {shown(v)}; quote it if it is a name")
    if len(v) > max_length:
        raise ConfigError(
            f"{where}: {len(v):,} characters; at most {max_length:,} are allowed, got {shown(v)}"
        )
    return v


def is_sequence(v: Any) -> bool:
    """A list or tuple (what YAML/JSON lists become), not a string or a mapping."""
    return isinstance(v, (list, tuple))


def check_keys(d: Any, allowed: set[str], where: str) -> None:
    """``d`` is a mapping whose keys are all in ``allowed``."""
    if not isinstance(d, Mapping):
        raise ConfigError(f"{where}: expected a mapping, got {type(d).__name__}")
    unknown = sorted(shown(k) for k in set(d) - allowed)
    if unknown:
        listed = ", ".join(unknown[:10]) + (
            f" and {len(unknown) - 10:,} more" if len(unknown) > 10 else ""
        )
        raise ConfigError(
            f"{where}: unknown key(s) [{listed}]; allowed keys are {sorted(allowed)} "
            "(check the spelling)"
        )


def require(d: Mapping[str, Any], key: str, where: str) -> Any:
    if key not in d:
        raise ConfigError(f"{where}.{key}: missing (required)")
    return d[key]


def number(
    v: Any,
    where: str,
    *,
    positive: bool = False,
    nonneg: bool = False,
    bounded: bool = False,
) -> float:
    """A finite real number (bool refused). ``bounded``: a non-zero value lies in
    ``[VALUE_MIN, VALUE_MAX]`` in magnitude (rates, powers, prices; see the module docstring)."""
    if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)):
        raise ConfigError(f"{where}: expected a number, got {shown(v)}")
    try:
        x = float(v)
    except OverflowError:  # an integer beyond float64 (over 308 digits)
        x = math.inf if v > 0 else -math.inf
    if not math.isfinite(x):
        raise ConfigError(f"{where}: must be finite, got {shown(v)}")
    if positive and x <= 0:
        raise ConfigError(f"{where}: must be > 0, got {shown(v)}")
    if nonneg and x < 0:
        raise ConfigError(f"{where}: must be >= 0, got {shown(v)}")
    if bounded and x != 0 and not VALUE_MIN <= abs(x) <= VALUE_MAX:
        raise ConfigError(
            f"{where}: {shown(v)} is outside [{VALUE_MIN:g}, {VALUE_MAX:g}], the range the simulator "
            "and the LP solvers handle accurately; rescale the time or power unit of the "
            "whole scenario"
        )
    return x


def integer(v: Any, where: str, minimum: int, maximum: int | None = None) -> int:
    """An integer (an integral float such as ``3.0`` is accepted, bool refused) in range."""
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
        if isinstance(v, float) and v.is_integer():
            v = int(v)
        else:
            raise ConfigError(f"{where}: expected an integer, got {shown(v)}")
    if v < minimum:
        raise ConfigError(f"{where}: must be >= {minimum}, got {shown(v)}")
    if maximum is not None and v > maximum:
        raise ConfigError(f"{where}: must be <= {maximum:,}, got {shown(v)}")
    return int(v)


def levels(v: Any, n: int, where: str, *, positive: bool) -> tuple[float, ...]:
    """A scalar (same at every level) or a list of exactly ``n`` per-level values."""
    if is_sequence(v):
        if len(v) != n:
            raise ConfigError(
                f"{where}: a list must have one value per buffer level 1..buffer "
                f"(length {n}), got length {len(v)}"
            )
        return tuple(
            number(x, f"{where}[{i}]", positive=positive, bounded=True) for i, x in enumerate(v)
        )
    return (number(v, where, positive=positive, bounded=True),) * n


def schedule(v: Any, where: str, *, positive: bool) -> tuple[float, ...]:
    """A scalar or a non-empty list, one value per time interval (zeros allowed in a list)."""
    if is_sequence(v):
        if len(v) == 0:
            raise ConfigError(f"{where}: an empty list; give a number or one value per interval")
        if len(v) > MAX_INTERVALS:
            raise ConfigError(
                f"{where}: {len(v):,} intervals; at most {MAX_INTERVALS:,} are allowed"
            )
        vals = tuple(number(x, f"{where}[{i}]", nonneg=True, bounded=True) for i, x in enumerate(v))
        if positive and sum(vals) <= 0:
            raise ConfigError(f"{where}: at least one interval must have a positive value")
        return vals
    return (number(v, where, positive=positive, bounded=True),)


def name_list(v: Any, where: str, what: str) -> list[str]:
    """A non-empty list of names (strings), e.g. the groups a job type may use."""
    if not is_sequence(v) or len(v) == 0:
        raise ConfigError(f"{where}: must be a non-empty list of {what}, got {shown(v)}")
    for i, x in enumerate(v):
        if not isinstance(x, str):
            raise ConfigError(
                f"{where}[{i}]: expected a name (a string), got {shown(x)}; give a flat list of "
                f"{what}"
            )
    return list(v)


def server_group_fields(
    g: Mapping[str, Any], w: str
) -> tuple[int, tuple[float, ...], tuple[float, ...], float, int]:
    """Validate the server fields shared by farm groups and geo cluster groups.

    Returns ``(count, service_rate, busy_power, idle_power, buffer)``; ``w`` names the group in
    error messages.
    """
    buf = integer(require(g, "buffer", w), f"{w}.buffer", 1, MAX_BUFFER)
    count = integer(require(g, "count", w), f"{w}.count", 1, MAX_SERVERS)
    mu = levels(require(g, "service_rate", w), buf, f"{w}.service_rate", positive=True)
    eps = levels(require(g, "busy_power", w), buf, f"{w}.busy_power", positive=True)
    eps0 = number(require(g, "idle_power", w), f"{w}.idle_power", nonneg=True, bounded=True)
    for n, e in enumerate(eps, start=1):
        if e <= eps0:
            raise ConfigError(
                f"{w}.busy_power: must exceed idle_power ({eps0}) at every level, "
                f"got {e} at level {n}"
            )
    return count, mu, eps, eps0, buf


# ---------------------------------------------------------------------------------------------
# function arguments (the env's constructor): plain ValueError naming the argument
# ---------------------------------------------------------------------------------------------
def real_argument(value: Any, name: str, *, minimum: float, strict: bool) -> float:
    """A finite real number ``> minimum`` (``strict``) or ``>= minimum``; bool refused."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise ValueError(f"{name}: expected a number, got {value!r} ({type(value).__name__})")
    x = float(value)
    ok = x > minimum if strict else x >= minimum
    if not (math.isfinite(x) and ok):
        raise ValueError(
            f"{name}: must be a finite number {'>' if strict else '>='} {minimum:g}, got {value!r}"
        )
    return x


def count_argument(value: Any, name: str, *, minimum: int = 0) -> int:
    """An integer ``>= minimum`` (Python or NumPy integer; an integral float is refused too,
    since a count given as ``1.5`` is a mistake, not a request to truncate)."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise ValueError(f"{name}: expected an integer, got {value!r} ({type(value).__name__})")
    if value < minimum:
        raise ValueError(f"{name}: must be >= {minimum}, got {value!r}")
    return int(value)


SLEEP_KEYS = ("power", "setup_rate", "setup_power", "idle_timeout_rate")


def sleep_fields(v: Any, where: str) -> tuple[float, float, float, float]:
    """``(power, setup_rate, setup_power, idle_timeout_rate)`` of a group's ``sleep`` mapping
    (dynamic right-sizing): the power of an off server, the rate gamma of its exponential setup,
    the power during setup, and the rate alpha at which an idle server switches off
    (``inf``, or the string ``"inf"``: at once; 0: never). All four are required."""
    if not isinstance(v, Mapping):
        raise ConfigError(f"{where}: expected a mapping with keys {list(SLEEP_KEYS)}, got {v!r}")
    check_keys(v, set(SLEEP_KEYS), where)
    for key in SLEEP_KEYS:
        require(v, key, where)
    power = number(v["power"], f"{where}.power", nonneg=True, bounded=True)
    setup_rate = number(v["setup_rate"], f"{where}.setup_rate", positive=True, bounded=True)
    setup_power = number(v["setup_power"], f"{where}.setup_power", nonneg=True, bounded=True)
    alpha = v["idle_timeout_rate"]
    if isinstance(alpha, str) and alpha.strip().lower() in ("inf", ".inf", "infinity"):
        alpha = math.inf
    if isinstance(alpha, (float, np.floating)) and math.isinf(alpha) and alpha > 0:
        return power, setup_rate, setup_power, math.inf
    alpha = number(alpha, f"{where}.idle_timeout_rate", nonneg=True, bounded=True)
    return power, setup_rate, setup_power, alpha
