"""Specification of heterogeneity profiles (pure Python and NumPy, no TensorFlow)."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from tf_hetero.emulation.profile import PROFILE_ENV, Change, HardwareClass, Profile, ProfileError

# --------------------------------------------------------------------------- inline grammar


def test_parse_base_ms():
    assert Profile.parse("base_ms=250").base_ms == 250.0


def test_parse_base_ms_defaults_to_100():
    assert Profile.parse("seed=0").base_ms == 100.0


def test_parse_slowdowns_lists_one_factor_per_worker():
    assert Profile.parse("slowdowns=1,1,1,4").slowdowns == (1.0, 1.0, 1.0, 4.0)


def test_parse_slow_gives_worker_factor_pairs():
    assert Profile.parse("slow=3:4,2:2").slow == ((3, 4.0), (2, 2.0))


def test_parse_slow_leaves_unnamed_workers_at_1x():
    assert Profile.parse("slow=3:4,2:2").constant_slowdowns(4) == (1.0, 1.0, 2.0, 4.0)


def test_parse_classes_gives_name_count_factor():
    assert Profile.parse("classes=v100:3@1,k80:1@4").classes == (
        HardwareClass("v100", 3, 1.0), HardwareClass("k80", 1, 4.0))


def test_parse_classes_expands_in_worker_index_order():
    assert Profile.parse("classes=k80:1@4,v100:2@1").constant_slowdowns(3) == (4.0, 1.0, 1.0)


def test_parse_straggle_gives_probability_and_factor():
    p = Profile.parse("straggle=0.1x5")
    assert (p.straggle_p, p.straggle_k) == (0.1, 5.0)


def test_parse_change_accepts_a_comma_list():
    assert Profile.parse("change=3@200:4,1@10:2").changes == (Change(3, 200, 4.0), Change(1, 10, 2.0))


def test_parse_seed_and_horizon():
    p = Profile.parse("seed=7;horizon=128")
    assert (p.seed, p.horizon) == (7, 128)


def test_parse_combines_items_and_ignores_spaces_and_empty_items():
    assert Profile.parse(" slow = 3:4 ; straggle=0.1x5 ;; seed=1; ") == Profile(
        slow=((3, 4.0),), straggle_p=0.1, straggle_k=5.0, seed=1)


@pytest.mark.parametrize("spec", [None, "", "   ", "uniform"])
def test_parse_none_empty_and_uniform_give_the_uniform_profile(spec):
    p = Profile.parse(spec)
    assert p == Profile()
    assert p.constant_slowdowns(3) == (1.0, 1.0, 1.0)
    assert p.expected_slowdowns(3) == (1.0, 1.0, 1.0)


def test_parse_returns_a_profile_unchanged():
    p = Profile.parse("slow=1:2")
    assert Profile.parse(p) is p


# --------------------------------------------------------------------------- JSON and dicts

JSON_PROFILE = {"base_ms": 50, "slow": {"3": 4}, "straggle": {"p": 0.1, "k": 5},
                "change": [{"worker": 3, "at_task": 200, "slowdown": 2}], "seed": 3,
                "horizon": 64}
JSON_EQUIVALENT = "base_ms=50;slow=3:4;straggle=0.1x5;change=3@200:2;seed=3;horizon=64"


def test_parse_json_file_equals_the_inline_spec(tmp_path):
    path = tmp_path / "profile.json"
    path.write_text(json.dumps(JSON_PROFILE))
    assert Profile.parse(str(path)) == Profile.parse(JSON_EQUIVALENT)


def test_parse_json_file_with_slowdowns_and_classes(tmp_path):
    (tmp_path / "a.json").write_text(json.dumps({"slowdowns": [1, 1, 1, 4]}))
    (tmp_path / "b.json").write_text(json.dumps(
        {"classes": [{"name": "v100", "count": 3, "slowdown": 1},
                     {"name": "k80", "count": 1, "slowdown": 4}]}))
    assert Profile.parse(str(tmp_path / "a.json")) == Profile.parse("slowdowns=1,1,1,4")
    assert Profile.parse(str(tmp_path / "b.json")) == Profile.parse("classes=v100:3@1,k80:1@4")


def test_parse_reads_an_existing_file_without_json_suffix(tmp_path):
    path = tmp_path / "profile.txt"
    path.write_text(json.dumps({"slow": {"1": 2}}))
    assert Profile.parse(str(path)) == Profile.parse("slow=1:2")


def test_parse_dict_equals_the_inline_spec():
    assert Profile.parse(JSON_PROFILE) == Profile.parse(JSON_EQUIVALENT)


def test_parse_empty_dict_gives_the_uniform_profile():
    assert Profile.parse({}) == Profile()


@pytest.mark.parametrize("spec", [
    "uniform",
    "base_ms=250",
    "slowdowns=1,1,1,4",
    "slow=3:4,2:2.5",
    "classes=v100:3@1,k80:1@4",
    "straggle=0.1x5",
    "change=3@200:4,1@10:0.5",
    "seed=9;horizon=17",
    "base_ms=80;slow=3:4;straggle=0.25x3;change=0@5:2;seed=1;horizon=32",
])
def test_spec_round_trips_through_parse(spec):
    p = Profile.parse(spec)
    assert Profile.parse(p.spec()) == p


def test_spec_round_trips_a_float_with_many_digits():
    p = Profile(base_ms=100.1234567)
    assert Profile.parse(p.spec()) == p


def test_spec_round_trips_a_zero_probability_straggle():
    p = Profile.parse("straggle=0x5")
    assert Profile.parse(p.spec()) == p


# --------------------------------------------------------------------------- parse errors


@pytest.mark.parametrize("spec, item", [("slow", "slow"), ("seed=1;slow=", "slow="),
                                        ("slow=  ", "slow=")])
def test_parse_rejects_item_without_key_value(spec, item):
    with pytest.raises(ProfileError,
                       match=rf"^Profile item '{item}' is not KEY=VALUE\. Fix: e\.g\. "):
        Profile.parse(spec)


@pytest.mark.parametrize("spec", [
    "slow=3", "slow=3:4:5", "classes=v100:3", "classes=v100@1", "straggle=0.1", "straggle=0.1x5x2",
    "change=3:200", "change=3@200",
])
def test_parse_rejects_malformed_item(spec):
    with pytest.raises(ProfileError,
                       match=rf"^Profile item '{re.escape(spec)}' is malformed\. Fix: see the grammar"):
        Profile.parse(spec)


def test_parse_rejects_unknown_key():
    with pytest.raises(ProfileError, match=r"^Unknown profile key 'speed' in 'speed=2'\. Known keys: "
                                           r"base_ms, slowdowns, slow, classes, straggle, change, "
                                           r"seed, horizon, link, ps_mbps, ps_slow, ps_interfere\.$"):
        Profile.parse("slow=1:2;speed=2")


@pytest.mark.parametrize("spec, field, value", [
    ("base_ms=0", "base_ms", "0"),
    ("base_ms=-5", "base_ms", "-5"),
    ("slowdowns=1,0", "slowdowns", "0"),
    ("slow=3:-4", "slow factor", "-4"),
    ("slow=3:inf", "slow factor", "inf"),
    ("classes=a:1@0", "class factor", "0"),
    ("change=1@5:0", "change slowdown", "0"),
    ("straggle=0.1x0", "straggle k", "0"),
    ("straggle=-0.1x5", "straggle p", "-0.1"),
    ("straggle=nanx5", "straggle p", "nan"),
])
def test_parse_rejects_negative_zero_or_non_finite_factor(spec, field, value):
    bound = ">= 0" if field == "straggle p" else "> 0"
    with pytest.raises(ProfileError, match=rf"^Profile field '{field}' must be a finite number "
                                           rf"{bound}; received '{value}'\.$"):
        Profile.parse(spec)


def test_parse_rejects_non_numeric_factor():
    with pytest.raises(ProfileError, match=r"^Profile field 'base_ms' must be a number; "
                                           r"received 'fast'\.$"):
        Profile.parse("base_ms=fast")


@pytest.mark.parametrize("spec, field, value", [
    ("slow=-1:4", "slow worker", "-1"),
    ("slow=1.5:4", "slow worker", "1.5"),
    ("change=x@5:2", "change worker", "x"),
    ("change=1@-5:2", "change at_task", "-5"),
    ("seed=-1", "seed", "-1"),
    ("horizon=abc", "horizon", "abc"),
])
def test_parse_rejects_index_that_is_not_a_non_negative_integer(spec, field, value):
    with pytest.raises(ProfileError, match=rf"^Profile field '{field}' must be a non-negative "
                                           rf"integer; received '{value}'\.$"):
        Profile.parse(spec)


@pytest.mark.parametrize("spec, value", [("straggle=1.5x5", "1.5"), ("straggle=2x5", "2.0")])
def test_parse_rejects_straggle_probability_outside_0_1(spec, value):
    with pytest.raises(ProfileError, match=rf"^Straggler probability p must be in \[0, 1\]; "
                                           rf"received {value}\. Fix: e\.g\. straggle=0\.1x5\.$"):
        Profile.parse(spec)


def test_parse_accepts_straggle_probability_0_and_1():
    assert Profile.parse("straggle=0x5").straggle_p == 0.0
    assert Profile.parse("straggle=1x5").straggle_p == 1.0


def test_parse_rejects_straggle_factor_below_1():
    with pytest.raises(ProfileError, match=r"^Straggler factor k must be >= 1 \(a straggler is "
                                           r"slower\); received 0\.5\.$"):
        Profile.parse("straggle=0.1x0.5")


def test_parse_rejects_zero_horizon():
    with pytest.raises(ProfileError, match=r"^Profile horizon must be >= 1; received 0\.$"):
        Profile.parse("horizon=0")


def test_parse_rejects_hardware_class_with_zero_workers():
    with pytest.raises(ProfileError, match=r"^Hardware class 'v100' has count 0; a class needs "
                                           r"at least 1 worker\.$"):
        Profile.parse("classes=v100:0@1")


@pytest.mark.parametrize("spec", [
    "slowdowns=1,4;slow=1:4",
    "slow=1:4;classes=a:2@1",
    "slowdowns=1,4;classes=a:2@1",
])
def test_parse_rejects_two_ways_of_giving_constant_slowdowns(spec):
    with pytest.raises(ProfileError, match=r"^A profile gives constant slowdowns in one way only; "
                                           r"received more than one of 'slowdowns', 'slow' and "
                                           r"'classes'\. Fix: keep one of them\.$"):
        Profile.parse(spec)


def test_constructor_validates_like_parse():
    with pytest.raises(ProfileError, match=r"^Straggler probability p must be in \[0, 1\]"):
        Profile(straggle_p=1.5)
    with pytest.raises(ProfileError, match=r"^Profile field 'base_ms' must be a finite number > 0"):
        Profile(base_ms=0)


def test_parse_rejects_missing_json_file(tmp_path):
    path = tmp_path / "nope.json"
    with pytest.raises(ProfileError, match=r"^Profile file '.*nope\.json' does not exist\. Fix: "):
        Profile.parse(str(path))


def test_parse_rejects_invalid_json_file(tmp_path):
    path = tmp_path / "bad.json"
    path.write_text("{not json")
    with pytest.raises(ProfileError, match=r"^Profile file '.*bad\.json' is not valid JSON \("):
        Profile.parse(str(path))


def test_parse_rejects_json_file_that_is_not_an_object(tmp_path):
    path = tmp_path / "list.json"
    path.write_text("[1, 2]")
    with pytest.raises(ProfileError, match=r"^Profile file '.*list\.json' must hold a JSON object; "
                                           r"received list\.$"):
        Profile.parse(str(path))


def test_parse_rejects_unknown_key_in_dict():
    with pytest.raises(ProfileError, match=r"^Unknown profile key\(s\) \['bogus'\] in profile "
                                           r"dict\. Known keys: \["):
        Profile.parse({"slow": {"1": 2}, "bogus": 1})


def test_parse_rejects_unknown_key_in_json_file_naming_the_file(tmp_path):
    path = tmp_path / "p.json"
    path.write_text(json.dumps({"slowness": 2}))
    with pytest.raises(ProfileError, match=r"^Unknown profile key\(s\) \['slowness'\] in .*p\.json\."):
        Profile.parse(str(path))


@pytest.mark.parametrize("data", [
    {"straggle": {"p": 0.1}},
    {"straggle": [0.1, 5]},
    {"classes": [{"name": "a", "count": 1}]},
    {"change": [{"worker": 1, "slowdown": 2}]},
    {"slowdowns": 4},
])
def test_parse_rejects_malformed_dict(data):
    with pytest.raises(ProfileError, match=r"^Profile in profile dict is malformed near .*; see the "
                                           r"JSON layout"):
        Profile.parse(data)


def test_parse_dict_validates_values():
    with pytest.raises(ProfileError, match=r"^Profile field 'slow factor' must be a finite number "
                                           r"> 0; received -1\.$"):
        Profile.parse({"slow": {"1": -1}})


# --------------------------------------------------------------------------- check_workers


def test_check_workers_accepts_a_fitting_profile():
    Profile.parse("slowdowns=1,1,1,4").check_workers(4)
    Profile.parse("classes=v100:3@1,k80:1@4").check_workers(4)
    Profile.parse("slow=3:4;change=3@10:2").check_workers(4)
    Profile.parse("uniform").check_workers(1)


def test_check_workers_rejects_slowdowns_of_the_wrong_length():
    with pytest.raises(ProfileError, match=r"^Profile 'slowdowns' lists 3 factors but the cluster "
                                           r"has 4 workers\. Fix: give exactly 4 factors, or use "
                                           r"'slow=W:F'\.$"):
        Profile.parse("slowdowns=1,1,4").check_workers(4)


def test_check_workers_rejects_class_counts_that_do_not_add_up():
    with pytest.raises(ProfileError, match=r"^Profile 'classes' covers 3 workers but the cluster "
                                           r"has 4\. Fix: make the class counts add up to 4\.$"):
        Profile.parse("classes=v100:2@1,k80:1@4").check_workers(4)


@pytest.mark.parametrize("spec", ["slow=4:2", "change=4@10:2"])
def test_check_workers_rejects_worker_index_out_of_range(spec):
    with pytest.raises(ProfileError, match=r"^Profile names worker 4 but the cluster has workers "
                                           r"0-3\. Fix: use an index in that range\.$"):
        Profile.parse(spec).check_workers(4)


@pytest.mark.parametrize("query", ["constant_slowdowns", "class_names", "change_vectors",
                                   "expected_slowdowns", "straggle_table"])
def test_queries_check_the_worker_count(query):
    p = Profile.parse("slowdowns=1,4")
    if query == "straggle_table":  # the table does not depend on constant slowdowns
        assert p.straggle_table(3).shape == (3, p.horizon)
        return
    with pytest.raises(ProfileError, match=r"^Profile 'slowdowns' lists 2 factors"):
        getattr(p, query)(3)


def test_change_vectors_gives_start_task_and_factor_per_worker():
    at, factor = Profile.parse("change=2@10:3").change_vectors(3)
    assert at[2] == 10 and at[0] == at[1] == np.iinfo(np.int64).max
    assert factor.tolist() == [1.0, 1.0, 3.0]


# --------------------------------------------------------------------------- stragglers


def test_straggle_table_has_one_row_per_worker_and_horizon_columns():
    table = Profile.parse("straggle=0.5x3;horizon=16").straggle_table(4)
    assert table.shape == (4, 16)
    assert set(np.unique(table)) <= {1.0, 3.0}


def test_straggle_table_is_reproducible_from_seed():
    a = Profile.parse("straggle=0.3x5;seed=11").straggle_table(4)
    b = Profile.parse("straggle=0.3x5;seed=11").straggle_table(4)
    np.testing.assert_array_equal(a, b)


def test_straggle_table_differs_between_seeds():
    a = Profile.parse("straggle=0.3x5;seed=1").straggle_table(4)
    b = Profile.parse("straggle=0.3x5;seed=2").straggle_table(4)
    assert not np.array_equal(a, b)


def test_straggle_frequency_is_close_to_p_over_a_large_horizon():
    table = Profile.parse("straggle=0.1x5;horizon=20000").straggle_table(4)
    freq = (table == 5.0).mean(axis=1)
    assert np.all(np.abs(freq - 0.1) < 0.01), freq


def test_straggle_probability_0_and_1_are_never_and_always():
    assert np.all(Profile.parse("straggle=0x5").straggle_table(2) == 1.0)
    assert np.all(Profile.parse("straggle=1x5").straggle_table(2) == 5.0)


def test_no_straggle_gives_a_table_of_ones():
    assert np.all(Profile().straggle_table(3) == 1.0)


# --------------------------------------------------------------------------- slowdown queries


def test_slowdown_is_the_constant_factor_before_the_change():
    p = Profile.parse("slow=3:4;change=3@200:2")
    assert p.slowdown(3, 0, 4) == 4.0
    assert p.slowdown(3, 199, 4) == 4.0


def test_slowdown_applies_the_change_from_at_task_on():
    p = Profile.parse("slow=3:4;change=3@200:2")
    assert p.slowdown(3, 200, 4) == 2.0
    assert p.slowdown(3, 10_000, 4) == 2.0


def test_slowdown_of_other_workers_ignores_the_change():
    p = Profile.parse("slow=3:4;change=3@200:2")
    assert [p.slowdown(w, 500, 4) for w in range(3)] == [1.0, 1.0, 1.0]


def test_slowdown_multiplies_by_the_straggle_table_and_repeats_after_horizon():
    p = Profile.parse("slow=1:2;straggle=0.5x3;horizon=8;seed=4")
    table = p.straggle_table(2)
    for t in range(20):
        assert p.slowdown(1, t, 2) == 2.0 * table[1, t % 8]
        assert p.slowdown(1, t, 2) == p.slowdown(1, t + 8, 2)


def test_expected_slowdowns_is_constant_times_1_plus_p_k_minus_1():
    p = Profile.parse("slow=3:4;straggle=0.1x5")
    assert p.expected_slowdowns(4) == pytest.approx((1.4, 1.4, 1.4, 5.6))


def test_expected_slowdowns_uses_the_change_at_task():
    p = Profile.parse("slowdowns=1,4;change=1@100:2;straggle=0.5x3")
    assert p.expected_slowdowns(2, task=99) == pytest.approx((2.0, 8.0))
    assert p.expected_slowdowns(2, task=100) == pytest.approx((2.0, 4.0))


def test_expected_slowdowns_without_stragglers_equal_constant_slowdowns():
    p = Profile.parse("classes=v100:3@1,k80:1@4")
    assert p.expected_slowdowns(4) == p.constant_slowdowns(4) == (1.0, 1.0, 1.0, 4.0)


def test_class_names_repeat_each_class_name_count_times():
    assert Profile.parse("classes=v100:3@1,k80:1@4").class_names(4) == ("v100",) * 3 + ("k80",)


def test_class_names_without_classes_name_the_factor():
    assert Profile.parse("slow=3:4,1:2.5").class_names(4) == ("x1", "x2.5", "x1", "x4")


def test_class_names_check_the_class_count():
    with pytest.raises(ProfileError, match=r"^Profile 'classes' covers 4 workers but the cluster "
                                           r"has 5\."):
        Profile.parse("classes=v100:3@1,k80:1@4").class_names(5)


# --------------------------------------------------------------------------- environment


def test_profile_env_name():
    assert PROFILE_ENV == "TF_HETERO_PROFILE"


def test_from_env_parses_the_profile_variable():
    assert Profile.from_env({PROFILE_ENV: "slow=1:2"}) == Profile.parse("slow=1:2")


def test_from_env_without_the_variable_is_uniform():
    assert Profile.from_env({}) == Profile()


def test_from_env_defaults_to_os_environ(monkeypatch):
    monkeypatch.setenv(PROFILE_ENV, "straggle=0.2x3")
    assert Profile.from_env() == Profile.parse("straggle=0.2x3")



def test_rejects_two_changes_for_one_worker_when_parsed():
    with pytest.raises(ProfileError, match=r"^Profile has two changes for worker 1;.*Fix: keep one\.$"):
        Profile.parse("change=1@10:2,1@20:3")


def test_rejects_negative_seed_and_non_finite_straggle_factor():
    with pytest.raises(ProfileError, match=r"'seed'.*-1"):
        Profile(seed=-1)
    with pytest.raises(ProfileError, match=r"Straggler factor k must be >= 1"):
        Profile(straggle_p=0.1, straggle_k=float("nan"))


def test_rejects_class_name_that_would_break_the_spec():
    with pytest.raises(ProfileError, match=r"^Hardware class name 'a;b' may use only"):
        Profile.parse({"classes": [{"name": "a;b", "count": 1, "slowdown": 2}]})


def test_slowdown_rejects_worker_outside_the_cluster():
    with pytest.raises(ProfileError, match=r"slowdown\(worker=-1, task=0\)"):
        Profile.parse("slow=3:4").slowdown(-1, 0, 4)


def test_link_rates_parse_round_trip_and_must_fit_the_cluster():
    p = Profile.parse("slow=3:4;link=8,8,8,2")
    assert Profile.parse(p.spec()) == p
    assert p.link_us_per_byte(4) == (0.125, 0.125, 0.125, 0.5)
    assert Profile.parse({"link": 4}).link_us_per_byte(2) == (0.25, 0.25)
    assert Profile.parse("uniform").link_us_per_byte(3) == (0.0, 0.0, 0.0)
    with pytest.raises(ProfileError, match="'link' lists 2 rates but the cluster has 4"):
        Profile.parse("link=1,2").link_us_per_byte(4)
    with pytest.raises(ProfileError, match="link"):
        Profile.parse("link=0")
