"""An emulated link and emulated PS tasks for pushes sent outside a step: the
:class:`~tf_hetero.hooks.PushHook` :func:`tf_hetero.emulate` gives a strategy whose workers
buffer gradients and push them later (H-PS's local accumulation).

A push's bytes first cross the worker's emulated link (profile ``link=``: payload bytes x
microseconds per byte, on the worker), then each emulated PS task serves its part of the
payload (profile ``ps_mbps``), queued with every other request it serves, as a step's own
push is (:mod:`tf_hetero.emulation.ps`).
"""

from __future__ import annotations

from typing import Sequence

import tensorflow as tf

from tf_hetero.emulation.sleep import sleep_op
from tf_hetero.hooks import PushHook
from tf_hetero.policies.placement import ps_index

__all__ = ["EmulatedPush"]


class EmulatedPush(PushHook):
    """``link_us_per_byte``: microseconds per byte of each worker's link (``None``: no
    emulated link); ``servers``: the :class:`~tf_hetero.emulation.ps.EmulatedServers`
    (``None``: PS tasks not emulated)."""

    def __init__(self, link_us_per_byte: Sequence[float] | None, servers=None):
        self.link_us_per_byte = tuple(link_us_per_byte or ())
        self.servers = servers

    def wait(self, worker, variables, payload_bytes, deps, sent):
        if any(self.link_us_per_byte):  # the bytes leave the worker once its link carried them
            total = sum(payload_bytes)
            link_us = tf.constant([int(round(u * total)) for u in self.link_us_per_byte],
                                  tf.int64)
            with tf.control_dependencies(deps + sent):
                deps = [sleep_op(tf.gather(link_us, worker))]
        if self.servers is not None:  # then each PS serves its part of the payload
            per_ps = [0] * self.servers.num_ps
            for v, n in zip(variables, payload_bytes):  # read at trace time: a move re-traces
                p = ps_index(v.device)
                if p is not None and p < len(per_ps):
                    per_ps[p] += n
            deps = deps + self.servers.serve_all(per_ps, after=deps + sent)
        return deps
