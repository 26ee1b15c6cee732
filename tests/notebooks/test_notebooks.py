"""The Colab notebooks run top to bottom (small settings) in a fresh kernel."""

from __future__ import annotations

import re

import pytest

from support.notebooks import SMALL, outputs, run_notebook

pytestmark = pytest.mark.cluster

#: What each notebook must show besides a plot (text in its outputs).
EXPECT = {"quickstart.ipynb": ["| worker |", "efficiency", "epoch 1/1 done"],
          "epsp.ipynb": ["| round | participants | stragglers |", "straggler_rounds",
                         "epoch 1/1 done"],
          "hps.ipynb": ["| round | ms/sample (per worker) | batch (per worker) |", "(slowdown)",
                        "settles at", "bytes per push", "epoch 1/1 done"],
          "grouped.ipynb": ["| stretch | groups |", "regroups:", "group_max_staleness",
                            "| grouped |"],
          "casp.ipynb": ["measured task time per worker", "| stretch | communities |",
                         "decisions:", "casp_mean_k", "| strategy | time to 0.8 s |",
                         "| casp |"],
          "keras3.ipynb": ["keras 3.", "| worker |", "**stock PSS (async)**",
                           "**H-PS (sized rounds)**", "HPSStrategy: this fit runs",
                           "evaluate on the workers:", "predictions equal: True"],
          "psld.ipynb": ["| run | rounds | bytes per step", "| rebalance, after the last move |",
                         "moves:", "decision 0 (probe before the first round)",
                         "moves before the first round; mean round ms of the round-robin run",
                         "placement at the end:", "epoch 1/1 done"]}


@pytest.mark.parametrize("name", sorted(SMALL))
def test_notebook_runs_and_shows_plot(name, tmp_path, monkeypatch):
    monkeypatch.setenv("TF_CPP_MIN_LOG_LEVEL", "2")
    nb = run_notebook(name, SMALL[name], str(tmp_path))
    assert not list(outputs(nb, "error"))
    images = [o for o in outputs(nb) if "image/png" in o.get("data", {})]
    assert images, "the notebook shows no plot"
    text = "".join(o.get("text", "") for o in outputs(nb, "stream"))
    text += "".join(o["data"].get("text/markdown", "") for o in outputs(nb, "display_data"))
    for expected in EXPECT[name]:
        assert expected in text, expected
    if name == "grouped.ipynb":  # the straggler ends in a group of its own
        assert "groups at the end: [[0], [1, 2]]" in text, text
    if name == "casp.ipynb":  # the agent split the straggler off; the others stay together
        assert "communities at the end: [[0, 1], [2]]" in text, text
    if name == "psld.ipynb":  # rebalancing moved both 32 KB kernels off the slow PS
        assert ("variables over 10 KB on the slow PS 1: 2 of 2 at the start, 0 of 2 at the "
                "end") in text, text
    if name == "hps.ipynb":  # the slowed worker's batch must shrink, not just be printed
        m = re.search(r"batch (\d+) samples before the slowdown, settles at (\d+)", text)
        assert m and int(m.group(2)) < int(m.group(1)), m and m.group(0)
