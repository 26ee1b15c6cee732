"""`tf-hetero bench` end to end on a small budget (separate processes), and its inputs."""

from __future__ import annotations

import json
import os

import pytest

from conftest import cli

KEYS = {"strategy", "samples_per_sec", "efficiency", "time_to_target_s", "final_accuracy",
        "bytes_pushed_per_sample", "rounds"}


@pytest.mark.cluster
def test_bench_runs_strategies_side_by_side_with_the_stock_reference(tmp_path):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    env.pop("TF_CONFIG", None)
    out = tmp_path / "b.json"
    proc = cli("bench", "--strategies", "bsp,backup", "--tasks", "40", "--steps-per-epoch", "20",
               "--profile", "slow=3:3;base_ms=30", "--target-accuracy", "0.2",
               "--json", str(out), env=env)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    report = json.loads(out.read_text())
    rows = {r["strategy"]: r for r in report["results"]}
    assert list(rows) == ["pss", "bsp", "backup"]  # the reference row comes first
    for r in rows.values():
        assert KEYS <= set(r)
        assert 0 < r["efficiency"] < 1.2 and r["tasks"] == 40
    assert rows["bsp"]["rounds"] == 10 and rows["bsp"]["dropped_tasks"] == 0
    assert rows["backup"]["applied_tasks"] + rows["backup"]["dropped_tasks"] == 40
    assert rows["pss"]["rounds"] == 40
    md = (tmp_path / "b.md").read_text()
    assert "| ideal |" in md and "| bsp |" in md
    assert (tmp_path / "b.png").read_bytes()[:4] == b"\x89PNG"


def test_bench_config_rejects_unknown_strategy_and_adds_the_reference():
    from tf_hetero.tools.bench import BenchConfig

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
