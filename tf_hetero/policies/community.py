"""Community-aware synchronous parallel (CASP, after Petrel): communities of workers of similar
speed, synchronous inside a community and asynchronous between communities (the grouped
engine: one book per community), with the community configuration chosen by a small
actor-critic agent (:class:`ActorCritic`) trained by A3C in the simulator
(:mod:`tf_hetero.sim.a3c`, :mod:`tf_hetero.sim.casp_env`). This module holds what the policy
runs: the action space, the state, the network's forward pass and its shipped weights.

**Action space.** An action is the number of communities ``k`` in ``1..max_k`` (default 4);
the assignment is the optimal 1-D split of the workers sorted by projected task time into
``k`` contiguous communities (exact k-means on log task times, :meth:`SpeedGroups.split`),
with neighbours of one speed (within :data:`MERGE_RATIO`) merged back: ``k`` is an upper
bound, so a large ``k`` never splits equal workers.
Why this is enough, and small:

- A community waits for its slowest member at each round, so the best partition for a given
  ``k`` never interleaves speeds: if a fast worker sat with slower ones while a slower
  worker sat with faster ones, swapping them shortens one barrier without lengthening the
  other. Contiguous splits of the sorted workers are therefore the only candidates worth
  learning, and the best of them for a given ``k`` is found exactly by dynamic programming.
- What is left is a trade-off no formula settles: more communities waste less time at
  barriers but make updates staler and smaller (each applies its own mean gradient). That
  is a choice among ``max_k`` values, whatever the number of workers: the policy's output
  layer has ``max_k`` units, for 4 workers or 1000. (The full space, set partitions, is the
  Bell number: 4,140 for 8 workers.)

**State** (:func:`state_features`, fixed length :data:`STATE_SIZE` for any worker count):
per-worker speed as log(task time / fastest), pooled into quantiles and shares above 1.5x
and 3x; the barrier idle fraction of the best split for each ``k`` (what a community
configuration would waste on the measured speeds); the variance of each worker's recent task
times (coefficient of variation: transient stragglers), mean and max; log of the worker
count; the current ``k`` (one-hot); recent progress and traffic: the share of the all-fast
task rate the cluster achieved since the last decision (every task reads the model and pushes
one gradient, so this is also the traffic rate), the mean staleness of the applied
updates, and log of the tasks finished so far (progress slows as training goes on, which
the critic must know to judge a decision). The loss is not in the state: a cluster's chief does not evaluate it between rounds,
so the agent sees only what the monitor measures; the loss drives the reward in training.

**Reward** (simulator, :mod:`tf_hetero.sim.casp_env`): progress per second, the decrease of
the held-out log loss between two decisions divided by the virtual seconds between them,
minus a traffic term (bytes moved per second, normalized).

**Online adaptation.** :class:`CommunityGroups` decides at round boundaries, every ``every``
applied updates (as :class:`SpeedGroups`' ``regroup_every``), greedily by default; a new
``k`` re-forms the communities at once, the same ``k`` only when the new split cuts the idle
time by ``min_gain`` (no flapping).

>>> times = {0: 0.1, 1: 0.11, 2: 0.1, 3: 0.4}
>>> communities(times, 2)
((0, 1, 2), (3,))
>>> communities(times, 4)       # at most 4: workers of one speed stay together
((0, 1, 2), (3,))
>>> state_features(times, {w: 0.0 for w in times}, current_k=1).shape == (STATE_SIZE,)
True
"""

from __future__ import annotations

import math
import os
import threading
from typing import Callable, Mapping, Sequence

import numpy as np

from tf_hetero.policies.estimate import DEFAULT_ALPHA, smoothed_time, unit_histories
from tf_hetero.policies.group import GroupContext, SpeedGroups, _Figures, normalize_groups

__all__ = ["MAX_K", "MERGE_RATIO", "STATE_SIZE", "DEFAULT_WEIGHTS", "SIZED_WEIGHTS",
           "shipped_weights", "communities", "state_features", "ActorCritic", "CommunityGroups"]

#: Largest number of communities the agent may choose (its output layer's size).
MAX_K = 4
_QUANTILES = (0.5, 0.75, 0.9, 1.0)
#: Length of the state vector (:func:`state_features`).
STATE_SIZE = len(_QUANTILES) + 2 + MAX_K + 2 + 1 + MAX_K + 3
#: The trained agent shipped with the package (``python -m tf_hetero.tools.train_casp``).
DEFAULT_WEIGHTS = os.path.join(os.path.dirname(os.path.dirname(__file__)), "resources",
                               "casp_agent.npz")
#: The agent trained on communities with per-member batch sizes (``train_casp train
#: --sized``; ``CASPStrategy(batch_sizes=True)``): inside such a community a slower member
#: costs a smaller share, not a wait, so the best number of communities differs.
SIZED_WEIGHTS = os.path.join(os.path.dirname(DEFAULT_WEIGHTS), "casp_agent_sized.npz")


def shipped_weights(sized: bool = False) -> str:
    """The shipped agent for communities with (``sized``) or without per-member batch sizes.

    >>> os.path.basename(shipped_weights(sized=True))
    'casp_agent_sized.npz'
    """
    return SIZED_WEIGHTS if sized else DEFAULT_WEIGHTS

_LOG8 = math.log(8.0)  # speeds are scaled so that an 8x straggler is 1.0
#: Communities whose workers are all within this factor of each other are one: a barrier
#: then wastes at most 20% of its fastest member's time, less than the staleness a split
#: adds (measured in the simulator: grouped sync on equal workers is slower than BSP).
MERGE_RATIO = 1.25


def communities(times: Mapping[int, float], k: int, merge: float = MERGE_RATIO) -> tuple:
    """The action's assignment: the workers sorted by task time, cut into ``min(k, workers)``
    contiguous communities by exact 1-D k-means on log task times; then neighbouring
    communities whose members are all within ``merge`` x of each other are merged again
    (splitting workers of one speed buys nothing and makes updates staler): at most ``k``
    communities.

    >>> communities({0: 1.0, 1: 1.0, 2: 3.0, 3: 3.1, 4: 9.0}, 3)
    ((0, 1), (2, 3), (4,))
    >>> communities({0: 1.0, 1: 1.0, 2: 1.0, 3: 4.0}, 3)     # two speeds: two communities
    ((0, 1, 2), (3,))
    """
    if not isinstance(k, (int, np.integer)) or k < 1:
        raise ValueError(f"k={k!r}: need a number of communities >= 1.")
    split = SpeedGroups(int(min(k, len(times)))).split(times)
    ordered = sorted(split, key=lambda g: min(times[w] for w in g))
    merged = [list(ordered[0])]
    for g in ordered[1:]:
        both = merged[-1] + list(g)
        if max(times[w] for w in both) <= merge * min(times[w] for w in both):
            merged[-1] = both
        else:
            merged.append(list(g))
    return normalize_groups(merged)


def state_features(times: Mapping[int, float], cvs: Mapping[int, float], current_k: int,
                   rate: float = 0.0, staleness: float = 0.0, tasks_done: int = 0,
                   max_k: int = MAX_K) -> np.ndarray:
    """The agent's state (module docstring): ``times`` smoothed task time per worker,
    ``cvs`` coefficient of variation of each worker's recent task times, ``current_k``
    communities now, ``rate`` the achieved share of the all-fast task rate since the last
    decision, ``staleness`` the mean staleness of the updates applied since then,
    ``tasks_done`` the tasks finished so far (how far training is: progress slows down).

    >>> s = state_features({0: 1.0, 1: 1.0, 2: 1.0, 3: 4.0}, {}, current_k=2)
    >>> [round(float(v), 2) for v in s[:6]]      # quantiles of log(t / t_min) / log 8, shares
    [0.0, 0.17, 0.47, 0.67, 0.25, 0.25]
    >>> [round(float(v), 2) for v in s[6:10]]    # idle fraction of the best split, k = 1..4
    [0.56, 0.0, 0.0, 0.0]
    """
    n = len(times)
    if n == 0:
        raise ValueError("state_features: no worker times; need one per worker.")
    t = np.array([times[w] for w in sorted(times)], dtype=float)
    if not np.all(np.isfinite(t)) or np.any(t <= 0):
        raise ValueError(f"state_features: task times {t.tolist()} must be finite and > 0.")
    rel = np.sort(np.log(t / t.min())) / _LOG8
    q = np.quantile(rel, _QUANTILES)
    shares = [float(np.mean(t / t.min() > 1.5)), float(np.mean(t / t.min() > 3.0))]
    idle = [SpeedGroups.idle_fraction(times, communities(times, k)) for k in range(1, max_k + 1)]
    cv = np.array([min(float(cvs.get(w, 0.0)), 2.0) for w in sorted(times)])
    onehot = np.zeros(max_k)
    onehot[min(max(int(current_k), 1), max_k) - 1] = 1.0
    return np.concatenate([q, shares, idle, [cv.mean(), cv.max()],
                           [math.log(n) / math.log(64.0)], onehot,
                           [min(max(rate, 0.0), 1.5), min(staleness / max(n, 1), 1.0),
                            math.log1p(max(tasks_done, 0)) / math.log(1e4)]])


class ActorCritic:
    """A small actor-critic network in numpy: ``state -> tanh(hidden) -> (policy logits,
    value)``, a shared hidden layer as in A3C (trained by :mod:`tf_hetero.sim.a3c`);
    :meth:`save`/:meth:`load` keep it in an ``.npz`` (the one place of that format).

    >>> net = ActorCritic(3, 2, hidden=4, seed=0)
    >>> p, v = net.forward(np.zeros((1, 3)))
    >>> p.shape, v.shape, round(float(p.sum()), 6)
    ((1, 2), (1,), 1.0)
    """

    KEYS = ("w1", "b1", "wp", "bp", "wv", "bv")

    def __init__(self, n_in: int, n_actions: int, hidden: int = 32, seed: int = 0):
        rng = np.random.default_rng(seed)
        self.n_in, self.n_actions, self.hidden = n_in, n_actions, hidden
        self.params = {
            "w1": rng.normal(0, 1 / math.sqrt(n_in), (n_in, hidden)), "b1": np.zeros(hidden),
            "wp": rng.normal(0, 0.01, (hidden, n_actions)), "bp": np.zeros(n_actions),
            "wv": rng.normal(0, 0.01, (hidden, 1)), "bv": np.zeros(1)}
        self.meta: dict = {}

    def forward(self, x, params=None):
        p = self.params if params is None else params
        h = np.tanh(np.atleast_2d(x) @ p["w1"] + p["b1"])
        logits = h @ p["wp"] + p["bp"]
        z = np.exp(logits - logits.max(axis=1, keepdims=True))
        return z / z.sum(axis=1, keepdims=True), (h @ p["wv"] + p["bv"])[:, 0]

    def act(self, x, greedy: bool = True, rng=None, params=None) -> int:
        """An action index: the most probable (greedy) or a sample of the policy."""
        probs = self.forward(x, params)[0][0]
        if greedy:
            return int(np.argmax(probs))
        return int((rng or np.random.default_rng()).choice(len(probs), p=probs))

    def save(self, path: str, **meta) -> None:
        """Writes the weights and ``meta`` (numbers or strings) to ``path`` (.npz)."""
        extra = {f"meta_{k}": np.asarray(v) for k, v in {**self.meta, **meta}.items()}
        np.savez(path, **self.params, **extra)

    @classmethod
    def load(cls, path: str) -> "ActorCritic":
        """The network saved at ``path`` by :meth:`save`."""
        if not os.path.exists(path):
            shipped = {os.path.abspath(DEFAULT_WEIGHTS): "train",
                       os.path.abspath(SIZED_WEIGHTS): "train --sized"}
            command = shipped.get(os.path.abspath(path), "train")
            fix = ("reinstall tf-hetero (the package ships them) or train them"
                   if os.path.abspath(path) in shipped else
                   "train them (or pass agent=None for the shipped ones)")
            raise FileNotFoundError(f"CASP agent weights {path!r} not found. Fix: {fix}: "
                                    f"python -m tf_hetero.tools.train_casp {command}.")
        with np.load(path) as f:
            params = {k: f[k].astype(float) for k in cls.KEYS}
            meta = {k[5:]: f[k].item() for k in f.files if k.startswith("meta_")}
        net = cls(params["w1"].shape[0], params["wp"].shape[1], params["w1"].shape[1])
        net.params, net.meta = params, meta
        return net


class CommunityGroups(_Figures):
    """CASP's grouping policy: at every ``every`` applied updates the agent picks ``k``
    communities from the state (module docstring) and the workers are split into the
    ``k`` contiguous speed communities.

    ``agent``: an :class:`ActorCritic`, a path to its ``.npz``, or ``None`` for the shipped
    weights (:data:`DEFAULT_WEIGHTS`). ``greedy``: the most probable ``k`` (else a sample,
    seeded by ``seed``). ``chooser(state) -> action index``, if given, decides instead of the
    agent (the simulator's training environment). Until every worker has ``warmup`` measured
    tasks, all workers form one community (BSP).

    >>> net = ActorCritic(STATE_SIZE, MAX_K, seed=0)
    >>> net.params["bp"][:] = [0, 5, 0, 0]            # an agent that always picks k = 2
    >>> policy = CommunityGroups(net, every=1, warmup=1)
    >>> policy.groups(GroupContext(live=(0, 1, 2, 3), current=None, num_workers=4))
    ((0, 1, 2, 3),)
    """

    def __init__(self, agent=None, *, every: int = 10, warmup: int = 2, min_gain: float = 0.1,
                 greedy: bool = True, max_k: int = MAX_K, seed: int = 0,
                 chooser: Callable | None = None, alpha: float = DEFAULT_ALPHA):
        if not isinstance(every, int) or isinstance(every, bool) or every < 1:
            raise ValueError(f"CommunityGroups(every={every!r}): need applied updates >= 1 "
                             "between decisions.")
        if chooser is None:
            if agent is None or isinstance(agent, (str, os.PathLike)):
                agent = ActorCritic.load(os.fspath(agent or DEFAULT_WEIGHTS))
            if agent.n_actions != max_k or agent.n_in != STATE_SIZE:
                raise ValueError(f"CommunityGroups: the agent maps {agent.n_in} features to "
                                 f"{agent.n_actions} actions; this policy needs {STATE_SIZE} "
                                 f"to {max_k}. Fix: retrain it (python -m "
                                 "tf_hetero.tools.train_casp).")
        self.agent, self.chooser = agent, chooser
        self.every, self.warmup, self.min_gain, self.greedy = every, warmup, min_gain, greedy
        self.max_k, self.alpha = max_k, alpha
        self.rng = np.random.default_rng(seed)
        self.k = 1
        #: (updates applied, chosen k, communities formed or None) per decision.
        self.decisions: list = []
        self._last = -math.inf
        self._since = None  # (monitor tasks seen, time) at the last decision
        self._lock = threading.Lock()

    def groups(self, ctx: GroupContext):
        n = ctx.num_workers or len(ctx.live)
        if ctx.current is None:
            self.k = 1
            return (tuple(range(n)),)
        if ctx.rounds_applied - self._last < self.every or ctx.monitor is None:
            return None
        histories = unit_histories(ctx.monitor, n, self.warmup)
        if histories is None:
            return None
        with self._lock:
            self._last = ctx.rounds_applied
            times = {w: smoothed_time(h, self.alpha) for w, h in enumerate(histories)}
            state = state_features(times, {w: _cv(h) for w, h in enumerate(histories)},
                                   len(ctx.current), *self._recent(ctx.monitor, times, n),
                                   max_k=self.max_k)
            if self.chooser is not None:
                action = self.chooser(state)
            else:
                action = self.agent.act(state, greedy=self.greedy, rng=self.rng)
            k = min(int(action) + 1, n)
            proposal = communities(times, k)
            if proposal == ctx.current:
                proposal = None
            elif len(proposal) == len(ctx.current):  # a new split: only if it pays (no flapping)
                gain = (SpeedGroups.idle_fraction(times, ctx.current)
                        - SpeedGroups.idle_fraction(times, proposal))
                proposal = proposal if gain >= self.min_gain else None
            self.k = len(proposal if proposal is not None else ctx.current)
            self.decisions.append((ctx.rounds_applied, k, proposal))
            ctx.monitor.on_event("community_decision", k=k, regroup=proposal is not None)
            return proposal

    def _recent(self, monitor, times: Mapping[int, float], n: int) -> tuple:
        """(achieved share of the all-fast task rate, mean staleness) since the last decision,
        and the tasks finished so far."""
        # Before the first decision: since the monitor started (its clock may be any
        # counter, e.g. time.perf_counter on a cluster, virtual seconds in the simulator).
        seen, t0 = self._since or (0, getattr(monitor, "t0", 0.0))
        tasks = monitor.tasks[seen:]
        now = monitor.clock()
        self._since = (seen + len(tasks), now)
        if not tasks or now <= t0:
            return 0.0, 0.0, seen + len(tasks)
        fastest = min(times.values())  # seconds per unit
        # Units, not tasks: a sized task of k units is k units of the all-fast capacity.
        rate = sum(max(t.size, 1) for t in tasks) / (now - t0) * fastest / n
        stale = [t.staleness for t in tasks if t.applied]
        return rate, (sum(stale) / len(stale) if stale else 0.0), seen + len(tasks)

    def summary(self, rounds: Sequence, num_workers: int) -> dict:
        out = super().summary(rounds, num_workers)
        if self.decisions:
            out.update(casp_k=self.k, casp_decisions=len(self.decisions),
                       casp_mean_k=sum(d[1] for d in self.decisions) / len(self.decisions))
        return out

    def __repr__(self):
        return f"CommunityGroups(every={self.every}, max_k={self.max_k}, greedy={self.greedy})"


def _cv(durations: Sequence[float], window: int = 10) -> float:
    """Coefficient of variation of the last ``window`` task times (0 with fewer than 2)."""
    d = np.asarray(durations[-window:], dtype=float)
    return float(d.std() / d.mean()) if len(d) > 1 and d.mean() > 0 else 0.0

