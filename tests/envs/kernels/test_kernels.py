"""The kernel package itself: compiled calls bounded in blocked arrivals (Ctrl-C in long runs),
the disk cache keyed on the package's source, and the generated layout module."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from serverfarm_gym.envs import kernels as kn
from serverfarm_gym.envs.config import FarmConfig, farm_from_dict
from serverfarm_gym.envs.kernels import layout, schema
from serverfarm_gym.envs.simulator import FarmSimulator
from tests.helpers.farms import pas_table

REPO = Path(__file__).resolve().parents[3]


def overloaded_farm(size: str = "exponential") -> FarmConfig:
    """Two servers, buffer 1, offered 500x their capacity: ~99.8% of arrivals are blocked, so a
    decision epoch costs ~500 events (validation allows up to 1000x)."""
    return farm_from_dict({
        "groups": [{"name": "g", "count": 2, "service_rate": 1.0, "busy_power": 2.0,
                    "idle_power": 1.0, "buffer": 1}],
        "job_types": [{"name": "j", "arrival_rate": 1000.0, "groups": ["g"], "job_size": size}],
    })  # fmt: skip


def _state(sim: FarmSimulator) -> tuple:
    s = sim.stats()
    return (s.time, s.work, s.energy, s.cost, s.arrivals.tolist(), s.accepted.tolist(),
            s.blocked.tolist(), s.departures, s.epochs, sim.occ.tolist(),
            sim.rng.bit_generator.state["state"]["state"])  # fmt: skip


@pytest.mark.parametrize("general", [False, True], ids=["fast", "general"])
def test_blocked_budget_returns_within_the_chunk(general: bool) -> None:
    """One compiled call stops after its budget of blocked arrivals (``max_blocked``), far short of the epochs
    asked for, with exactly that many more blocked arrivals counted."""
    c = overloaded_farm()
    sim = FarmSimulator(c, seed=3, force_general=general)
    sim.run(100, table=pas_table(c))
    before = sim.stats()
    done = kn.packed_run(*sim.packed, kn.POLICY_PRIORITY, pas_table(c), 1_000_000, True,
                         sim.kind_tag, 10_000)  # fmt: skip
    after = sim.stats()
    assert 0 < done < 200, done  # ~500 blocked arrivals per epoch: ~20 epochs in 10,000
    assert int((after.blocked - before.blocked).sum()) == 10_000
    assert after.epochs - before.epochs == done


@pytest.mark.parametrize(
    ("size", "general", "policy"),
    [("exponential", False, "priority"), ("exponential", False, "random"),
     ("exponential", True, "priority"), ("deterministic", True, "random")],
)  # fmt: skip
def test_bounded_calls_give_the_same_trajectory(size: str, general: bool, policy: str) -> None:
    """``run`` and ``next_epoch`` split into many short compiled calls (a budget of 7 blocked
    arrivals) follow the default budget's trajectory bit for bit, on an overloaded farm and on
    paper-100 (blocking is rare there)."""
    for c in (overloaded_farm(size), _paper()):
        sims = []
        for budget in (FarmSimulator.blocked_per_call, 7):
            sim = FarmSimulator(c, seed=11, force_general=general)
            sim.blocked_per_call = budget
            table = pas_table(c) if policy == "priority" else None
            sim.run(3_000, policy, table)
            for _ in range(50):  # step by step, as the env's Python path does
                j = sim.next_epoch()
                sim.assign(int(np.flatnonzero(sim.server_mask(j))[0]))
            sim.run(2_000, policy, table)
            sims.append(_state(sim))
        assert sims[0] == sims[1], c.name


def _paper() -> FarmConfig:
    from serverfarm_gym.envs.scenarios import load_scenario

    return load_scenario("paper-100")


_SIGINT_SCRIPT = textwrap.dedent(
    """
    import signal
    import sys
    import numpy as np
    from serverfarm_gym.envs.config import farm_from_dict
    from serverfarm_gym.envs.simulator import FarmSimulator

    # Python leaves SIGINT ignored when it starts ignored (a background job of a shell): restore
    # the handler that raises KeyboardInterrupt, as in any interactive run
    signal.signal(signal.SIGINT, signal.default_int_handler)

    c = farm_from_dict({  # as overloaded_farm(): 500x the capacity of two servers
        "groups": [{"name": "g", "count": 2, "service_rate": 1.0, "busy_power": 2.0,
                    "idle_power": 1.0, "buffer": 1}],
        "job_types": [{"name": "j", "arrival_rate": 1000.0, "groups": ["g"]}],
    })
    table = np.ones((1, 2))
    sim = FarmSimulator(c, seed=0)
    sim.run(10, table=table)  # load (or compile) the kernels
    print("running", flush=True)
    try:
        sim.run(10**12, table=table)  # ~5e14 events: days
    except KeyboardInterrupt:
        print("interrupted", sim.stats().epochs, flush=True)
        sys.exit(3)
    print("finished", flush=True)
    """
)


def test_sigint_stops_a_long_run() -> None:
    """A real SIGINT to a process inside a long ``FarmSimulator.run`` on a farm that blocks almost
    every arrival raises KeyboardInterrupt (before the bounded calls, one compiled call of the
    1,000,000-epoch chunk was ~5e8 events and ignored Ctrl-C). The generous limits are for a
    loaded machine, not a timing assertion: the call returns every ~0.1 s."""
    proc = subprocess.Popen(
        [sys.executable, "-c", _SIGINT_SCRIPT],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )
    try:
        assert proc.stdout.readline().strip() == "running", proc.stderr.read()
        time.sleep(1.0)  # well inside the long run
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 3, (proc.returncode, out, err[-2000:])
    assert out.startswith("interrupted"), out


# ---------------------------------------------------------------------------------------------
# the disk cache is keyed on the package's source
# ---------------------------------------------------------------------------------------------
_CALLEE_SCRIPT = textwrap.dedent(
    """
    import numba
    from serverfarm_gym.envs import kernels as kn
    from serverfarm_gym.envs.kernels import layout
    from serverfarm_gym.envs.config import farm_from_dict
    from serverfarm_gym.envs.simulator import FarmSimulator

    c = farm_from_dict({
        "groups": [{"name": "g", "count": 2, "service_rate": 1.0, "busy_power": 2.0,
                    "idle_power": 1.0, "buffer": 2}],
        "job_types": [{"name": "j", "arrival_rate": 1.0, "groups": ["g"]}],
    })
    sim = FarmSimulator(c, seed=0)  # an empty farm
    sim.next_epoch()  # packed_run: re-sums W (recompute_rates), stops at the first arrival
    hits = sum(kn.packed_run.stats.cache_hits.values())
    print(float(sim._fs[layout.WRATE]), hits, numba.config.CACHE_DIR,
          kn.packed_run._cache._cache_path, sep="|")
    """
)


@pytest.mark.slow  # compiles packed_run twice in fresh processes (~30 CPU-s)
def test_editing_a_callee_invalidates_the_cache(tmp_path: Path) -> None:
    """numba indexes a cached function by the stamp of its own file; the package's dispatchers
    cache in a directory keyed on all of its source (serverfarm_gym.envs.kernels.cache). In a copy of the
    project: compile and cache ``packed_run``; reload it from the cache in a fresh process; edit
    ``recompute_rates`` (dispatch.py, called by packed.py's ``packed_run``) to add 1 to W; a
    fresh process must see the new W (a stale cache would print the old)."""
    root = tmp_path / "proj"
    (root / "envs").mkdir(parents=True)
    for item in (REPO / "envs").iterdir():
        if item.name == "__pycache__":
            continue
        if item.is_dir():
            shutil.copytree(item, root / "envs" / item.name,
                            ignore=shutil.ignore_patterns("__pycache__"))  # fmt: skip
        else:
            shutil.copy2(item, root / "envs" / item.name)
    if (REPO / "scenarios").is_dir():
        shutil.copytree(REPO / "scenarios", root / "scenarios")
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_CACHE_DIR"}
    env["PYTHONPATH"] = str(root)

    def run() -> tuple[float, int, str]:
        out = subprocess.run(
            [sys.executable, "-c", _CALLEE_SCRIPT], cwd=root, env=env, capture_output=True,
            text=True, check=False, timeout=1200,
        )  # fmt: skip
        assert out.returncode == 0, out.stderr[-3000:]
        w, hits, user_dir, where = out.stdout.strip().splitlines()[-1].split("|")
        assert user_dir == "", "the package must restore numba.config.CACHE_DIR"
        return float(w), int(hits), where

    w0, hits0, dir0 = run()  # compiles and caches
    assert (w0, hits0) == (0.0, 0)
    assert Path(dir0).is_relative_to(root / "envs" / "kernels" / "__pycache__"), dir0
    w1, hits1, dir1 = run()  # loads it from the cache
    assert (w1, hits1, dir1) == (w0, 1, dir0)
    src = root / "envs" / "kernels" / "dispatch.py"
    text = src.read_text()
    old = "    fs[WRATE] = w\n"
    assert text.count(old) == 1
    src.write_text(text.replace(old, "    fs[WRATE] = w + 1.0\n"))
    w2, hits2, dir2 = run()
    assert w2 == 1.0, "a stale cached packed_run ignored the edit of its callee"
    assert (hits2, dir2 != dir0) == (0, True)


# ---------------------------------------------------------------------------------------------
# the layout is declared once (envs/kernels/schema.py) and layout.py generated from it
# ---------------------------------------------------------------------------------------------
def test_layout_module_is_generated_from_the_schema() -> None:
    """The committed envs/kernels/layout.py is exactly what the schema generates (after editing
    the schema: ``python -m serverfarm_gym.envs.kernels.schema``)."""
    assert schema.LAYOUT_FILE.read_text() == schema.generate(), (
        "envs/kernels/layout.py differs from the schema: run python -m serverfarm_gym.envs.kernels.schema"
    )


def test_python_views_match_the_kernels_layout() -> None:
    """Every field view the Python side derives from the schema has the shape and dtype the
    kernels' ``unpack`` gives it, and the slot constants are the generated ones."""
    for general in (False, True):
        sim = FarmSimulator(_paper(), seed=0, force_general=general)
        sim.run(1_000, table=pas_table(sim.config))
        views = schema.simulator_views(*sim.packed)
        c = sim.config
        assert np.array_equal(views["OCC"], sim.occ)
        assert views["HSIZE"].shape == (c.n_groups, c.max_buffer + 1)
        assert views["HDATA"].dtype == np.int32 and views["HPOS"].shape == (c.n_servers,)
        assert views["JOBS"].shape == ((c.n_servers if general else 0), c.max_buffer)
        assert int(views["HSIZE"].sum()) == c.n_servers  # every server at exactly one level
        assert int(sim.packed[0][kn.H_ILEN]) == len(sim.packed[0])
    for name, slot in schema.SIM.items():
        assert getattr(layout, name) == slot, name


def test_env_tables_must_all_be_given() -> None:
    with pytest.raises(ValueError, match="itables"):
        schema.pack_env_buffers({}, {"ACTR": np.zeros(1)}, {}, {})
