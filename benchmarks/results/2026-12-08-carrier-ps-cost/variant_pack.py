"""Variant carrier loops for the PS-cost probe (VARIANT env): 'pack' packs (lane, token,
started, ended) into one int64[4] on the worker and keeps the loop counter on the PS."""
import os
import numpy as np
import tensorflow as tf
from tf_hetero.strategies.runtime import carriers as C

class Pack(C.Carriers):
    pass

if True:
    orig_init = C.Carriers.__init__
    def __init__(self, coordinator, step, args=(), **kw):
        orig_init(self, coordinator, step, args, **kw)
        specs = tf.nest.flatten(self.signature)
        with tf.device(self._ps):
            self._done = tf.queue.FIFOQueue(C._TOKEN_CAPACITY * self.num_lanes,
                                            [tf.int64] + [s.dtype for s in specs],
                                            [[4]] + [s.shape for s in specs])
        self._close_fn = C._close_function(self._handles, self._done, self._ps)
    Pack.__init__ = __init__

    def _carrier_fn(self, lane, handles, *args):
        with tf.device(self._ps):
            queue = tf.gather(handles, lane)
            steps = tf.constant(0, tf.int64)
        while tf.constant(True):
            tf.autograph.experimental.set_loop_options(parallel_iterations=1)
            with tf.device(self._ps), tf.control_dependencies([steps]):
                token = tf.raw_ops.QueueDequeueV2(handle=queue, component_types=[tf.int64])[0]
            if token == C.STOP:
                break
            with tf.control_dependencies([token]):
                started = tf.timestamp()
                outputs = self._step(token, *args)
            flat = [tf.convert_to_tensor(o) for o in tf.nest.flatten(outputs)]
            with tf.control_dependencies(flat):
                ended = tf.timestamp()
            record = tf.stack([lane, token, tf.bitcast(started, tf.int64), tf.bitcast(ended, tf.int64)])
            with tf.device(self._ps):
                pushed = self._done.enqueue([record] + flat)
                with tf.control_dependencies([pushed]):
                    steps = steps + 1
        return steps
    Pack._carrier_fn = _carrier_fn

    def collect(self, count, timeout_s):
        import time
        from tf_hetero import tfcompat
        with tfcompat.coordinator.own_executor():
            values = self._done.dequeue_many(count)
        rec = values[0].numpy()
        lanes = rec[:, 0]
        np.subtract.at(self._out, lanes, 1)
        return C.DoneRecords(lanes, rec[:, 1], rec[:, 2].view(np.float64), rec[:, 3].view(np.float64),
                             tf.nest.pack_sequence_as(self.signature, values[1:]))
    Pack.collect = collect
