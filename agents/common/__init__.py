"""What both PPO trainers and the generalist share: checkpoints and atomic writes
(``checkpoints``), the run directory and its checks (``run_dir``, ``run_checks``), safe loading of
models and sidecars (``artefacts``), settings derived from the farm (``farm_settings``) and the
run report (``run_report``); the paired model selection is ``serverfarm_gym.evaluation.paired``. Imports nothing
else of ``agents``."""
