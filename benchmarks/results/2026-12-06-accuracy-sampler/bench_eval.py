"""`tf-hetero bench` with the accuracy sampler's interval taken from EVAL_S: the A/B of the
sampler's own cost (this folder's README). Frozen at `29dc0d7`, the sampler that evaluated
while fit ran (its constructor's signature changed after).

    EVAL_S=3600 python bench_eval.py bench ARGS...     # no evaluation during the fit
"""
import os
import sys

from tf_hetero.tools import benchrow, cli

_orig = benchrow._AccuracySampler.__init__


def _init(self, model, x, y, interval):
    _orig(self, model, x, y, float(os.environ.get("EVAL_S", interval)))


benchrow._AccuracySampler.__init__ = _init
sys.exit(cli.main(sys.argv[1:]))
