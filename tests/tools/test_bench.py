"""`tf-hetero bench` end to end on a small budget (separate processes), and its inputs."""

from __future__ import annotations

import json
import os
import shutil

import pytest

from support import cli

KEYS = {"strategy", "samples_per_sec", "efficiency", "time_to_target_s", "final_accuracy",
        "bytes_to_ps_per_sample", "bytes_from_ps_per_sample", "chief_ps_bytes_per_sample",
        "ps_load_max_over_mean", "rounds"}


@pytest.mark.cluster
def test_bench_runs_strategies_side_by_side_with_the_stock_reference(tmp_path):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    env.pop("TF_CONFIG", None)
    out = tmp_path / "b.json"
    # One repeat: the medians and ranges over repeats are the summary's unit tests below.
    proc = cli("bench", "--strategies", "bsp,backup,hps,hpsint8,hps8,bsp+keras3", "--tasks", "40",
               "--steps-per-epoch", "40",
               "--profile", "slow=3:3;base_ms=30", "--target-accuracy", "0.2", "--repeats", "1",
               "--json", str(out), env=env)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    report = json.loads(out.read_text())
    rows = {r["strategy"]: r for r in report["results"]}
    assert list(rows) == ["pss", "bsp", "backup", "hps", "hpsint8", "hps8",
                          "bsp+keras3"]  # reference first
    for r in rows.values():  # the same sample budget, whatever a task reads
        assert sum(r["samples_per_worker"]) == 40 * 32, (r["strategy"], r["samples_per_worker"])
    assert rows["hps8"]["rounds"] == 5 and rows["hps"]["rounds"] == 10
    grad = rows["pss"]["gradient_bytes_per_sample"]
    assert shutil.which("ss"), "traffic is measured with `ss` (iproute2); .ci/run installs it"
    for name in ("pss", "bsp", "backup", "bsp+keras3"):  # each micro-batch reads the model,
        r = rows[name]  # pushes its gradient: measured on the sockets, never below the sizes
        assert grad <= r["bytes_to_ps_per_sample"] < 3 * grad, (name, r["bytes_to_ps_per_sample"])
        assert grad <= r["bytes_from_ps_per_sample"] < 4 * grad, (name, r["bytes_from_ps_per_sample"])
        assert len(r["ps_bytes"]) == 2 and 1 <= r["ps_load_max_over_mean"] <= 2
    # H-PS pushes once per worker per round (here 1 push per 32 samples, ~grad bytes per
    # sample in fp32); int8 codes are a quarter of that, measured as such. (Compared with
    # the fp32 row of the same strategy: both pay the same fixed cost of registering their
    # functions, which at 40 tasks is a good part of the bytes.)
    saved = rows["hps"]["bytes_to_ps_per_sample"] - rows["hpsint8"]["bytes_to_ps_per_sample"]
    assert saved > 0.5 * grad, (saved, grad)
    for r in rows.values():
        assert KEYS <= set(r)
        # (hps8: one closure per worker per round of 8 batches, so half as many closures)
        assert r["tasks"] == (20 if r["strategy"] == "hps8" else 40) and r["repeats"] == 1
        assert 0 < r["efficiency"] <= 1.0  # one clock (fit() to the last apply) for every row
        assert 0 < r["setup_s"] < r["span_s"] and r["eval_failures"] == 0
        cpu = r["cpu_s_per_1000_samples"]  # every process of the cluster spent CPU on it
        assert all(cpu[k] > 0 for k in ("chief", "worker", "ps")), (r["strategy"], cpu)
        assert 0 < r["machine_busy"] <= 1
        spread = r["spread"]["samples_per_sec"]
        assert spread["min"] <= r["samples_per_sec"] <= spread["max"]
    for name in ("bsp", "bsp+keras3"):  # the Keras 3 model, trained in the same rounds
        assert rows[name]["rounds"] == 10 and rows[name]["dropped_tasks"] == 0
    # Backup workers drop the late task of a round, mostly the slow worker's.
    dropped = [w for w, _, _, applied in rows["backup"]["timeline"] if not applied]
    assert dropped and dropped.count(3) > len(dropped) / 2
    assert rows["pss"]["rounds"] == 40
    runs = report["runs"]
    assert sorted((r["strategy"], r["repeat"]) for r in runs) == sorted(
        (s, 0) for s in rows)
    md = (tmp_path / "b.md").read_text()
    assert "| ideal |" in md and "| bsp |" in md
    assert (tmp_path / "b.png").read_bytes()[:4] == b"\x89PNG"


def _run(strategy, sps, ttt, repeat=0):
    return {"strategy": strategy, "samples_per_sec": sps, "efficiency": sps / 1000,
            "learning_rate": 0.02,
            "time_to_target_s": ttt, "final_accuracy": 0.9, "repeat": repeat,
            "bytes_to_ps_per_sample": 10.0, "bytes_from_ps_per_sample": 20.0, "rounds": 5, "dropped_tasks": 0,
            "tasks_per_worker": [1, 1]}


def test_summary_takes_the_median_run_and_reports_the_range():
    from tf_hetero.tools.benchconfig import BenchConfig
    from tf_hetero.tools.report import format_table, summarize

    runs = [_run("pss", 300, 2.0), _run("pss", 100, None, 1), _run("pss", 200, 4.0, 2),
            _run("bsp", 50, None), _run("bsp", 60, None, 1), _run("bsp", 55, 9.0, 2)]
    rows = summarize(runs, ("pss", "bsp"))
    assert [r["samples_per_sec"] for r in rows] == [200, 55]
    assert rows[0]["spread"]["samples_per_sec"] == {"median": 200, "min": 100, "max": 300,
                                                    "missing": 0}
    # One run never reached it: it counts as the slowest (not dropped), so the median is 4.0.
    assert rows[0]["spread"]["time_to_target_s"]["median"] == 4.0
    assert rows[1]["spread"]["time_to_target_s"]["median"] is None  # most runs never did
    table = format_table(rows, BenchConfig(strategies=("bsp",), repeats=3), 1000.0)
    assert "| pss | 0.02 | 200 [100-300] | 0.200 [0.100-0.300] | 4.0 [2.0-4.0] (1 not reached) |" in table
    assert "| bsp | 0.02 | 55 [50-60] |" in table and "| not reached |" in table


def test_a_row_that_computed_more_samples_than_the_budget_is_named_under_the_table():
    from tf_hetero.tools.benchconfig import BenchConfig
    from tf_hetero.tools.report import format_table, summarize

    cfg = BenchConfig(strategies=("epsp",), tasks=40, steps_per_epoch=20, batch_size=8)
    exact, more = _run("pss", 100, 2.0), _run("epsp", 90, 1.5)
    exact["samples_per_worker"], more["samples_per_worker"] = [160, 160], [200, 210]
    table = format_table(summarize([exact, more], ("pss", "epsp")), cfg, 1000.0)
    assert "| 1/1 | 320 |" in table and "| 1/1 | 410 |" in table
    assert table.endswith("Samples computed other than the budget (40 x 8 = 320): epsp 410; "
                          "their final accuracy is at that many samples.")
    exact_only = format_table(summarize([exact], ("pss",)), cfg, 1000.0)
    assert "Samples computed other" not in exact_only


def test_bench_config_rejects_unknown_strategy_and_adds_the_reference():
    from tf_hetero.tools.benchconfig import BenchConfig

    with pytest.raises(ValueError, match=r"^Unknown strategy 'nope'.*Fix: use one of"):
        BenchConfig(strategies=("bsp", "nope"))
    assert BenchConfig(strategies=("bsp",)).strategies == ("pss", "bsp")
    with pytest.raises(ValueError, match=r"tasks=50 must be a multiple of steps_per_epoch=20"):
        BenchConfig(strategies=("bsp",), tasks=50, steps_per_epoch=20)


def test_registry_parses_numbered_presets_and_rejects_numbers_where_none_belong():
    from tf_hetero.strategies import registry

    assert registry.parse("backup2") == ("backup", 2)
    assert registry.parse("ssp") == ("ssp", 3)
    assert registry.updates_per_round("bsp", 4) == 4
    assert registry.updates_per_round("backup1", 4) == 3
    assert registry.updates_per_round("ssp2", 4) == 1
    with pytest.raises(ValueError, match=r"^Strategy 'bsp' takes no number; received 'bsp3'"):
        registry.parse("bsp3")


def test_scenarios_load_with_their_defaults_and_refuse_unknown_names(tmp_path):
    from tf_hetero.tools.scenarios import SCENARIO_DEFAULTS, load_scenarios

    (tmp_path / "a.json").write_text('{"description": "x", "profile": "slow=1:2", "workers": 2}')
    (tmp_path / "b.json").write_text('{"profile": "straggle=0.1x5"}')
    both = load_scenarios("all", str(tmp_path))
    assert [s.name for s in both] == ["a", "b"]
    cfg = both[0].config(strategies=("bsp",), repeats=2)
    assert (cfg.workers, cfg.profile, cfg.repeats, cfg.strategies) == (2, "slow=1:2", 2,
                                                                        ("pss", "bsp"))
    assert (cfg.dataset, cfg.model, cfg.tasks) == (SCENARIO_DEFAULTS["dataset"],
                                                   SCENARIO_DEFAULTS["model"],
                                                   SCENARIO_DEFAULTS["tasks"])
    with pytest.raises(ValueError, match=r"unknown scenario\(s\) \['c'\].*a, b"):
        load_scenarios("a,c", str(tmp_path))
    (tmp_path / "bad.json").write_text('{"profile": "slow=1:2", "workerz": 3}')
    with pytest.raises(ValueError, match=r"bad.json: unknown key\(s\) \['workerz'\]"):
        load_scenarios("bad", str(tmp_path))
    (tmp_path / "bad.json").write_text('{"profile": "slow=5:2", "workers": 2}')
    with pytest.raises(ValueError, match="names worker 5"):  # checked before any cluster starts
        load_scenarios("bad", str(tmp_path))


def test_the_shipped_scenarios_are_valid():
    from support import REPO
    from tf_hetero.tools.scenarios import load_scenarios

    names = [s.name for s in load_scenarios("all", os.path.join(REPO, "benchmarks", "scenarios"))]
    assert {"one_slow", "classes", "transient", "midrun", "workers8", "workers16",
            "slow_link"} <= set(names)


def test_summary_table_gives_time_to_target_relative_to_stock_pss():
    from tf_hetero.tools.scenarios import summary_table

    table = summary_table({
        "one_slow": [{"strategy": "pss", "time_to_target_s": 10.0},
                     {"strategy": "bsp", "time_to_target_s": 25.0}],
        "midrun": [{"strategy": "pss", "time_to_target_s": 12.0},
                   {"strategy": "bsp", "time_to_target_s": 8.0}]})
    assert "| strategy | one_slow | midrun |" in table
    assert "| bsp | 0.40 | 1.50 |" in table and "| pss | 1.00 (10.0 s) | 1.00 (12.0 s) |" in table


def test_summary_table_with_repeats_uses_each_rows_median_time_to_target():
    """The row's own ``time_to_target_s`` is that of its median-samples/s run; the bench table
    and the summary must both give the median over repeats (a one_slow run read
    pss 52.6 s in the summary, 49.4 s median in the table)."""
    from tf_hetero.tools.report import summarize
    from tf_hetero.tools.scenarios import summary_table

    runs = [_run("pss", 300, 10.0), _run("pss", 200, 14.0, 1), _run("pss", 100, 12.0, 2),
            _run("bsp", 90, 30.0), _run("bsp", 80, 20.0, 1), _run("bsp", 70, 24.0, 2)]
    rows = summarize(runs, ("pss", "bsp"), num_classes=10)
    assert [r["time_to_target_s"] for r in rows] == [14.0, 20.0]  # the median-speed runs
    assert "| pss | 1.00 (12.0 s) |" in summary_table({"one_slow": rows})
    assert "| bsp | 0.50 |" in summary_table({"one_slow": rows})  # 12 / 24, not 14 / 20


def test_lr_grid_reports_each_strategy_at_its_best_non_diverged_rate():
    from tf_hetero.tools.benchconfig import BenchConfig
    from tf_hetero.tools.report import format_table, summarize

    def run(factor, ttt, acc):
        r = _run("bsp", 100.0, ttt)
        r.update(lr_factor=factor, learning_rate=0.08 * factor, final_accuracy=acc)
        return r

    runs = [run(0.5, 12.0, 0.95), run(1.0, 8.0, 0.96), run(2.0, 5.0, 0.09)]  # 2x diverged
    (row,) = summarize(runs, ("bsp",), num_classes=10)
    assert row["lr_factor"] == 1.0 and row["learning_rate"] == 0.08
    assert row["lr_grid"] == {0.5: 12.0, 1.0: 8.0, 2.0: 5.0}
    table = format_table([row], BenchConfig(strategies=("bsp",), lr_factors=(0.5, 1, 2)), 1e3)
    assert "| bsp | 0.08 |" in table and "best lr of 0.5, 1, 2 x the rule" in table
    with pytest.raises(ValueError, match=r"lr_factors=\(\): need factors > 0"):
        BenchConfig(strategies=("bsp",), lr_factors=())


def test_a_momentum_grid_is_reported_per_lr_and_momentum_and_writes_as_json():
    import json

    from tf_hetero.tools.report import summarize

    def run(factor, momentum, ttt):
        r = _run("pss", 100.0, ttt)
        r.update(lr_factor=factor, momentum=momentum, final_accuracy=0.95)
        return r

    runs = [run(1.0, 0.9, 9.0), run(1.0, 0.0, 7.0), run(2.0, 0.9, None)]
    (row,) = summarize(runs, ("pss",), num_classes=10)
    assert (row["lr_factor"], row["momentum"]) == (1.0, 0.0)  # the best point of the grid
    assert row["lr_grid"] == {"1.0 m=0.9": 9.0, "1.0 m=0.0": 7.0, "2.0 m=0.9": None}
    json.dumps(row)  # the report file takes it (a tuple key did not)


def test_a_row_stopped_by_the_divergence_guard_is_never_the_best_rate():
    """A fit that stopped on the divergence guard is marked diverged even when the accuracy
    reached before the stop looks fine, so the lr grid picks a rate that trained through."""
    from tf_hetero.tools.benchconfig import BenchConfig
    from tf_hetero.tools.report import format_table, summarize

    def run(factor, ttt, stopped=None):
        r = _run("hps", 100.0, ttt)
        r.update(lr_factor=factor, learning_rate=0.08 * factor, final_accuracy=0.9,
                 stopped=stopped)
        return r

    runs = [run(1.0, 8.0), run(2.0, 5.0, "tf-hetero: training diverged: ...")]
    (row,) = summarize(runs, ("hps",), num_classes=10)
    assert row["lr_factor"] == 1.0
    (alone,) = summarize(runs[1:], ("hps",), num_classes=10)
    assert alone["diverged"]
    assert "| hps (diverged) |" in format_table([alone], BenchConfig(strategies=("hps",)), 1e3)


def test_a_suite_run_in_parts_into_one_out_dir_makes_one_summary(tmp_path, monkeypatch):
    """``--scenario a`` then ``--scenario b`` into one out-dir: the summary holds both (with
    the commit each was measured at), and a scenario run again replaces its own column."""
    from tf_hetero.tools import bench, scenarios

    times = iter([10.0, 20.0, 8.0, 16.0, 12.0, 12.0])

    def fake_run_bench(cfg, failed):  # the cluster part is tested elsewhere; this is the merge
        return [{"strategy": "pss", "time_to_target_s": next(times)},
                {"strategy": "bsp", "time_to_target_s": next(times)}]

    monkeypatch.setattr(bench, "run_bench", fake_run_bench)
    one, two = (scenarios.Scenario(n, n, {"profile": "slow=3:4"}) for n in ("one", "two"))
    scenarios.run_scenarios([one], str(tmp_path))
    scenarios.run_scenarios([two], str(tmp_path))
    md = (tmp_path / "summary.md").read_text()
    assert "| strategy | one | two |" in md and "| bsp | 0.50 | 0.50 |" in md
    scenarios.run_scenarios([one], str(tmp_path))
    assert "| strategy | one | two |" in (tmp_path / "summary.md").read_text()
    assert "| bsp | 1.00 | 0.50 |" in (tmp_path / "summary.md").read_text()
    assert set(json.loads((tmp_path / "summary.json").read_text())) == {"one", "two"}


def test_summary_of_the_earlier_format_is_read_not_lost(tmp_path):
    from tf_hetero.tools.scenarios import read_summary

    (tmp_path / "summary.json").write_text(json.dumps(
        {"one_slow": [{"strategy": "pss", "time_to_target_s": 49.4}]}))
    assert read_summary(str(tmp_path / "summary.json")) == {
        "one_slow": {"commit": None, "rows": [{"strategy": "pss", "time_to_target_s": 49.4}]}}


def test_contract_matrix_reads_each_cell_from_the_junit_report():
    """benchmarks/contract_matrix.py: the closing note's case x strategy matrix is built from the
    test run's report, so a failing or unrecorded cell shows as FAIL, never as a pass (its
    examples run in tests/test_doctests.py)."""
    import importlib.util

    from support import REPO

    spec = importlib.util.spec_from_file_location(
        "contract_matrix", os.path.join(REPO, "benchmarks", "contract_matrix.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    xml = ('<testsuites><testsuite><testcase name="test_compatibility[tensors-bsp]"/>'
           '<testcase name="test_compatibility[tensors-pss]"><skipped/></testcase>'
           '</testsuite></testsuites>')
    assert module.cells(xml) == {("tensors", "bsp"): "FAIL: passed without recording its cell",
                                 ("tensors", "pss"): "skipped"}
