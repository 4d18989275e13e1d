"""Studies behind the documentation's other numbers (the generalists, learning from scratch, latency,
geo routing, the PPO trainer's settings): ``python -m experiments.studies.NAME``."""
