# Frozen at commit cd8dae5: run with `git checkout cd8dae5`; it imports tf-hetero internals of
# that commit, which may have moved or changed since. Results and command: README.md beside
# it.
"""tf-hetero bench with the chief's accuracy sampling every EVAL_S seconds (default 0.5):
does sampling held-out accuracy on the chief slow the synchronous rows more than stock PSS?

    EVAL_S=5 python ab_eval.py bench --strategies pss,hps --workers 4 --ps 2 \
        --profile "base_ms=100;slow=3:4" --tasks 800 --repeats 2
"""
import functools, os, sys
from tf_hetero.tools import bench, cli

bench.BenchConfig = functools.partial(bench.BenchConfig, eval_interval_s=float(os.environ.get("EVAL_S", "0.5")))
sys.exit(cli.main(sys.argv[1:]))
