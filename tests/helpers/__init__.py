"""Helpers shared by the test modules, one module per what they help (fixtures live in
``tests/conftest.py``, and no test module imports another):

* :mod:`tests.helpers.stats`: batch runs and confidence intervals, the only way a statistical
  test compares numbers;
* :mod:`tests.helpers.farms`: seeded random farms, scenario dicts and states;
* :mod:`tests.helpers.exact`: farms with known exact optima and farms at the solvers' size limits;
* :mod:`tests.helpers.sleep`: farms with right-sizing and their exact per-server chain;
* :mod:`tests.helpers.invariants`: the simulator's bookkeeping identities;
* :mod:`tests.helpers.env`: the env's documented observations, masks and dispatch rules;
* :mod:`tests.helpers.scripts`: exit codes and run directories of the scripts.
"""
