"""The exact solvers: numbers computed from a farm's model, never a policy that acts in the env.

* :mod:`~serverfarm_gym.baselines.solvers.ctmc`: the exact per-server chain (any static rule's efficiency,
  blocking and response time); :mod:`~serverfarm_gym.baselines.solvers.aggregated`: the chain aggregated by
  exchangeable servers, the state space of the optimum.
* :mod:`~serverfarm_gym.baselines.solvers.efficiency_optimum`: the exact optimum (LP, policy iteration);
  :mod:`~serverfarm_gym.baselines.solvers.slo_optimum`: the exact optimum under a mean-response-time SLO (the
  constrained LP); :mod:`~serverfarm_gym.baselines.solvers.bounds`: the relaxation upper bound.
* :mod:`~serverfarm_gym.baselines.solvers.sleep_chain`: the exact chains and optimum of farms with right-sizing.
* :mod:`~serverfarm_gym.baselines.solvers.pdr`: the power-demand routing LPs (the network-flow optimiser of
  geo-distributed farms) and their Pareto frontier, over the model of
  :mod:`~serverfarm_gym.baselines.solvers.pdr_model`.

What stays a policy in ``baselines``: the classes that play a solution through
``Policy.predict`` (:class:`serverfarm_gym.baselines.optimal_policy.OptimalPolicy` and ``SLOOptimalPolicy``,
:class:`serverfarm_gym.baselines.pdr_pas.PDRPASPolicy`, which routes by the PDR plan and dispatches by PAS) and
the searches whose result is a baseline rather than a certified optimum
(:mod:`serverfarm_gym.baselines.best_priority`, :mod:`serverfarm_gym.baselines.sleep_search`: local searches over static
orders, each candidate evaluated exactly by a solver here).

The solvers import no policy module except PAS's table (``ctmc.evaluate_policy(config, "pas")``);
the ``baselines`` contract of pyproject.toml keeps it so.
"""
