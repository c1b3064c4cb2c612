"""Physics engines: ``num_envs`` simulations of one MuJoCo model, stepped together.

* :class:`vlmrm_fast.sim.BatchSimulator` (``physics="batch"``): CPU MuJoCo on its batch thread pool,
  float64, the task's own solver (gymnasium's humanoid: PGS with RK4).
* :class:`vlmrm_fast.physics.warp.WarpSimulator` (``physics="warp"``): MuJoCo Warp, every world's
  state on one device (a GPU; Warp's CPU backend for testing), float32, Newton or CG only.

:func:`vlmrm_fast.physics.solver.with_solver` gives a model another constraint solver, so that
both engines can run the same one (docs/physics.md gives the differences, measured).
"""
