"""The simulator: the real round engine, policies and components on virtual time, against a
cost model fitted from measured runs, with an optional statistical model (numpy SGD), so a
strategy can be studied at 1000 workers. Pure Python and NumPy: no TensorFlow
(docs/SIMULATOR.md).

- :mod:`~tf_hetero.sim.events` -- the event loop (the engine's clock);
- :mod:`~tf_hetero.sim.costs` -- the cost model and the profile's device times;
- :mod:`~tf_hetero.sim.dispatcher` -- the simulated TF side (workers, chief, PS);
- :mod:`~tf_hetero.sim.learner` -- the statistical model;
- :mod:`~tf_hetero.sim.run` -- one simulated bench row;
- :mod:`~tf_hetero.sim.calibrate` -- the cost model fitted from a bench JSON;
- :mod:`~tf_hetero.sim.validate` -- simulated against measured runs;
- :mod:`~tf_hetero.sim.sweep` -- efficiency and time to target versus size and heterogeneity;
- ``tf-hetero sim`` is :mod:`tf_hetero.tools.sim` (a command: the library never imports the tools).
"""

from tf_hetero.sim.costs import CostModel, load
from tf_hetero.sim.run import Simulation, simulate_run

__all__ = ["CostModel", "load", "Simulation", "simulate_run"]
