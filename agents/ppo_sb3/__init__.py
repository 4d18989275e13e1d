"""The sb3-contrib MaskablePPO route of ``train.py --trainer sb3``: the training job
(``serverfarm_gym.agents.ppo_sb3.train``), the reward PPO learns from (``serverfarm_gym.agents.ppo_sb3.wrappers``) and the
evaluation, checkpoint and logging callbacks (``serverfarm_gym.agents.ppo_sb3.callbacks``)."""
