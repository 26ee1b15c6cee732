"""A carrier whose loop has no op on the PS: the PS side is one non-inlined call per
iteration (enqueue this step's done record, then dequeue the next token)."""
import numpy as np
import tensorflow as tf
from tf_hetero.strategies.runtime import carriers as C
from variant_pack import Pack

NOINLINE = {"_noinline": True}

class Xchg(Pack):
    def _carrier_fn(self, lane, handles, *args):
        ps, done = self._ps, self._done

        @tf.function(experimental_attributes=NOINLINE)
        def take(queue):
            with tf.device(ps):
                return tf.raw_ops.QueueDequeueV2(handle=queue, component_types=[tf.int64])[0]

        @tf.function(experimental_attributes=NOINLINE)
        def give_take(queue, record, *flat):
            with tf.device(ps):
                pushed = done.enqueue([record] + list(flat))
                with tf.control_dependencies([pushed]):
                    return tf.raw_ops.QueueDequeueV2(handle=queue, component_types=[tf.int64])[0]

        with tf.device(ps):
            queue = tf.gather(handles, lane)
        token = take(queue)
        steps = tf.constant(0, tf.int64)
        while token != C.STOP:
            tf.autograph.experimental.set_loop_options(parallel_iterations=1)
            with tf.control_dependencies([token]):
                started = tf.timestamp()
                outputs = self._step(token, *args)
            flat = [tf.convert_to_tensor(o) for o in tf.nest.flatten(outputs)]
            with tf.control_dependencies(flat):
                ended = tf.timestamp()
            record = tf.stack([lane, token, tf.bitcast(started, tf.int64), tf.bitcast(ended, tf.int64)])
            token = give_take(queue, record, *flat)
            steps = steps + 1
        return steps
