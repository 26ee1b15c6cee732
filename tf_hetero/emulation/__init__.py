"""Heterogeneity on one machine: profiles (:mod:`~tf_hetero.emulation.profile`, pure),
emulated device time inside each worker's step (:mod:`~tf_hetero.emulation.device`, TF) and
emulated PS tasks, shared servers with a service rate (:mod:`~tf_hetero.emulation.ps`, TF).
``emulate`` is imported lazily: the profile grammar needs no TensorFlow."""

from tf_hetero.emulation.profile import PROFILE_ENV, Profile, ProfileError

__all__ = ["Profile", "ProfileError", "PROFILE_ENV", "emulate"]


def __getattr__(name):
    if name == "emulate":
        from tf_hetero.emulation.device import emulate

        return emulate
    raise AttributeError(name)
