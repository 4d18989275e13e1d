"""Scripts that reproduce the paper's claims (docs/results.md): ``python -m experiments.paper.NAME``."""
