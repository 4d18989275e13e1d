"""train.py's default trainer (masked PPO, agents/ppo/run.py): the run directory, the
report's lines that CI greps, the PAS-clone floor of the best model, paired simulated
evaluations, resume (history kept, a lower total refused, a damaged checkpoint skipped) and
Ctrl-C (the latest update's parameters saved, exit 130).

One small base run (tiny, 512 timesteps, rollouts of 2 x 64) is copied for each resume test.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
import shutil
from pathlib import Path

import pytest

pytest.importorskip("sb3_contrib")

import torch

import train
from serverfarm_gym.agents.common.checkpoints import list_checkpoints, read_evaluations
from serverfarm_gym.agents.ppo import PPOAgent, read_sidecar
from serverfarm_gym.agents.ppo.ppo import PPO
from tests.helpers.scripts import best_sidecar, exit_code, resume_run

FAST = [
    "--n-envs", "2", "--n-steps", "64", "--batch-size", "64", "--n-epochs", "2",
    "--net-arch", "16,16", "--eval-freq", "128", "--no-progress-bar", "--no-tensorboard",
    "--hyperparams", "none", "--seed", "3",
    # a clone start (tiny's derived start is a random network): these tests check the clone's
    # mechanics; a later --init replaces it
    "--init", "best-priority",
]  # fmt: skip

#: the lines .ci/run greps in the report (grep -E; the model path differs here): the start, then
#: either PPO's kept model or the start kept, and the comparisons
CI_LINES = [
    r"^  start \([a-z-]+ (clone|init)\) +efficiency [0-9.]+ \(exact\)$",
    r"^  (PPO \(best model, [0-9,]+ steps\) +efficiency [0-9.]+ \(exact\)"
    r"|kept: the start \([a-z-]+ (clone|init)\); PPO found no improvement)$",
    r"^  PAS +efficiency [0-9.]+ \(exact\)$",
    r"^  optimum +efficiency [0-9.]+ \(exact\)$",
    r"^  (PPO|start) vs PAS: [+-][0-9.]+%   gap to optimum: [0-9.]+%",
    r"^  model: .*best_model.zip",
]


@pytest.fixture(scope="module")
def base_run(tmp_path_factory) -> tuple[Path, dict, str]:
    out = tmp_path_factory.mktemp("ppo") / "run"
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        summary = train.main([*FAST, "--output-dir", str(out), "--total-timesteps", "512",
                              "--checkpoint-freq", "256"])  # fmt: skip
    return out, summary, buf.getvalue()


@pytest.fixture
def run_copy(base_run, tmp_path) -> Path:
    return Path(shutil.copytree(base_run[0], tmp_path / "run"))


def test_default_trainer_writes_the_run_directory(base_run):
    out, summary, _ = base_run
    assert summary["trainer"] == "ppo" and summary["timesteps"] == 512
    for name in ("args.json", "summary.json", "final_model.zip", "final_model.json",
                 "best_model.zip", "best_model.json", "evaluations.jsonl", "references.json",
                 "learning_curve.png"):  # fmt: skip
        assert (out / name).exists(), name
    steps = [h["timesteps"] for h in read_evaluations(out / "evaluations.jsonl")]
    assert steps == [0, 128, 256, 384, 512]
    # the start's clone (step 0) is checkpointed too: a resume never clones again
    assert [s for _, s in list_checkpoints(out / "checkpoints")] == [512, 256, 0]
    assert json.loads((out / "args.json").read_text())["trainer"] == "ppo"
    side = read_sidecar(out / "best_model.zip")
    assert side["trainer"] == "ppo" and side["train_args"]["init"] == "best-priority"
    assert (out / "start_model.zip").exists()
    agent = PPOAgent.load(out)  # the run directory loads its best model
    assert agent.config.name == "tiny" and agent.action_mode == "server"
    # server actions train a network tied over exchangeable servers (--server-network tied)
    assert side["policy"]["network_mode"] == "group" and agent.network_mode == "group"
    assert side["ppo_config"]["action_mode"] == "group"
    d = summary["derived_settings"]
    assert set(d["values"]) <= set(d["reasons"]) and d["overridden"]["n_envs"] == 2


def test_report_prints_the_lines_ci_greps(base_run):
    out, summary, printed = base_run
    lines = printed.splitlines()
    for pattern in CI_LINES:
        assert any(re.search(pattern, line) for line in lines), pattern
    who = "PPO (best model)" if summary["kept"] == "ppo" else "the start (best-priority clone)"
    assert any(line.startswith(f"  verdict: {who} vs PAS") for line in lines)
    # a step-0 model is the start, never a PPO result
    assert (summary["kept"] == "start") == (summary["best"]["timesteps"] == 0)
    assert summary["start"]["teacher"] == "best-priority"
    assert (summary["ppo_change"] is None) == (summary["kept"] == "start")
    assert read_sidecar(out / "best_model.zip")["started_from"] == "best-priority"
    assert any(line.startswith("  action_mode = server  (4 servers <= 5") for line in lines)


def test_best_model_starts_at_the_clone_and_is_the_best_measured(base_run):
    """Exact evaluations: the step-0 model (the clone of best-priority, --init) is the
    first best, and the kept model is the best ever measured (replaced only by a strictly better
    one)."""
    from serverfarm_gym.baselines.registry import make_policy

    out, summary, _ = base_run
    hist = read_evaluations(out / "evaluations.jsonl")
    assert hist[0]["replaced_best"] and hist[0]["method"] == "exact"
    table = make_policy("best-priority", "tiny").search.value
    assert hist[0]["efficiency"] == pytest.approx(table, rel=1e-3)  # a faithful clone
    best = best_sidecar(out)
    assert best["eval_efficiency"] == max(h["efficiency"] for h in hist)
    assert summary["best"]["efficiency"] == pytest.approx(best["eval_efficiency"], rel=1e-12)
    assert summary["best"]["vs_pas"]["method"] == "exact"
    assert summary["verdict"].endswith(("better than PAS", "equal to PAS", "below PAS"))


def test_simulated_evaluation_is_paired_with_pas(tmp_path):
    """--no-eval-exact: every evaluation is a vector-env simulation paired with PAS on the same
    seeds, the final one on fresh seeds with twice the replications."""
    out = tmp_path / "sim"
    summary = train.main([*FAST, "--scenario", "small-1", "--no-eval-exact", "--init", "random",
                          "--output-dir", str(out), "--total-timesteps", "256",
                          "--eval-epochs", "300", "--eval-replications", "3",
                          "--final-eval-epochs", "300"])  # fmt: skip
    hist = read_evaluations(out / "evaluations.jsonl")
    assert [h["timesteps"] for h in hist] == [0, 128, 256]
    for h in hist:
        assert h["method"] == "simulation" and h["vs_pas"]["method"] == "paired"
        assert h["vs_pas"]["n"] == 3
    vs = summary["best"]["vs_pas"]
    assert vs["method"] == "paired" and vs["n"] == 6
    assert vs["verdict"] in ("better", "worse", "not significantly different")
    assert summary["best"]["gap_to_pas_pct"] == vs["gap_pct"]
    assert summary["references"]["pas"]["method"] == "simulation"


def test_resume_keeps_the_history_and_the_best_model(run_copy):
    before = read_evaluations(run_copy / "evaluations.jsonl")
    best_before = best_sidecar(run_copy)["eval_efficiency"]
    summary = resume_run(train.main, run_copy, 768)
    after = read_evaluations(run_copy / "evaluations.jsonl")
    assert after[: len(before)] == before
    assert [h["timesteps"] for h in after] == [0, 128, 256, 384, 512, 640, 768]
    assert (
        best_sidecar(run_copy)["eval_efficiency"]
        == max(h["efficiency"] for h in after)
        >= best_before
    )
    assert summary["resumed_from"] == 512 and summary["timesteps"] == 768


def test_evaluations_after_the_checkpoint_are_superseded(run_copy):
    before = read_evaluations(run_copy / "evaluations.jsonl")
    (run_copy / "checkpoints" / "ckpt_512_steps.zip").unlink()
    summary = resume_run(train.main, run_copy, 640)
    assert summary["resumed_from"] == 256
    after = read_evaluations(run_copy / "evaluations.jsonl")
    superseded = read_evaluations(run_copy / "evaluations_superseded.jsonl")
    assert [h["timesteps"] for h in after] == [0, 128, 256, 384, 512, 640]
    assert after[:3] == before[:3] and superseded == before[3:]


def test_resume_below_the_checkpoint_is_refused(run_copy, capsys):
    summary_before = (run_copy / "summary.json").read_text()
    assert exit_code(lambda: resume_run(train.main, run_copy, 256)) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("train.py: error: --resume: --total-timesteps 256 is below the 512")
    assert "\n" not in err
    assert (run_copy / "summary.json").read_text() == summary_before
    assert (
        resume_run(train.main, run_copy, 512)["timesteps"] == 512
    )  # an equal total finishes the report


def test_a_damaged_checkpoint_falls_back_to_the_previous_one(run_copy, capsys):
    newest = run_copy / "checkpoints" / "ckpt_512_steps.zip"
    newest.write_bytes(newest.read_bytes()[:1000])  # cut short
    summary = resume_run(train.main, run_copy, 640)
    assert f"warning: checkpoint {newest} cannot be loaded" in capsys.readouterr().err
    assert summary["resumed_from"] == 256 and summary["timesteps"] == 640


def test_no_loadable_checkpoint_is_an_error(run_copy, capsys):
    for path, _ in list_checkpoints(run_copy / "checkpoints"):
        path.write_bytes(b"not a zip")
    assert exit_code(lambda: resume_run(train.main, run_copy, 640)) == 2
    assert "no checkpoint in" in capsys.readouterr().err


@pytest.mark.parametrize("where", ["rollout", "update"])
def test_ctrl_c_saves_the_latest_update_and_exits_130(where, base_run, tmp_path, capsys,
                                                      monkeypatch):  # fmt: skip
    """Interrupted in the rollout after 256 timesteps or at the end of the update that follows
    it, the run saves the parameters it had at 256: those of the uninterrupted base run's
    checkpoint at 256 (same seed, deterministic CPU training)."""
    if where == "rollout":
        original = PPO.collect

        def collect(self, buf):
            if self.num_timesteps >= 256:
                raise KeyboardInterrupt
            return original(self, buf)

        monkeypatch.setattr(PPO, "collect", collect)
    else:
        original_update = PPO.update

        def update(self, buf, progress):
            stats = original_update(self, buf, progress)
            if self.num_timesteps >= 384:  # the parameters have moved on from those at 256
                raise KeyboardInterrupt
            return stats

        monkeypatch.setattr(PPO, "update", update)
    out = tmp_path / "run"
    argv = [*FAST, "--output-dir", str(out), "--total-timesteps", "512",
            "--checkpoint-freq", "1024", "--progress-bar"]  # fmt: skip
    assert exit_code(lambda: train.main(argv)) == 130
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("train.py: interrupted; saved checkpoint") and "--resume" in err
    assert [s for _, s in list_checkpoints(out / "checkpoints")] == [256, 0]
    a = PPO.load(out / "checkpoints" / "ckpt_256_steps.zip")
    b = PPO.load(base_run[0] / "checkpoints" / "ckpt_256_steps.zip")
    assert a.num_timesteps == b.num_timesteps == 256
    for (k, x), (_, y) in zip(a.policy.state_dict().items(), b.policy.state_dict().items(),
                              strict=True):  # fmt: skip
        assert torch.equal(x, y), k
    monkeypatch.undo()
    summary = resume_run(train.main, out, 384)
    assert summary["resumed_from"] == 256 and summary["timesteps"] == 384


def test_server_network_mlp_trains_one_output_per_server(tmp_path):
    out = tmp_path / "mlp"
    summary = train.main([*FAST, "--server-network", "mlp", "--output-dir", str(out),
                          "--total-timesteps", "128"])  # fmt: skip
    side = read_sidecar(out / "best_model.zip")
    assert side["policy"]["network_mode"] == "server" and side["policy"]["n_actions"] == 4
    assert PPOAgent.load(out).view is None
    assert summary["best"]["vs_pas"]["method"] == "exact"


def test_init_clones_the_named_policy(tmp_path):
    """--init best-priority: the step-0 model is a clone of the searched table (on tiny it is
    optimal, exactly: docs/model.md), so training starts at its efficiency, not PAS's."""
    out = tmp_path / "bp"
    summary = train.main([*FAST, "--init", "best-priority", "--output-dir", str(out),
                          "--total-timesteps", "128"])  # fmt: skip
    hist = read_evaluations(out / "evaluations.jsonl")
    optimum = summary["references"]["optimum"]
    assert hist[0]["efficiency"] == pytest.approx(optimum, rel=1e-3)
    assert hist[0]["efficiency"] > summary["references"]["pas"]["efficiency"]
    assert read_sidecar(out / "best_model.zip")["train_args"]["init"] == "best-priority"


def test_train_scale_trains_on_the_twin_and_serves_the_farm(tmp_path):
    """--train-scale 4 on tiny x4: the network trains on tiny (the twin: same spaces), every
    evaluation and the saved models are the x4 farm's; a checkpoint resumes on the twin."""
    import yaml

    from serverfarm_gym.envs.scenarios import load_scenario

    farm = load_scenario("tiny").scaled(4, name="tiny-x4")
    path = tmp_path / "tiny-x4.yaml"
    path.write_text(yaml.safe_dump(farm.to_dict(), sort_keys=False))
    out = tmp_path / "twin"
    summary = train.main([*FAST, "--scenario", str(path), "--action-mode", "group",
                          "--train-scale", "4", "--output-dir", str(out),
                          "--total-timesteps", "256", "--eval-epochs", "300",
                          "--eval-replications", "2", "--final-eval-epochs", "300"])  # fmt: skip
    side = read_sidecar(out / "best_model.zip")
    assert side["scenario"] == farm.to_dict()
    assert [g["count"] for g in side["train_scenario"]["groups"]] == [2, 2]
    assert PPOAgent.load(out).config.n_servers == 16
    assert summary["scenario"] == "tiny-x4" and summary["best"]["vs_pas"]["n"] == 4
    ckpt = list_checkpoints(out / "checkpoints")[0][0]
    assert PPO.load(ckpt).config.n_servers == 4  # resumes training on the twin


def test_cost_start_on_a_time_varying_twin(tmp_path, capsys):
    """--objective cost on a time-varying farm trained on its twin: the start candidates
    (searched table, PAS, price-aware PAS, which follows the interval and has no single table)
    are measured on the farm itself."""
    import yaml

    from serverfarm_gym.envs.config import farm_from_dict
    from serverfarm_gym.envs.scenarios import load_scenario

    d = load_scenario("tiny").to_dict()
    d["interval_length"] = 2.0
    d["groups"][1]["price"] = [1.0, 3.0]
    farm = farm_from_dict(d).scaled(4, name="tiny-tv-x4")
    path = tmp_path / "tv.yaml"
    path.write_text(yaml.safe_dump(farm.to_dict(), sort_keys=False))
    summary = train.main([*FAST, "--scenario", str(path), "--action-mode", "group",
                          "--train-scale", "4", "--objective", "cost", "--init", "best-priority",
                          "--output-dir", str(tmp_path / "run"), "--total-timesteps", "128",
                          "--eval-epochs", "300", "--eval-replications", "2",
                          "--final-eval-epochs", "300"])  # fmt: skip
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("start:"))
    assert "best-priority" in line and "pas-price" in line
    assert summary["started_from"] in ("best-priority", "pas", "pas-price")


def test_train_scale_needs_a_group_network(capsys):
    assert exit_code(lambda: train.main(["--train-scale", "2"])) == 2  # tiny: server actions
    assert "--action-mode group" in capsys.readouterr().err


def test_cost_objective_is_simulated_and_has_no_energy_references(tmp_path, capsys):
    """--objective cost: rewards and evaluations are jobs per unit of energy cost; the exact
    solver (energy) is not used, and the optimum and bound (energy) are not reported."""
    out = tmp_path / "cost"
    summary = train.main([*FAST, "--objective", "cost", "--output-dir", str(out),
                          "--total-timesteps", "128", "--eval-epochs", "300",
                          "--eval-replications", "2", "--final-eval-epochs", "300"])  # fmt: skip
    assert summary["objective"] == "cost"
    refs = summary["references"]
    assert refs["optimum"] is None and "cost objective" in refs["optimum_note"]
    assert refs["upper_bound"] is None
    hist = read_evaluations(out / "evaluations.jsonl")
    assert all(h["method"] == "simulation" and h["vs_pas"]["method"] == "paired" for h in hist)
    assert "objective cost" in capsys.readouterr().out
    assert exit_code(lambda: train.main(["--objective", "money"])) == 2


def test_simulated_best_priority_start_is_measured_against_pas(tmp_path, capsys):
    """--init best-priority on a simulated evaluation: the searched table and PAS are measured
    on the evaluator's seeds first and the stronger one is cloned (never a start below PAS by
    that measure); the run's summary names it."""
    out = tmp_path / "start"
    summary = train.main([*FAST, "--scenario", "small-1", "--no-eval-exact", "--init",
                          "best-priority", "--output-dir", str(out), "--total-timesteps", "128",
                          "--eval-epochs", "300", "--eval-replications", "3",
                          "--final-eval-epochs", "300"])  # fmt: skip
    printed = capsys.readouterr().out
    line = next(x for x in printed.splitlines() if x.startswith("start: measured against PAS"))
    assert "best-priority" in line and line.endswith(f"cloning {summary['started_from']}")
    assert summary["started_from"] in ("best-priority", "pas")


def test_tied_checkpoint_resumes_as_a_tied_network(run_copy):
    trainer = PPO.load(list_checkpoints(run_copy / "checkpoints")[0][0])
    assert trainer.cfg.action_mode == "group"
    assert read_sidecar(list_checkpoints(run_copy / "checkpoints")[0][0])["action_mode"] == "server"


def test_args_file_before_server_network_replays_one_output_per_server(base_run, tmp_path):
    saved = json.loads((base_run[0] / "args.json").read_text())
    del saved["server_network"]  # a PPO run from before the option: per-server MLP
    path = tmp_path / "args.json"
    path.write_text(json.dumps(saved))
    args = train.resolve_args(["--args-file", str(path), "--output-dir", str(tmp_path / "r")]).args
    assert args.server_network == "mlp"


def test_options_of_the_other_trainer_are_refused(capsys):
    assert exit_code(lambda: train.main(["--trainer", "sb3", "--server-network", "tied"])) == 2
    assert "PPO trainer" in capsys.readouterr().err
    assert exit_code(lambda: train.main(["--init", "whittle-ish"])) == 2
    assert "best-priority" in capsys.readouterr().err
    assert exit_code(lambda: train.main(["--server-network", "cnn"])) == 2
    assert "--server-network" in capsys.readouterr().err
    assert exit_code(lambda: train.main(["--reward", "expected"])) == 2
    assert "--trainer sb3" in capsys.readouterr().err
    assert exit_code(lambda: train.main(["--trainer", "sb3", "--init", "pas"])) == 2
    assert "PPO trainer" in capsys.readouterr().err
    assert exit_code(lambda: train.main(["--trainer", "tf"])) == 2
    assert "--trainer" in capsys.readouterr().err


def test_confirmation_keeps_the_start_when_it_measures_higher(tmp_path, capsys):
    """Simulated farms: when the kept model is not the start, both are measured again on the
    final window with confirmation seeds and the higher one is the best model. Here a uniform
    random policy plays the kept model against a PAS clone (the start), then the reverse."""
    from types import SimpleNamespace

    from serverfarm_gym.agents.ppo import sidecar_path
    from serverfarm_gym.agents.ppo.verdict import START_MODEL, confirm_against_start
    from serverfarm_gym.envs.scenarios import load_preset

    runs = {}
    for init in ("pas", "random"):
        out = tmp_path / init
        train.main([*FAST, "--scenario", "small-1", "--no-eval-exact", "--init", init,
                    "--output-dir", str(out), "--total-timesteps", "128", "--eval-epochs", "300",
                    "--eval-replications", "3", "--final-eval-epochs", "2000"])  # fmt: skip
        runs[init] = out
    out = runs["pas"]
    a = SimpleNamespace(**json.loads((out / "args.json").read_text()))
    cfg = load_preset("small-1")

    def place(src: Path, dst: Path) -> None:
        shutil.copyfile(src, dst)
        shutil.copyfile(sidecar_path(src), sidecar_path(dst))

    best = out / "best_model.zip"
    place(runs["random"] / START_MODEL, best)
    agent, steps, rec = confirm_against_start(a, cfg, out, best, PPOAgent.load(best), 7, 10)
    assert agent.meta.get("timesteps") == 0
    assert rec["kept"] == "start" and rec["kept_vs_start"]["diff"] < 0 and steps == 0
    assert best.read_bytes() == (out / START_MODEL).read_bytes()
    assert "keeping the start" in capsys.readouterr().out
    # the reverse: best_model is now the PAS clone; make the start the random policy
    place(runs["random"] / START_MODEL, out / START_MODEL)
    before = best.read_bytes()
    _, steps, rec = confirm_against_start(a, cfg, out, best, PPOAgent.load(best), 7, 10)
    assert rec["kept"] == "best" and rec["kept_vs_start"]["diff"] > 0 and steps == 7
    assert best.read_bytes() == before
