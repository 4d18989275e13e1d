"""What both PPO trainers and the generalist share: checkpoints and atomic writes
(``checkpoints``), the run directory and its checks (``run_dir``, ``run_checks``), safe loading of
models and sidecars (``artefacts``), settings derived from the farm (``farm_settings``), the paired
model selection (``selection``) and the run report (``run_report``). Imports nothing else of
``agents``."""
