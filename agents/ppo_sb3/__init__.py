"""The sb3-contrib MaskablePPO route of ``train.py --trainer sb3``: the training job
(``agents.ppo_sb3.train``), the reward PPO learns from (``agents.ppo_sb3.wrappers``) and the
evaluation, checkpoint and logging callbacks (``agents.ppo_sb3.callbacks``)."""
