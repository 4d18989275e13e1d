"""experiments/studies/unseen_farms.py without training: which random farms it keeps, and the
table row it reads off a run's summary.json (a threshold never reached is shown as such)."""

from __future__ import annotations

from experiments.studies import unseen_farms as uf


def test_it_keeps_the_exactly_solvable_farms_where_pas_is_below_the_optimum() -> None:
    kept = uf.unseen_farms(range(1003, 1005), min_pas_gap=0.3)
    # random_farm(1003): two servers where PAS is optimal; 1004: PAS 2.7% below the optimum
    assert [f.name for f, _ in kept] == ["random-1004"]
    assert 2.0 < kept[0][1] < 3.5


def test_the_row_reads_the_learning_entry_of_the_summary() -> None:
    farm = uf.unseen_farms(range(1004, 1005), min_pas_gap=0.3)[0][0]
    summary = {
        "learn_cpu_s": 55.2,
        "learning": {"steps_to": {"0.99": 8192, "0.999": None}, "evaluated_to": 196608,
                     "kept_share": 0.99841, "final_share": 0.9981},
    }  # fmt: skip
    cells = [c.strip() for c in uf.row(farm, 2.73, summary).strip("|").split("|")]
    assert cells == ["random-1004", "6", "1", "97.27%", "8,192", "not in 196,608", "99.841%",
                     "99.810%", "55"]  # fmt: skip
