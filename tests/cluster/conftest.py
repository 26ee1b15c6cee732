"""Fixtures of the cluster tests."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def chiefs(tmp_path_factory):
    """Forks the failure scenarios' chief processes from one process that imported
    TensorFlow once (:mod:`support.zygote`); ended with the module."""
    from support.zygote import Zygote

    zygote = Zygote(str(tmp_path_factory.mktemp("zygote") / "zygote.log"))
    yield zygote
    zygote.close()
