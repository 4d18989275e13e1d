"""agents.generalist.table_train's validation: exact scores against PAS, the prior's calibration,
and its usage errors."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from agents.generalist.table_train import TableNet, Validation, main  # noqa: E402


def test_the_pas_prior_alone_scores_as_pas() -> None:
    val = Validation(3)
    assert all(c.job_size.is_exponential for c in val.farms)
    net = TableNet(8, prior=1.0)
    zero = {k: np.zeros_like(v) for k, v in net.numpy_weights().items()}
    zero["prior.scale"] = np.ones(1, np.float32)
    # exact efficiencies of the same decisions: equal, so every farm counts as at least PAS
    assert val.score(zero) == (1.0, 0.0, 0.0)


def test_calibration_keeps_the_best_prior_by_the_key() -> None:
    val = Validation(3, floor=0.5)
    torch.manual_seed(0)
    net = TableNet(8, prior=1.0)
    scores = {}
    for p in (1.0, 4.0, 16.0):
        net.prior = p
        scores[p] = val.score(net.numpy_weights())
    net.prior = 1.0
    val.calibrate(net, (1.0, 4.0, 16.0))
    best = max(scores, key=lambda p: val.key(scores[p]))
    assert val.key(net.validation_score) == val.key(scores[best])
    assert net.validation_score == scores[net.prior]


@pytest.mark.parametrize(
    "bad",
    [
        ["--prior", "-1"],
        ["--exact-farms", "-2"],
        ["--floor", "-1"],
        ["--prior-factors", "1,x"],
        ["--prior-factors", "0"],
    ],
)
def test_bad_options_are_usage_errors(bad: list[str]) -> None:
    with pytest.raises(SystemExit) as e:
        main(["--farms", "0", "--small-farms", "0", *bad])
    assert e.value.code == 2
