"""Trains CASP's community agent in the simulator, and evaluates it on held-out profiles.

    python -m tf_hetero.tools.train_casp train                    # writes the shipped weights
    python -m tf_hetero.tools.train_casp eval --seeds 3           # the held-out table
    python -m tf_hetero.tools.train_casp train --sized            # the agent of batch_sizes=True

``train``: A3C (:class:`~tf_hetero.sim.a3c.A3C`, ``--learners`` interleaved
learners, each with its own :class:`~tf_hetero.sim.casp_env.SimEnv`) over the training
distribution of profiles (``--mild``: with the mild-spread kind too; off by default,
docs/CASP.md); writes the weights (default: the package's
``resources/casp_agent.npz``) and ``training.json``/``training.png`` (return per episode,
moving average, the agent's mean ``k``) under ``--out-dir``.

``eval``: on each held-out profile (:data:`~tf_hetero.sim.casp_env.HELD_OUT`), ``--seeds``
simulated runs each of CASP (greedy, the weights given), the k-means groupings grouped2 and
grouped3 (:class:`~tf_hetero.policies.SpeedGroups`), fixed groupings (two halves by index,
and the two speed classes the profile says, never re-formed), BSP and stock PSS; writes
``eval.json`` and ``eval.md`` (median time to 0.9 accuracy, traffic to target) under
``--out-dir``. A command: the library never imports it.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import time

import numpy as np

__all__ = ["main", "train", "evaluate"]

RESULTS = os.path.join("benchmarks", "results", "casp")


def train(episodes: int, learners: int, horizon_s: float, seed: int, every: int, lr: float,
          weights: str, out_dir: str, gamma: float = 0.95, entropy: float = 0.02,
          kind_weights=None, progress: str = "loss", sized: bool = False, log=print,
          mild: bool = False) -> dict:
    from tf_hetero.policies.community import MAX_K, STATE_SIZE, ActorCritic
    from tf_hetero.sim import costs as costs_module
    from tf_hetero.sim.a3c import A3C
    from tf_hetero.sim.casp_env import SimEnv, training_profile

    costs = costs_module.load(None)
    profiles = lambda rng: training_profile(rng, kind_weights, mild)  # noqa: E731
    net = ActorCritic(STATE_SIZE, MAX_K, hidden=32, seed=seed)
    envs = [SimEnv(costs, seed=seed * 100 + i, horizon_s=horizon_s, every=every,
                   profiles=profiles, progress=progress, sized=sized)
            for i in range(learners)]
    agent = A3C(net, envs, n_steps=5, gamma=gamma, lr=lr, entropy=entropy, seed=seed)
    t0 = time.time()
    rows = []

    def on_episode(item):
        ep, learner, ret, info = item
        rows.append({"episode": ep, "learner": learner, "return": ret,
                     "wall_s": time.time() - t0, **info})
        if (ep + 1) % 25 == 0:
            recent = rows[-50:]
            log(f"[train_casp] episode {ep + 1}/{episodes}: mean return "
                f"{statistics.mean(r['return'] for r in recent):+.2f}, mean k "
                f"{statistics.mean(r['mean_k'] or 1 for r in recent):.2f}, "
                f"{time.time() - t0:.0f} s")

    agent.train(episodes, on_episode)
    for e in envs:
        e.close()
    net.save(weights, episodes=episodes, learners=learners, horizon_s=horizon_s, seed=seed,
             every=every, gamma=gamma, entropy=entropy, wall_s=time.time() - t0,
             kind_weights=str(kind_weights), progress=progress, sized=int(sized), mild=int(mild))
    os.makedirs(out_dir, exist_ok=True)
    record = {"episodes": episodes, "learners": learners, "horizon_s": horizon_s,
              "seed": seed, "every": every, "lr": lr, "gamma": gamma, "entropy": entropy,
              "kind_weights": kind_weights, "mild": mild, "progress": progress,
              "sized": sized,
              "wall_s": time.time() - t0,
              "updates": agent.updates, "history": rows,
              "losses_every": 10, "losses": agent.losses[::10]}
    with open(os.path.join(out_dir, "training.json"), "w") as f:
        json.dump(record, f, indent=0, default=float)
    _plot_training(rows, os.path.join(out_dir, "training.png"))
    log(f"[train_casp] wrote {weights} and {out_dir}/training.json "
        f"({time.time() - t0:.0f} s, {agent.updates} updates)")
    return record


def _moving(xs, n=50):
    return [statistics.mean(xs[max(0, i - n + 1):i + 1]) for i in range(len(xs))]


def _plot_training(rows, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 3.5))
    ret = [r["return"] for r in rows]
    a.plot(ret, ".", alpha=0.3, label="episode return")
    a.plot(_moving(ret), label="moving mean (50)")
    a.set_xlabel("episode"), a.set_ylabel("return"), a.legend()
    ks = [r["mean_k"] or 1 for r in rows]
    b.plot(_moving(ks), label="mean k chosen (exploring)")
    b.set_xlabel("episode"), b.set_ylabel("k"), b.legend()
    fig.suptitle("CASP agent: A3C in the simulator")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


# ---------------------------------------------------------------------------- evaluation
def _traffic_to_target(result, param_bytes_per_task):
    """Bytes moved (reads and pushes) by the tasks that ended before the target was hit."""
    ttt = result["time_to_target_s"]
    if ttt is None:
        return None
    return sum(1 for (_, _, end, _) in result["timeline"] if end <= ttt) * param_bytes_per_task


def _run(name, n, spec, seed, rounds, costs, weights, sized=False):
    from tf_hetero.emulation.profile import Profile
    from tf_hetero.policies.community import CommunityGroups, communities, shipped_weights
    from tf_hetero.sim.casp_env import bench_config, casp_simulation
    from tf_hetero.sim.run import Simulation

    cfg = bench_config(n, spec, rounds=rounds, seed=seed)
    policy = None
    if name == "casp":  # sized: communities with per-member batch sizes, the sized agent
        policy = CommunityGroups(weights or shipped_weights(sized))
        sim = casp_simulation(cfg, costs, policy, sized=sized)
    elif name.startswith("fixed"):
        if name == "fixed-halves":
            groups = [list(range(n // 2)), list(range(n // 2, n))]
        else:  # the profile's two speed classes (expected slowdowns), never re-formed
            slow = Profile.parse(spec).expected_slowdowns(n)
            groups = [list(g) for g in communities(dict(enumerate(slow)), 2)]
        sim = _fixed_simulation(groups, cfg, costs)
    else:
        sim = Simulation(name, cfg, costs, learn=True)
    result = sim.result(sim.fit())
    per_task = 2 * sim.dispatcher.param_bytes * costs.wire_factor
    ks = [d[1] for d in policy.decisions] if policy is not None else []
    return {"strategy": name, "workers": n, "profile": spec, "seed": seed,
            "time_to_target_s": result["time_to_target_s"],
            "final_accuracy": result["final_accuracy"],
            "fit_s": result["fit_wall_s"],
            "mb_to_target": (None if result["time_to_target_s"] is None
                             else _traffic_to_target(result, per_task) / 1e6),
            "mb_total": len(result["timeline"]) * per_task / 1e6,
            "ks": ks}


def _fixed_simulation(groups, cfg, costs):
    """A simulation of grouped sync with fixed ``groups`` (registered for the moment under a
    name of its own: the simulator builds strategies by registry name)."""
    from tf_hetero.sim.run import Simulation
    from tf_hetero.strategies import config as configs, registry

    registry.register("evalfixed", lambda resolver, arg: None, replace=True,
                      updates=lambda n, a: n,
                      config=lambda n, a: configs.grouped(n, groups=groups))
    try:
        return Simulation("evalfixed", cfg, costs, learn=True)
    finally:
        registry.unregister("evalfixed")


EVAL_STRATEGIES = ("casp", "grouped2", "grouped3", "fixed-halves", "fixed-classes", "bsp", "pss")


def evaluate(seeds: int, rounds: int, weights: str | None, out_dir: str,
             strategies=EVAL_STRATEGIES, sized: bool = False, log=print) -> list:
    from tf_hetero.sim import costs as costs_module
    from tf_hetero.sim.casp_env import HELD_OUT

    costs = costs_module.load(None)
    rows = []
    t0 = time.time()
    for n, spec in HELD_OUT:
        for name in strategies:
            for seed in range(seeds):
                rows.append(_run(name, n, spec, seed, rounds, costs, weights, sized))
        log(f"[train_casp] {n} workers, {spec!r}: done ({time.time() - t0:.0f} s)")
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "eval.json"), "w") as f:
        json.dump({"seeds": seeds, "rounds": rounds, "weights": weights, "sized": sized,
                   "rows": rows}, f,
                  indent=0, default=float)
    with open(os.path.join(out_dir, "eval.md"), "w") as f:
        f.write(eval_table(rows, strategies, seeds, rounds))
    log(f"[train_casp] wrote {out_dir}/eval.md")
    return rows


def _median(xs):
    """Median with "not reached" (None) counted as infinitely slow."""
    vals = sorted(math.inf if x is None else x for x in xs)
    m = statistics.median(vals) if vals else math.inf
    return None if math.isinf(m) else m


def eval_table(rows, strategies, seeds, rounds) -> str:
    """Markdown: one row per held-out profile, time to target (median of seeds) per strategy,
    then traffic to target, then CASP's mean k; and a summary against k-means.

    >>> rows = [{"strategy": s, "workers": 4, "profile": "slow=3:5", "seed": 0,
    ...          "time_to_target_s": t, "mb_to_target": 1.0, "final_accuracy": 0.95,
    ...          "ks": [2]} for s, t in (("casp", 8.0), ("grouped2", 9.0))]
    >>> table = eval_table(rows, ("casp", "grouped2"), 1, 80).splitlines()
    >>> print(table[4])
    | 4 | `slow=3:5` | 8.0 | 9.0 | 1.0 | 1.0 | 2.0 |
    >>> print(table[-1])
    | grouped2 | 1 | 9.0 | 1.12 | 1.0 | 0.950 |
    """
    profiles = list(dict.fromkeys((r["workers"], r["profile"]) for r in rows))

    def cell(n, spec, s, key):
        return _median([r[key] for r in rows if (r["workers"], r["profile"], r["strategy"])
                        == (n, spec, s)])

    head = (["workers", "profile"] + [f"{s} s" for s in strategies]
            + [f"{s} MB" for s in strategies] + ["casp mean k"])
    out = [f"Held-out profiles, simulated ({rounds} BSP-sized rounds of digits MLP, 2 PS; "
           f"median of {seeds} seeds). Time to 0.9 accuracy (s; - = not reached) and traffic "
           "to target (MB read + pushed by the tasks before it).", "",
           "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    fmt = lambda v: "-" if v is None else f"{v:.1f}"  # noqa: E731
    wins = {s: [0, 0, 0] for s in strategies if s != "casp"}  # casp faster, tie, slower
    for n, spec in profiles:
        ttt = {s: cell(n, spec, s, "time_to_target_s") for s in strategies}
        mb = {s: cell(n, spec, s, "mb_to_target") for s in strategies}
        ks = [k for r in rows if (r["workers"], r["profile"], r["strategy"]) == (n, spec, "casp")
              for k in r["ks"]]
        out.append("| " + " | ".join([str(n), f"`{spec}`"] + [fmt(ttt[s]) for s in strategies]
                                      + [fmt(mb[s]) for s in strategies]
                                      + [fmt(sum(ks) / len(ks) if ks else None)]) + " |")
        c = math.inf if ttt.get("casp") is None else ttt["casp"]
        for s in wins:
            o = math.inf if ttt[s] is None else ttt[s]
            wins[s][0 if c < o else 1 if c == o else 2] += 1
    out += ["", "CASP against each (profiles where CASP's median time to target is lower / "
            "equal / higher): " + "; ".join(f"{s} {a}/{b}/{c}" for s, (a, b, c) in wins.items()),
            "", "Over the profiles: reached (of " + str(len(profiles)) + "), mean time to target "
            "where reached, time / CASP's (geometric mean over the profiles both reach), mean "
            "traffic to target where reached, mean final accuracy (median of seeds).", "",
            "| strategy | reached | mean s | vs casp | mean MB | final accuracy |",
            "|---|---:|---:|---:|---:|---:|"]
    for s in strategies:
        ttt = [cell(n, spec, s, "time_to_target_s") for n, spec in profiles]
        mb = [cell(n, spec, s, "mb_to_target") for n, spec in profiles]
        acc = [cell(n, spec, s, "final_accuracy") for n, spec in profiles]
        base = [cell(n, spec, "casp", "time_to_target_s") for n, spec in profiles]
        ratios = [math.log(t / b) for t, b in zip(ttt, base) if t and b]
        reached = [t for t in ttt if t is not None]
        out.append(f"| {s} | {len(reached)} | {fmt(statistics.mean(reached) if reached else None)}"
                   f" | {math.exp(statistics.mean(ratios)) if ratios else math.nan:.2f} | "
                   f"{fmt(statistics.mean([m for m in mb if m is not None]) if reached else None)}"
                   f" | {statistics.mean(a for a in acc if a is not None):.3f} |")
    return "\n".join(out) + "\n"


def validate(weights: str | None, profiles: int = 24, seed: int = 12345,
             strategies=("casp", "bsp", "grouped2"), rounds: int = 80,
             path: str | None = None, sized: bool = False, log=print,
             mild: bool = False) -> dict:
    """Time to target over ``profiles`` profiles of the *training* distribution (a seed no
    learner used): to choose between agents without looking at the held-out set. Writes
    ``path`` (JSON) if given."""
    from tf_hetero.sim import costs as costs_module
    from tf_hetero.sim.casp_env import training_profile

    costs = costs_module.load(None)
    rng = np.random.default_rng(seed)
    drawn = [training_profile(rng, mild=mild) for _ in range(profiles)]
    figures = {"weights": weights, "profiles": drawn}
    for name in strategies:
        times = [_run(name, n, spec, 0, rounds, costs, weights, sized)["time_to_target_s"]
                 for n, spec in drawn]
        reached = [t for t in times if t is not None]
        figures[name] = {"mean_s_reached": statistics.mean(reached) if reached else None,
                         "not_reached": len(times) - len(reached),
                         "median_s": _median(times), "times": times}
        log(f"[train_casp] validation {name}: mean {figures[name]['mean_s_reached']}, "
            f"median {figures[name]['median_s']}, not reached {figures[name]['not_reached']}")
    if path:
        with open(path, "w") as f:
            json.dump(figures, f, indent=0)
    return figures


def main(argv=None) -> int:
    from tf_hetero.policies.community import shipped_weights

    sized_help = ("communities with per-member batch sizes (CASPStrategy(batch_sizes=True)); "
                  "train: writes the sized agent (default weights "
                  "tf_hetero/resources/casp_agent_sized.npz, out dir .../casp/sized)")

    p = argparse.ArgumentParser(prog="python -m tf_hetero.tools.train_casp",
                                description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("train", help="train the agent (A3C in the simulator)")
    t.add_argument("--episodes", type=int, default=2000)
    t.add_argument("--learners", type=int, default=4)
    t.add_argument("--progress", choices=("loss", "accuracy"), default="accuracy",
                   help="reward: log-loss decrease per second, or time to the target "
                        "accuracy (tf_hetero.sim.casp_env)")
    t.add_argument("--horizon", type=float, default=None,
                   help="virtual seconds of training per episode (default: 12 for loss, "
                        "25 for accuracy)")
    t.add_argument("--gamma", type=float, default=0.95)
    t.add_argument("--entropy", type=float, default=0.02, help="entropy bonus (exploration)")
    t.add_argument("--kind-weights", default=None,
                   help="comma list: how often each kind of profile is drawn "
                        "(tf_hetero.sim.casp_env.KINDS order; default: equally)")
    t.add_argument("--every", type=int, default=10, help="applied updates between decisions")
    t.add_argument("--lr", type=float, default=3e-3)
    t.add_argument("--seed", type=int, default=0)
    t.add_argument("--weights", default=None, help="default: the shipped agent's path")
    t.add_argument("--out-dir", default=None, help=f"default: {RESULTS}")
    e = sub.add_parser("eval", help="held-out profiles: CASP vs k-means, fixed, BSP, PSS")
    e.add_argument("--seeds", type=int, default=3)
    e.add_argument("--rounds", type=int, default=80)
    e.add_argument("--weights", default=None, help="agent .npz (default: the shipped one)")
    e.add_argument("--strategies", default=",".join(EVAL_STRATEGIES))
    e.add_argument("--out-dir", default=None, help=f"default: {RESULTS} (--sized: .../sized)")
    v = sub.add_parser("validate", help="training-distribution profiles: compare agents")
    v.add_argument("--weights", default=None)
    v.add_argument("--profiles", type=int, default=24)
    v.add_argument("--strategies", default="casp,bsp,grouped2")
    v.add_argument("--json", default=None, help="write the figures here")
    for parser in (t, e, v):
        parser.add_argument("--sized", action="store_true", help=sized_help)
    for parser in (t, v):
        parser.add_argument("--mild", action="store_true",
                            help="also draw the 'mild' kind of profile (workers 1.1-1.5x "
                                 "apart; not in the shipped agents' training, docs/CASP.md)")
    a = p.parse_args(argv)
    if a.cmd in ("train", "eval"):  # validate writes only --json
        out_dir = a.out_dir or (os.path.join(RESULTS, "sized") if a.sized else RESULTS)
    if a.cmd == "train":
        horizon = a.horizon or (12.0 if a.progress == "loss" else 25.0)
        weights = a.weights or shipped_weights(a.sized)
        train(a.episodes, a.learners, horizon, a.seed, a.every, a.lr, weights, out_dir,
              a.gamma, a.entropy,
              None if a.kind_weights is None else [float(x) for x in a.kind_weights.split(",")],
              a.progress, a.sized, mild=a.mild)
    elif a.cmd == "validate":
        validate(a.weights, a.profiles, strategies=tuple(a.strategies.split(",")),
                 path=a.json, sized=a.sized, mild=a.mild)
    else:
        evaluate(a.seeds, a.rounds, a.weights, out_dir, tuple(a.strategies.split(",")),
                 a.sized)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
