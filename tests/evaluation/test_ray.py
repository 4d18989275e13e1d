"""Ray backend: the same evaluation on a local Ray instance gives the same report as in-process.

Skipped when Ray is not installed (``pip install "ray[default]"``).
"""

from __future__ import annotations

import pytest

ray = pytest.importorskip("ray")

import evaluate as evaluate_cli  # noqa: E402
from serverfarm_gym.evaluation import evaluate  # noqa: E402

pytestmark = pytest.mark.ray

DETERMINISTIC_KEYS = ("scenario", "optimum", "upper_bound", "policies", "seeds", "skipped")


@pytest.fixture(scope="module")
def local_ray():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        yield
    finally:
        ray.shutdown()


def test_ray_matches_local(local_ray, tmp_path):
    kw = {
        "policies": ["pas", "jsq", "random", "optimal"],
        "replications": 3,
        "horizon": 1_000,
        "progress": False,
    }
    local = evaluate("tiny", workers=1, **kw)
    remote = evaluate("tiny", use_ray=True, **kw)
    assert remote["backend"]["kind"] == "ray"
    for key in DETERMINISTIC_KEYS:
        assert local[key] == remote[key], key
    # the CLI flag, on the already running instance
    out = tmp_path / "r.json"
    assert evaluate_cli.main(["tiny", "--policies", "jsq", "--replications", "2", "--horizon",
                              "500", "--ray", "--json", str(out), "--quiet"]) == 0  # fmt: skip
    assert out.exists()
