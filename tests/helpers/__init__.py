"""Helpers shared by the test modules, one module per what they help (fixtures live in
``tests/conftest.py``, and no test module imports another):

* :mod:`tests.helpers.stats`: batch runs and confidence intervals, the only way a statistical
  test compares numbers;
* :mod:`tests.helpers.farms`: seeded random farms, scenario dicts and states;
* :mod:`tests.helpers.exact`: small farms with known exact optima, for the exact solvers;
* :mod:`tests.helpers.invariants`: the simulator's bookkeeping identities;
* :mod:`tests.helpers.env`: the env's documented observations, masks and dispatch rules;
* :mod:`tests.helpers.scripts`: exit codes and run directories of the scripts.
"""
