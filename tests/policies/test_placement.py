"""Load-aware placement (pure rule), PS profile items and per-PS load figures: no cluster."""

from __future__ import annotations

import pytest

from tf_hetero.emulation.profile import Profile, ProfileError
from tf_hetero.policies.placement import Balanced, RoundRobin, make, max_over_mean, pack
from tf_hetero.telemetry import psload
from tf_hetero.telemetry.monitor import Monitor

pytestmark = pytest.mark.tensorflow  # its tests import TensorFlow (one xdist group)

#: A skewed model in creation order: an embedding of 1,024 x 16 in 16 shards of 4 KB, then
#: dense kernels of 8 KB and 5 KB (whole) and their biases (bytes).
SKEWED = [4096] * 16 + [8192, 512, 5120, 40]
#: The digits MLP (64-128-64-10), no partitioner: kernels and biases.
MLP = [32768, 512, 32768, 256, 2560, 40]


def _loads(placement, sizes, num_ps):
    placement.bind(num_ps)
    for n in sizes:
        placement.place(n)
    return placement.bytes


@pytest.mark.parametrize("num_ps", [2, 3, 4])
def test_balanced_placement_meets_the_target_when_every_variable_is_in_small_shards(num_ps):
    sizes = [1024] * 64 + [1024] * 8 + [512] + [1024] * 5 + [40]  # all in shards <= 1 KB
    balanced = max_over_mean(_loads(Balanced(), sizes, num_ps))
    assert balanced <= 1.05
    assert balanced <= max_over_mean(_loads(RoundRobin(), sizes, num_ps)) + 1e-12


def test_balanced_placement_of_the_skewed_model_on_two_ps_meets_the_target():
    assert max_over_mean(_loads(Balanced(), SKEWED, 2)) <= 1.05
    assert max_over_mean(_loads(RoundRobin(), SKEWED, 2)) > 1.1


def test_balanced_placement_cannot_split_a_variable_larger_than_a_fair_share():
    # 2 kernels of 32 KB on 4 PS: whole variables bound max/mean from below.
    assert max_over_mean(_loads(Balanced(), MLP, 4)) > 1.5
    assert round(max_over_mean(_loads(Balanced(), MLP, 2)), 3) == 1.033


def test_a_slow_ps_gets_load_in_proportion_to_its_service_rate():
    b = Balanced(rates=(1 / 3, 1.0))
    loads = _loads(b, [1000] * 40, 2)
    assert b.rates == (1 / 3, 1.0)
    assert loads == [10000, 30000]  # a quarter on the 3x slower PS: equal service times


def test_the_strategy_gives_balanced_the_rates_of_its_profile_or_the_exported_one(monkeypatch):
    from tf_hetero.strategies.base import ps_rates

    monkeypatch.setenv("TF_HETERO_PROFILE", "ps_mbps=4;ps_slow=1:2")
    assert ps_rates(Balanced(), 2) == (1.0, 0.5)
    assert ps_rates(Balanced(profile="ps_mbps=4;ps_slow=0:3"), 2) == (1 / 3, 1.0)
    b = Balanced()
    b.bind(2, rates=ps_rates(b, 2))
    assert b.rates == (1.0, 0.5)
    monkeypatch.delenv("TF_HETERO_PROFILE")
    assert ps_rates(Balanced(), 2) == (1.0, 1.0)


def test_offline_packing_puts_the_largest_first():
    assert pack([1, 5, 2, 2, 1], 2) == [1, 0, 1, 1, 0]
    assert pack([4, 4, 4, 4], 2, rates=(1, 1 / 3)) == [0, 0, 0, 1]  # 3x slower: 1 in 4


def test_placement_arguments_are_checked_with_the_fix():
    assert isinstance(make(None), RoundRobin) and isinstance(make("balanced"), Balanced)
    with pytest.raises(ValueError, match=r"^placement='even' is not a placement\. Fix: use "):
        make("even")
    with pytest.raises(ValueError, match=r"rates=\(1, 0\)\): every rate must be > 0"):
        Balanced(rates=(1, 0))
    with pytest.raises(ValueError, match=r"gives 3 rates but the cluster has 2 PS tasks"):
        Balanced(rates=(1, 1, 1)).bind(2)
    with pytest.raises(ValueError, match=r"needs at least one PS task"):
        RoundRobin().bind(0)


def test_ps_profile_items_parse_round_trip_and_name_the_fix():
    p = Profile.parse("ps_mbps=4;ps_slow=1:3;ps_interfere=0:4@1/5")
    assert Profile.parse(p.spec()) == p
    assert p.ps_us_per_byte(2) == (0.25, 0.75)
    assert p.ps_service_rates(2) == (1.0, 1 / 3)
    assert Profile.parse({"ps_mbps": [4, 2], "ps_interfere": [
        {"ps": 1, "factor": 2, "on_s": 1, "period_s": 4}]}).ps_us_per_byte(2) == (0.25, 0.5)
    assert Profile.parse("slow=1:2").ps_us_per_byte(2) == (0.0, 0.0)
    with pytest.raises(ProfileError, match=r"ps_slow and ps_interfere .* Fix: add ps_mbps=RATE"):
        Profile.parse("ps_slow=1:3")
    with pytest.raises(ProfileError, match=r"'ps_slow' names PS 2 but the cluster has PS tasks "
                                           r"0-1\. Fix: use an index in that range\."):
        Profile.parse("ps_mbps=4;ps_slow=2:3").check_ps(2)
    with pytest.raises(ProfileError, match=r"'ps_mbps' lists 3 rates but the cluster has 2 PS"):
        Profile.parse("ps_mbps=1,2,3").check_ps(2)
    with pytest.raises(ProfileError, match=r"6 s on in every 5 s is more than the period"):
        Profile.parse("ps_mbps=4;ps_interfere=0:4@6/5")
    with pytest.raises(ProfileError, match=r"'ps_interfere=0:4' is malformed"):
        Profile.parse("ps_mbps=4;ps_interfere=0:4")


def test_monitor_reports_bytes_per_ps_from_the_placement_per_task_and_round():
    m = Monitor(2)
    b = Balanced()
    b.bind(2)
    for n in MLP:
        b.place(n)
    m.placement = b
    m.record_task(worker=0, start=0.0, end=0.1, applied=True, staleness=0)
    m.record_task(worker=1, start=0.0, end=0.2, applied=True, staleness=0)
    s = m.summary()
    assert [s["ps0_bytes"], s["ps1_bytes"]] == [2 * b.loads[0], 2 * b.loads[1]]
    assert s["ps_load_max_over_mean"] == pytest.approx(max_over_mean(b.loads))
    assert Monitor(2).summary().get("ps0_bytes") is None  # no placement known: no figure


def test_served_figures_are_the_difference_of_two_counter_snapshots():
    before = {"bytes": [5, 5], "busy_s": [1.0, 1.0], "wait_s": [0.0, 0.0], "requests": [1, 1]}
    after = {"bytes": [15, 35], "busy_s": [1.5, 2.5], "wait_s": [0.25, 0.0], "requests": [3, 3]}
    f = psload.served_figures(before, after)
    assert (f["ps0_served_bytes"], f["ps1_served_bytes"]) == (10, 30)
    assert f["ps0_wait_s"] == 0.25 and f["ps1_requests"] == 2
    assert f["ps_busy_max_over_mean"] == pytest.approx(1.5)
