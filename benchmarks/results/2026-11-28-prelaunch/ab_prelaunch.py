# Frozen at tag rejected/prelaunch: run with `git checkout rejected/prelaunch`; it imports
# tf-hetero internals of that tag, which may have moved or changed since. (The tag holds
# 65ac43f with prelaunch=True applied, which this script needs.) Results and command:
# README.md beside it.
"""A/B of runtime/prelaunch.py's gate: registers `plslow` (polls every 2 ms instead of 0.5),
`plnowait` (the same graph edges on a gate that never waits: its tasks read the model before
the previous apply lands, staleness 1 unrecorded) in this process, then runs the tf-hetero
command line with the arguments given."""
import sys
import tensorflow as tf
from tf_hetero.strategies import registry
from tf_hetero.strategies.runtime import prelaunch
from tf_hetero.tools import cli

class NoWait(prelaunch.ApplyGate):
    def wait(self, code):
        return tf.identity(tf.constant(True))

def variant(name, gate_factory):
    e = registry.entry("hpsprelaunch")
    def create(resolver, arg, _e=e, **o):
        s = _e.create(resolver, arg, **o)
        t = s.coordinator.tracer
        with tf.init_scope():
            t._gate = gate_factory(s)
        return s
    registry.register(name, create=create, default_arg=e.default_arg, arg=e.arg_meaning,
                      updates=e.micro_batches_per_update, help=name + " (A/B)",
                      sized=e.sized, config=e.config)

variant("plslow", lambda s: prelaunch.ApplyGate(s, s.config.stall_timeout_s, poll_us=2000))
variant("plnowait", lambda s: NoWait(s, s.config.stall_timeout_s))
sys.exit(cli.main(sys.argv[1:]))
