"""Commands: the CLI (:mod:`~tf_hetero.tools.cli`), the demo and the benchmark. Nothing in
the library imports this package."""
