"""The suite's fixtures and its order (helpers that are not fixtures: tests/support/).

Cluster tests start real TensorFlow servers: separate OS processes through the real launcher,
or in-process servers, which live until the process exits. The in-process tests share one
cluster per test process (:func:`inprocess_cluster`), started after every other test of that
process has run (:class:`_Order`); under pytest-xdist the groups of
:func:`pytest_collection_modifyitems` decide which worker runs what.
"""

from __future__ import annotations

import os
import sys

import pytest

# Quiet TensorFlow's C++ logging in this process and in the processes the tests start.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# One RPC per eager enqueue instead of one stream per remote task: stalled calls wait on that
# stream. Measured: the compatibility module alone 941 s streaming, 567 s without; the full
# suite 3654 s -> 3575 s, with stalls of ~130 s left (docs/TF_INTERNALS.md, "Where the suite's
# time goes"). TensorFlow's own dynamic-cluster tests set the same.
os.environ.setdefault("TF_ENABLE_EAGER_CLIENT_STREAMING_ENQUEUE", "False")


@pytest.fixture
def quiet_env():
    env = dict(os.environ)
    env["TF_CPP_MIN_LOG_LEVEL"] = "2"
    env.pop("TF_CONFIG", None)
    return env


@pytest.fixture(scope="session")
def inprocess_cluster():
    """One in-process cluster (3 workers, 2 PS) for every test that trains on it: each test
    builds its own strategy on it (a strategy reconnects the process to the cluster).

    In-process servers cannot be stopped. Starting another in-process cluster after this one
    has trained (tests/strategies/test_stock_pss.py did, when it ran after it) hung fit in the
    new cluster: every test that uses this fixture runs after every test that does not
    (:class:`_Order`)."""
    import tf_hetero

    _shared_started.append(True)
    return tf_hetero.LocalCluster(3, 2, processes=False).start()


_shared_started: list = []  # not empty once this process started the shared cluster


@pytest.fixture(scope="module")
def own_inprocess_cluster():
    """Starts an in-process cluster of the module's own: ``own_inprocess_cluster(workers, ps,
    **kwargs)`` -> the started LocalCluster. Refused (the test fails at once, instead of
    hanging in fit) if the shared cluster already started in this process: under pytest-xdist
    run with ``--dist loadgroup``, whose scheduler (below) starts such tests first."""
    import tf_hetero

    def start(workers, ps, **kwargs):
        if _shared_started:
            pytest.fail("an in-process cluster of its own after the shared one hangs fit: "
                        "run the in-process tests with --dist loadgroup (make test)")
        return tf_hetero.LocalCluster(workers, ps, processes=False, **kwargs).start()

    return start


def _uses_shared_cluster(item) -> bool:
    return "inprocess_cluster" in getattr(item, "fixturenames", ())


def _uses_own_cluster(item) -> bool:
    return "own_inprocess_cluster" in getattr(item, "fixturenames", ())


#: xdist groups (``--dist loadgroup``): FIRST holds the tests that start an in-process cluster
#: of their own and the shared-cluster tests that name no other group; ``inprocess-NAME`` a
#: shared-cluster module marked ``inprocess("NAME")``; ``cluster:MODULE`` a module of
#: multi-process cluster tests (their servers are other processes); ``pure:MODULE`` any other.
FIRST = "inprocess"
#: The pure tests marked ``tensorflow`` (they import it), wherever they are: one group.
TENSORFLOW = "pure:tensorflow"


def _group(item) -> str:
    mark = item.get_closest_marker("inprocess")
    if mark is not None and mark.args:
        return f"inprocess-{mark.args[0]}"
    if mark is not None:
        return FIRST
    module = item.nodeid.split("::", 1)[0]
    if item.get_closest_marker("cluster"):
        return f"cluster:{module}"
    if item.get_closest_marker("tensorflow"):
        return TENSORFLOW  # one group: one worker imports TensorFlow (~7 s), not both
    return f"pure:{module}"


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """Marks every test that runs servers inside the test process ``inprocess``: those that
    use the shared cluster or start one of their own (:func:`own_inprocess_cluster`,
    tests/strategies/test_stock_pss.py); and gives every test its xdist group (:data:`FIRST`,
    :func:`pytest_xdist_make_scheduler`). A module's tests stay together, so a module fixture
    is set up once."""
    for item in items:
        mark = item.get_closest_marker("inprocess")
        if (_uses_shared_cluster(item) or _uses_own_cluster(item)) and mark is None:
            item.add_marker(pytest.mark.inprocess)
        if mark is not None and mark.args and not _uses_shared_cluster(item):
            raise pytest.UsageError(f"{item.nodeid}: inprocess(NAME) is for shared-cluster "
                                    "tests; a test with a cluster of its own is in the first "
                                    "group")
        item.add_marker(pytest.mark.xdist_group(_group(item)))


def pytest_xdist_make_scheduler(config, log):
    """``--dist loadgroup`` (make test) with one rule: in a worker, no pure test runs after an
    in-process cluster started (a pure test runs TensorFlow ops and strategies in the test
    process, which the cluster's servers would then share). So the first worker to ask starts
    with :data:`FIRST` (its own-cluster tests before its shared cluster) and then takes only
    multi-process modules (then in-process groups); a worker that has not started an
    in-process cluster takes the pure modules first, then an in-process group, then the rest.
    Within each kind, the largest group first, as xdist does."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadGroupScheduling

    class _InProcessLast(LoadGroupScheduling):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.clustered: set = set()  # workers that started an in-process cluster

        def _assign_work_unit(self, node):
            queue = self.workqueue
            if node not in self.clustered and FIRST in queue and not self.assigned_work.get(node):
                pick = FIRST  # a fresh worker: the own-cluster tests first
            elif node in self.clustered:  # multi-process modules; an in-process group last
                pick = next((g for g in queue if g.startswith("cluster:")),
                            next((g for g in queue if g.startswith("inprocess")), None))
            else:
                pick = next((g for g in queue if g.startswith("pure:")),
                            next((g for g in queue if g.startswith("inprocess")),
                                 next(iter(queue))))
            if pick is None:
                return  # only pure modules are left: the other worker runs them
            if pick.startswith("inprocess"):
                self.clustered.add(node)
            queue.move_to_end(pick, last=False)
            super()._assign_work_unit(node)

    return _InProcessLast(config, log)


class _Order:
    """Runs the ``inprocess`` tests last, after every other test, and among them the tests
    that use the shared cluster last of all, each kind in its collected order: the shared
    cluster starts at the first test that uses it, so a test that starts an in-process cluster
    of its own, a multi-process one or none has run before it, whatever the file names and
    whichever tests are selected. (A module with both kinds is split: its other tests run with
    the others.)"""

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, config, items):
        def rank(item):
            if _uses_shared_cluster(item):
                return 2
            return 1 if item.get_closest_marker("inprocess") is not None else 0

        items.sort(key=rank)  # stable: each kind keeps its order


def pytest_configure(config):
    config.pluginmanager.register(_Order(), "tf_hetero_test_order")


# ------------------------------------------------------------------ Grappler
# The in-process tests run their functions without Grappler, TensorFlow's graph optimizer
# (every function a closure runs is optimized again on each worker it is registered on), but
# for the modules marked ``grappler``: the contract every strategy keeps
# (tests/strategies/test_contract.py) runs with it, as users' fits do, and so does every test
# whose servers are other processes (their own config: the launcher, the failures, the demo,
# the bench, the notebooks). Grappler only rewrites a graph for speed; what these tests check
# is what the strategies do. Measured: the compatibility matrix's tutorial row, 24% less CPU
# per fit without it; docs/decisions/0020-suite-time.md.


@pytest.fixture(autouse=True)
def _grappler(request):
    """Sets Grappler off for an in-process test unless it is marked ``grappler``, and on for
    one so marked (the setting is the process's: the servers inside it run what it sends
    with it)."""
    if request.node.get_closest_marker("inprocess") is None:
        yield
        return
    import tensorflow as tf

    on = request.node.get_closest_marker("grappler") is not None
    tf.config.optimizer.set_experimental_options({"disable_meta_optimizer": not on})
    yield


# ------------------------------------------------------------------ coordinator clean-up
# A coordinator's worker threads hold it, its strategy, models, traced functions and
# datasets for the life of the process: TF stops them only when the coordinator is
# garbage-collected, which those threads prevent. Left alone, the in-process test modules
# grew the heap to ~4M objects and 7 GB by tests/strategies/test_dropin.py (a full
# collection then took 6 s, stalling every Python thread of the in-process cluster), and
# the timing tests after it saw a 40 ms emulated step take 160 ms on every worker. So every
# coordinator a test (or a module's fixtures) creates is shut down when it ends, and freed.
# Freeing costs time (each freed tf.function leaves every server with blocking RPCs), but
# keeping the objects and freezing them out of the collector still failed the timing tests:
# docs/TF_INTERNALS.md, "What a coordinator that is never shut down costs".

_strategies: list = []  # weakrefs to every strategy with a coordinator, in creation order


def _record_coordinators(node) -> None:
    """Makes every ClusterCoordinator (stock or tf-hetero's) register its strategy. Imports
    TensorFlow only for cluster tests, so the pure tests stay fast."""
    name = "tensorflow.python.distribute.coordinator.cluster_coordinator"
    if node.get_closest_marker("cluster") is not None:
        import importlib

        importlib.import_module(name)
    cc = sys.modules.get(name)
    if cc is None or getattr(cc.ClusterCoordinator.__init__, "_tf_hetero_recorded", False):
        return
    import weakref

    original = cc.ClusterCoordinator.__init__

    def init(self, strategy):
        original(self, strategy)
        if not any(ref() is strategy for ref in _strategies):  # TF re-runs a cached one's
            _strategies.append(weakref.ref(strategy))

    init._tf_hetero_recorded = True
    cc.ClusterCoordinator.__init__ = init


def _shut_down_since(mark: int) -> None:
    """Shuts down the coordinators of the strategies recorded after the first ``mark``."""
    if len(_strategies) <= mark:
        return
    from tf_hetero.strategies.runtime.coordinator import shutdown

    for ref in _strategies[mark:]:
        strategy = ref()
        if strategy is not None:
            shutdown(strategy)
    del _strategies[mark:]


@pytest.fixture(scope="module", autouse=True)
def _shut_down_module_coordinators(request):
    """Coordinators of the module's fixtures (a module-scoped trained model) end with it."""
    _record_coordinators(request.node)
    mark = len(_strategies)
    yield
    _shut_down_since(mark)


@pytest.fixture(autouse=True)
def _shut_down_test_coordinators(request):
    """Coordinators a test creates end with the test (module fixtures' live on)."""
    if request.node.get_closest_marker("cluster") is None:
        yield
        return
    _record_coordinators(request.node)
    mark = len(_strategies)
    yield
    _shut_down_since(mark)
