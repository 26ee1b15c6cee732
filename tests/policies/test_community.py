"""CASP's community policy (pure, no cluster): the action space (k contiguous communities by
speed), the state, the shipped agent's decisions on clear cases and its training draws, and
the strategy's registry entry and config."""

from __future__ import annotations

import itertools
import random

import numpy as np
import pytest

from tf_hetero.policies.community import (DEFAULT_WEIGHTS, MAX_K, STATE_SIZE, ActorCritic,
                                          CommunityGroups, communities, state_features)
from tf_hetero.policies.group import GroupContext, normalize_groups


# ------------------------------------------------------------------ the action space
@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 7, 10, 16, 33])
def test_every_action_maps_to_valid_contiguous_communities_for_any_worker_count(n):
    rng = random.Random(n)
    for trial, k in itertools.product(range(3), range(1, MAX_K + 3)):
        times = {w: rng.choice([0.1, 0.2, 0.4, 0.8]) * rng.uniform(0.9, 1.1) for w in range(n)}
        groups = communities(times, k)
        assert normalize_groups(groups, n) == groups  # each worker in exactly one
        assert 1 <= len(groups) <= min(k, n)
        # contiguous in speed: every member of a slower community is slower than every
        # member of a faster one
        spans = sorted((min(times[w] for w in g), max(times[w] for w in g)) for g in groups)
        assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:]))


def test_a_lone_straggler_is_its_own_community_at_k_2():
    assert communities({0: 0.1, 1: 0.1, 2: 0.1, 3: 0.4}, 2) == ((0, 1, 2), (3,))


def test_k_communities_form_when_there_are_k_distinct_speeds_and_never_split_equals():
    times = {w: 0.1 * 2 ** (w % 4) for w in range(12)}  # four speeds, 2x apart
    for k in range(1, 7):
        assert len(communities(times, k)) == min(k, 4)
    assert communities({w: 0.1 for w in range(5)}, 4) == ((0, 1, 2, 3, 4),)


def test_communities_rejects_a_bad_k_naming_it():
    with pytest.raises(ValueError, match=r"k=0: need a number of communities >= 1"):
        communities({0: 1.0}, 0)


@pytest.mark.parametrize("n", [1, 4, 9, 100])
def test_the_state_has_the_same_length_for_any_worker_count(n):
    times = {w: 0.1 * (1 + w % 3) for w in range(n)}
    s = state_features(times, {w: 0.1 for w in range(n)}, current_k=2, rate=0.5,
                       staleness=1.0, tasks_done=100)
    assert s.shape == (STATE_SIZE,) and np.all(np.isfinite(s))


def test_the_state_rejects_unmeasured_workers():
    with pytest.raises(ValueError, match="must be finite and > 0"):
        state_features({0: 0.1, 1: float("nan")}, {}, current_k=1)


# ------------------------------------------------------------------ the shipped agent
class _Monitor:
    """What the monitor shows after ``rounds`` BSP rounds on workers of these task times."""

    def __init__(self, times, rounds=20):
        from tf_hetero.telemetry.records import TaskRecord

        self._d = {w: [t] * rounds for w, t in times.items()}
        span = max(times.values())
        self.tasks = [TaskRecord(w, r * span, r * span + t, True, 0, r, 1)
                      for r in range(rounds) for w, t in times.items()]
        self.now, self.events = rounds * span, []

    def unit_times(self, w):
        return self._d[w]

    def clock(self):
        return self.now

    def on_event(self, name, **fields):
        self.events.append((name, fields))


def _decide(times):
    n = len(times)
    policy = CommunityGroups()
    first = policy.groups(GroupContext(tuple(range(n)), None, 0, None, n))
    proposal = policy.groups(GroupContext(tuple(range(n)), first, 10, _Monitor(times), n))
    return policy.decisions[-1][1], proposal or first


def test_the_shipped_weights_load_and_keep_equal_workers_in_one_community():
    k, groups = _decide({w: 0.1 for w in range(6)})
    assert k == 1 and groups == (tuple(range(6)),)


def test_the_shipped_agent_puts_a_clear_4x_straggler_in_a_community_of_its_own():
    for n in (4, 6, 8):
        times = {w: 0.1 for w in range(n)}
        times[n - 1] = 0.4
        k, groups = _decide(times)
        assert groups == (tuple(range(n - 1)), (n - 1,)), (n, k)


def test_the_agent_sees_a_straggler_inside_a_sized_community_by_its_speed_per_unit():
    """batch_sizes=True: a balanced community's tasks all take ~0.4 s, the 4x member's
    reading 1 unit, the others 4. By task durations the agent would see four equal workers
    and keep them together; per unit it sees the 4x straggler and splits it out."""
    from tf_hetero.telemetry import Monitor

    clock = [0.0]
    m = Monitor(4, clock=lambda: clock[0])
    for r in range(20):
        for w in range(4):
            m.record_task(w, 0.4 * r, 0.4 * r + 0.4, True, 0, r, size=1 if w == 3 else 4)
    clock[0] = 8.0
    policy = CommunityGroups()
    first = policy.groups(GroupContext((0, 1, 2, 3), None, 0, None, 4))
    assert policy.groups(GroupContext((0, 1, 2, 3), first, 10, m, 4)) == ((0, 1, 2), (3,))


def test_the_sized_agent_keeps_a_straggler_inside_its_community():
    """The agent trained on communities with per-member batch sizes (SIZED_WEIGHTS) learned
    that a persistent straggler costs a smaller share there, not a wait: one community (H-PS)
    where the unsized agent puts a 4x or 8x straggler alone (the test above)."""
    from tf_hetero.policies.community import SIZED_WEIGHTS

    for n in (4, 8):
        for factor in (4, 8):
            times = {w: 0.1 for w in range(n)}
            times[n - 1] = 0.1 * factor
            policy = CommunityGroups(SIZED_WEIGHTS)
            first = policy.groups(GroupContext(tuple(range(n)), None, 0, None, n))
            policy.groups(GroupContext(tuple(range(n)), first, 10, _Monitor(times), n))
            assert policy.decisions[-1][1] == 1, (n, factor, policy.decisions)
    assert ActorCritic.load(SIZED_WEIGHTS).meta["sized"] == 1


def test_the_default_training_draws_are_the_shipped_agents_and_mild_spreads_are_opt_in():
    """``train`` must keep reproducing the shipped agents: the default distribution draws
    as it did when they were trained (the first draws of the validation seed are pinned).
    The "mild" kind comes only with ``mild``: every worker within 1.5x of the fastest,
    which is at 1."""
    from tf_hetero.emulation.profile import Profile
    from tf_hetero.sim.casp_env import training_profile

    rng = np.random.default_rng(12345)
    assert [training_profile(rng) for _ in range(3)] == [
        (6, "change=4@59:2.0;seed=391"), (8, "classes=a:4@1,b:4@2.0;seed=732"),
        (6, "seed=697")]
    rng = np.random.default_rng(0)
    assert not any("slowdowns=" in training_profile(rng)[1] for _ in range(200))
    rng = np.random.default_rng(0)
    mild = [(n, spec) for n, spec in (training_profile(rng, mild=True)
                                      for _ in range(200)) if "slowdowns=" in spec]
    assert mild
    for n, spec in mild:
        factors = Profile.parse(spec).constant_slowdowns(n)
        assert min(factors) == 1.0 and max(factors) <= 1.5, spec
    with pytest.raises(ValueError, match="need 8 weights"):
        training_profile(rng, kind_weights=[1] * 7)


def test_the_shipped_weights_are_in_the_package():
    import tomllib

    assert DEFAULT_WEIGHTS.endswith("tf_hetero/resources/casp_agent.npz")
    with open("pyproject.toml", "rb") as f:
        data = tomllib.load(f)["tool"]["setuptools"]["package-data"]["tf_hetero"]
    assert "resources/*.npz" in data
    assert ActorCritic.load(DEFAULT_WEIGHTS).meta["episodes"] > 0


# ---------------------------------------------------------- the strategy's entry and config
def test_casp_is_registered_and_its_config_round_trips():
    from tf_hetero.strategies import config as configs, registry

    assert "casp" in registry.names()
    assert registry.parse("casp") == ("casp", None)
    c = registry.engine_config("casp", 4)
    assert c.name == "casp" and isinstance(c.grouping, CommunityGroups)
    assert c.uses_engine and c.sync.mode == "rounds"
    assert registry.updates_per_round("casp", 4) == 4  # lr set for the cluster's batch
    assert configs.casp(4, decide_every=5, greedy=False).grouping.every == 5
    assert c.grouping.summary in c.summaries()


def test_casp_config_errors_name_the_value_and_the_fix():
    from tf_hetero.strategies import config as configs

    with pytest.raises(ValueError, match=r"CASPStrategy: CommunityGroups\(every=0\)"):
        configs.casp(4, decide_every=0)
    with pytest.raises(ValueError, match="lr_rule"):
        configs.casp(4, lr_rule="quadratic")


def test_casp_takes_no_number_after_its_name():
    from tf_hetero.strategies import registry

    with pytest.raises(ValueError, match="takes no number"):
        registry.parse("casp3")
