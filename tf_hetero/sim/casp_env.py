"""The CASP agent's environment: simulated training runs (:class:`~tf_hetero.sim.run.Simulation`,
the real engine and the digits learner) over a distribution of heterogeneity profiles, with
the agent choosing the number of communities at the policy's decision points
(:class:`~tf_hetero.policies.community.CommunityGroups`).

An episode is the first ``horizon_s`` virtual seconds of a simulated ``fit`` on a profile
drawn by :func:`training_profile` (a sample budget no configuration exhausts by then). Its
steps are the policy's decisions (every ``every`` applied updates). A decision's reward is
its progress per second, ``-(ln L' - ln L) / dt`` (L the held-out log loss of the learner's
parameters at this decision and the next), minus ``TRAFFIC_COST`` times the bytes moved per
second as a share of what all workers at the fastest speed would move, weighted by the
``dt`` it lasted (a semi-Markov decision: decisions come every ``every`` updates, not every
second) and times :data:`REWARD_SCALE`. So an episode's return is the horizon's mean
progress per second (net of traffic) times ``horizon_s x REWARD_SCALE``: the agent is
trained to make the loss fall fastest, and never credited for a decision just because it
makes decisions come more often.

``progress="accuracy"`` measures progress toward the bench's target instead: an episode ends
when the held-out accuracy reaches ``target`` (or at ``horizon_s``), and a decision's reward
is ``-dt`` (scaled by ``1 / horizon_s``) minus the same traffic term: the return is minus
the time to target (as a share of the horizon), net of traffic, the figure the evaluation
compares. (Progress per second in accuracy, with the episode ending at the target.)

The simulation runs in a thread of its own that stops at each decision and waits for the
action (:meth:`SimEnv.step`): one thread runs at a time, so an episode is reproducible.

Held-out profiles (:data:`HELD_OUT`) use worker counts (7, 10) or factors (2.5, 3.5, 5)
that :func:`training_profile` never draws.

>>> import numpy as np
>>> n, spec = training_profile(np.random.default_rng(0))
>>> from tf_hetero.emulation.profile import Profile
>>> Profile.parse(spec).check_workers(n)
>>> sorted({n for n, _ in HELD_OUT}) == [4, 6, 7, 8, 10]
True
"""

from __future__ import annotations

import dataclasses
import math
import queue
import threading
from types import SimpleNamespace

import numpy as np

from tf_hetero.policies.community import MAX_K, CommunityGroups

__all__ = ["SimEnv", "training_profile", "HELD_OUT", "bench_config", "casp_simulation",
           "REWARD_SCALE", "TRAFFIC_COST", "log_loss"]

#: Rewards are progress in log loss (a run falls by ~2 in its first 10 s) times this.
REWARD_SCALE = 1.0
#: Reward per second per unit of traffic rate (share of the all-fast cluster's bytes/s): a
#: cluster moving bytes at the all-fast rate for 10 s pays 0.2, ~10% of its progress. Every task here pushes
#: its gradient and reads the model, so bytes per sample do not depend on ``k``; the term
#: makes bytes that buy no progress (staler, smaller updates) cost something.
TRAFFIC_COST = 0.02

# Worker counts and factors drawn in training; HELD_OUT uses others (see the module).
_TRAIN_N = (4, 5, 6, 8)
_TRAIN_F = (1.5, 2.0, 3.0, 4.0, 6.0)

#: Held-out evaluation profiles: (workers, profile).
HELD_OUT = (
    (4, "slow=3:5"),
    (7, "slow=5:2.5,6:5"),
    (10, "classes=a:6@1,b:3@2.5,c:1@5"),
    (6, "straggle=0.2x3;seed=3"),
    (8, "change=7@40:5"),
    (7, "slow=6:3.5;straggle=0.05x4;seed=5"),
    (10, "slowdowns=1,1,1.1,1.1,1.2,1.2,1.3,1.3,1.4,1.4"),
    (6, "slow=4:2.5,5:2.5;change=0@30:5"),
)


#: The kinds of :func:`training_profile`, in order.
KINDS = ("uniform", "one slow", "two slow", "classes", "stragglers", "change", "slow+stragglers",
         "mild")
# "mild" is last: without ``mild`` the draw is among the first seven, the distribution the
# shipped agents were trained on, so ``train`` reproduces them. With it, training made no
# better agent (``train_casp train --mild``; docs/CASP.md, "What is not done").

# Largest slowdowns of the "mild" kind: every worker's factor drawn from [1, m] (workers
# 1.1-1.5x apart, which the other kinds never draw; docs/CASP.md).
_MILD_SPREADS = (1.1, 1.25, 1.5)


def training_profile(rng, kind_weights=None, mild: bool = False) -> tuple:
    """A random (workers, profile) of the training distribution: one of :data:`KINDS`
    (uniform, one or two slow workers, two hardware classes, transient stragglers, a worker
    slowing down mid-run, a slow worker with transient stragglers; and with ``mild`` a mild
    spread: every worker 1-1.1x, 1-1.25x or 1-1.5x slower than the fastest), drawn with
    ``kind_weights`` (one per kind of :data:`KINDS`, ``mild`` then unused; default: equally
    likely)."""
    n = int(rng.choice(_TRAIN_N))
    f = float(rng.choice(_TRAIN_F))
    if kind_weights is None:
        kind = int(rng.choice(len(KINDS) if mild else len(KINDS) - 1))
    else:
        if len(kind_weights) != len(KINDS):
            raise ValueError(f"kind_weights={list(kind_weights)}: need {len(KINDS)} weights, "
                             f"one per kind of {KINDS}.")
        p = np.asarray(kind_weights, float) / sum(kind_weights)
        kind = int(rng.choice(len(KINDS), p=p))
    w = [int(x) for x in rng.permutation(n)]
    if kind == 0:
        spec = ""
    elif kind == 1:
        spec = f"slow={w[0]}:{f}"
    elif kind == 2:
        spec = f"slow={w[0]}:{f},{w[1]}:{float(rng.choice(_TRAIN_F))}"
    elif kind == 3:
        slow = int(rng.integers(1, n // 2 + 1))
        spec = f"classes=a:{n - slow}@1,b:{slow}@{f}"
    elif kind == 4:
        spec = f"straggle={float(rng.choice((0.05, 0.1, 0.3)))}x{f}"
    elif kind == 5:
        spec = f"change={w[0]}@{int(rng.integers(10, 60))}:{f}"
    elif kind == 6:
        spec = f"slow={w[0]}:{f};straggle=0.1x{float(rng.choice(_TRAIN_F))}"
    else:
        spread = float(rng.choice(_MILD_SPREADS))
        factors = 1.0 + rng.random(n) * (spread - 1.0)
        factors[w[0]] = 1.0  # the fastest sets the scale
        spec = "slowdowns=" + ",".join(f"{x:.2f}" for x in factors)
    seed = int(rng.integers(1000))
    return n, f"{spec};seed={seed}" if spec else f"seed={seed}"


def bench_config(workers: int, profile: str, *, rounds: int = 80, seed: int = 0,
                 target: float = 0.9):
    """The bench's settings for a simulated run of ``rounds`` BSP-sized rounds (``rounds``
    x ``workers`` micro-batches in 4 epochs), as ``tf-hetero sim`` uses them."""
    return SimpleNamespace(
        workers=workers, ps=2, profile=profile, batch_size=32, tasks=rounds * workers,
        steps_per_epoch=max(1, rounds * workers // 4), steps_per_execution=1, base_lr=0.02,
        momentum=0.9, target_accuracy=target, eval_interval_s=0.5, seed=seed,
        warmup_updates=0, dataset="digits")


def casp_simulation(cfg, costs, policy: CommunityGroups, learn: bool = True,
                    sized: bool = False):
    """A :class:`~tf_hetero.sim.run.Simulation` of CASP with ``policy`` as its grouping
    (the registry's ``casp`` builds the shipped agent; training needs its own policy);
    ``sized``: each community's batches split across its members by speed
    (``CASPStrategy(batch_sizes=True)``)."""
    from tf_hetero.sim.run import Simulation

    # grouped1 has CASP's books (one community at the start), rounds and update rule.
    sim = Simulation("groupedsized1" if sized else "grouped1", cfg, costs, learn=learn)
    sim.engine.grouping = policy
    sim.config = dataclasses.replace(sim.config, name="caspsized" if sized else "casp",
                                     grouping=policy)
    sim.monitor.add_summary(policy.summary)
    return sim


def log_loss(learner) -> float:
    """Held-out cross-entropy of ``learner``'s current parameters."""
    layers = learner.layers(learner.params)
    h = learner.x_test
    for i in range(0, len(layers) - 2, 2):
        h = np.maximum(h @ layers[i] + layers[i + 1], 0.0)
    logits = h @ layers[-2] + layers[-1]
    logits = logits - logits.max(axis=1, keepdims=True)
    logp = logits - np.log(np.exp(logits).sum(axis=1, keepdims=True))
    return float(-logp[np.arange(len(learner.y_test)), learner.y_test].mean())


class _Stop(Exception):
    """Unwinds an abandoned episode's simulation thread."""


class SimEnv:
    """One A3C learner's environment (module docstring). ``profiles(rng) -> (workers,
    profile)`` draws an episode's cluster; ``rounds`` its length in BSP-sized rounds.

    ``sized``: communities with per-member batch sizes (the agent of
    ``CASPStrategy(batch_sizes=True)``).

    ``reset() -> state``; ``step(action) -> (state, reward, done, info)``; ``info`` of the
    last step: ``workers``, ``profile``, ``time_to_target_s``, ``fit_s``, ``mean_k``.
    """

    def __init__(self, costs, *, seed: int = 0, profiles=training_profile,
                 horizon_s: float = 12.0, rounds: int = 400, every: int = 10,
                 reward_scale: float = REWARD_SCALE, traffic_cost: float = TRAFFIC_COST,
                 progress: str = "loss", target: float = 0.9, sized: bool = False):
        if progress not in ("loss", "accuracy"):
            raise ValueError(f"SimEnv(progress={progress!r}): use 'loss' or 'accuracy'.")
        self.progress, self.target, self.sized = progress, target, sized
        self.costs, self.profiles, self.rounds, self.every = costs, profiles, rounds, every
        self.horizon_s = horizon_s
        self.reward_scale, self.traffic_cost = reward_scale, traffic_cost
        self.rng = np.random.default_rng(seed)
        self._thread = None
        self._to_env: queue.Queue = queue.Queue()
        self._to_sim: queue.Queue = queue.Queue()

    # ------------------------------------------------------------------ the agent's side
    def reset(self):
        self.close()
        while True:
            n, spec = self.profiles(self.rng)
            self._start(n, spec, int(self.rng.integers(1 << 30)))
            kind, payload = self._to_env.get()
            if kind == "state":
                return payload
            if kind == "error":
                raise payload
            # The run ended before any decision (too short): draw another.

    def step(self, action: int):
        self._to_sim.put(int(action))
        kind, payload = self._to_env.get()
        if kind == "error":
            raise payload
        if kind == "state":
            state, reward = payload
            return state, reward, False, {}
        reward, info = payload
        self._thread.join()
        self._thread = None
        return np.zeros_like(self._state), reward, True, info

    def close(self) -> None:
        if self._thread is not None:
            self._to_sim.put(None)  # the chooser raises _Stop
            self._thread.join()
            self._thread = None
        self._to_env, self._to_sim = queue.Queue(), queue.Queue()

    # ------------------------------------------------------------- the simulation's side
    def _start(self, n: int, spec: str, seed: int) -> None:
        self._last = None  # (time, log loss, tasks) at the previous decision
        self._reached = False
        self._state = None
        cfg = bench_config(n, spec, rounds=self.rounds, seed=seed % 1000)
        to_env, to_sim = self._to_env, self._to_sim

        def chooser(state):
            reward = self._reward()
            self._state = state
            if self._sim.loop.now >= self.horizon_s or self._reached:  # the episode ends
                to_env.put(("done", (reward or 0.0, self._info(n, spec, policy))))
                raise _Stop()
            to_env.put(("state", state if reward is None else (state, reward)))
            action = to_sim.get()
            if action is None:
                raise _Stop()
            return action

        policy = CommunityGroups(chooser=chooser, every=self.every, max_k=MAX_K)

        def run():
            try:
                self._sim = sim = casp_simulation(cfg, self.costs, policy, sized=self.sized)
                sim.fit()  # the budget ran out before the horizon
                reward = self._reward()
                to_env.put(("done", (reward or 0.0, self._info(n, spec, policy))))
            except _Stop:
                pass  # abandoned by close()
            except BaseException as e:  # pylint: disable=broad-except
                to_env.put(("error", e))

        self._thread = threading.Thread(target=run, daemon=True, name="casp-env")
        self._thread.start()

    def _info(self, n, spec, policy) -> dict:
        from tf_hetero.telemetry import perf

        sim = self._sim
        sim.learner.sample(sim.loop.now)
        ks = [d[1] for d in policy.decisions]
        return {"workers": n, "profile": spec, "t_s": sim.loop.now,
                "time_to_target_s": perf.time_to_target(sim.learner.curve, 0.9),
                "accuracy": sim.learner.accuracy(), "log_loss": self._last[1],
                "mean_k": sum(ks) / len(ks) if ks else None}

    def _reward(self):
        """The reward of the previous decision (None at the first), measured now."""
        sim = self._sim
        if self.progress == "accuracy":
            self._reached = sim.learner.accuracy() >= self.target
            # time as the "loss": every second spent before the target costs 1 / horizon_s
            now, loss = sim.loop.now, sim.loop.now / self.horizon_s
        else:
            now, loss = sim.loop.now, math.log(max(log_loss(sim.learner), 1e-6))
        tasks = len(sim.monitor.tasks)
        last, self._last = self._last, (now, loss, tasks)
        if last is None or now <= last[0]:
            return None if last is None else 0.0
        dt = now - last[0]
        share = (tasks - last[2]) / dt * _fast_task_s(sim) / sim.cfg.workers
        # (progress per second - traffic term) x the seconds this decision lasted
        return self.reward_scale * ((last[1] - loss) / dt - self.traffic_cost * share) * dt


def _fast_task_s(sim) -> float:
    """The fastest worker's measured median task time (the all-fast rate's unit)."""
    best = math.inf
    for w in range(sim.cfg.workers):
        d = sim.monitor.durations(w)
        if d:
            best = min(best, float(np.median(d)))
    return best if math.isfinite(best) else 1.0

