"""experiments/studies/unseen_farms.py without training: which random farms it keeps, and the
table row it reads off the runs' summary.json (a threshold never reached is shown as such)."""

from __future__ import annotations

from experiments.studies import unseen_farms as uf


def test_it_keeps_the_exactly_solvable_farms_where_pas_is_below_the_optimum() -> None:
    kept = uf.unseen_farms(range(1003, 1005), min_pas_gap=0.3)
    # random_farm(1003): two servers where PAS is optimal; 1004: PAS 2.7% below the optimum
    assert [f.name for f, _ in kept] == ["random-1004"]
    assert 2.0 < kept[0][1] < 3.5


def test_the_row_reads_the_learning_entry_of_each_run() -> None:
    farm = uf.unseen_farms(range(1004, 1005), min_pas_gap=0.3)[0][0]

    def run(steps, kept, final, cpu):
        return {"learn_cpu_s": cpu, "learning": {"steps_to": {"0.99": 2048, "0.999": steps},
                                                 "kept_share": kept, "final_share": final}}  # fmt: skip

    line, hit = uf.row(
        farm, 2.73, [run(30720, 0.99984, 0.9998, 50.0), run(None, 0.9978, 0.9952, 60.0)]
    )
    cells = [c.strip() for c in line.strip("|").split("|")]
    assert hit == 1
    assert cells == ["random-1004", "6", "1", "97.27%", "1/2", "30,720, -", "99.780%", "99.520%",
                     "55"]  # fmt: skip
