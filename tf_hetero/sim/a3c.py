"""A3C, the trainer of CASP's community agent: advantage actor-critic over interleaved
learners, in numpy, on the network the policy runs
(:class:`~tf_hetero.policies.community.ActorCritic`). The policy keeps what inference needs
(the forward pass, the weights file); the loss gradient, the optimizer and the learners are
here, beside the environment they train in (:mod:`tf_hetero.sim.casp_env`;
``python -m tf_hetero.tools.train_casp train``).

>>> net = ActorCritic(3, 2, hidden=4, seed=0)
>>> grads, (_, _, entropy) = gradients(net, np.zeros((2, 3)), [0, 1], [1.0, 0.0])
>>> sorted(grads) == sorted(ActorCritic.KEYS), round(entropy, 3)
(True, 0.693)
"""

from __future__ import annotations

import math
from typing import Callable, Sequence

import numpy as np

from tf_hetero.policies.community import ActorCritic

__all__ = ["A3C", "gradients", "copy_params"]


def gradients(net: ActorCritic, states, actions, returns, params=None, entropy: float = 0.01,
              value_coef: float = 0.5):
    """Gradients of ``net``'s advantage actor-critic loss
    ``-sum log pi(a|s) A - entropy * H + value_coef * sum (R - V)^2 / 2`` (A = R - V, not
    differentiated through) at ``params`` (default: ``net.params``), and (policy loss, value
    loss, entropy)."""
    p = net.params if params is None else params
    x = np.atleast_2d(np.asarray(states, dtype=float))
    a = np.asarray(actions, dtype=int)
    ret = np.asarray(returns, dtype=float)
    h = np.tanh(x @ p["w1"] + p["b1"])
    logits = h @ p["wp"] + p["bp"]
    z = np.exp(logits - logits.max(axis=1, keepdims=True))
    probs = z / z.sum(axis=1, keepdims=True)
    value = (h @ p["wv"] + p["bv"])[:, 0]
    adv = ret - value
    m = len(a)
    logp = np.log(probs + 1e-12)
    ent = -(probs * logp).sum(axis=1)
    onehot = np.eye(net.n_actions)[a]
    # d(-log pi(a) * A)/dlogits = (pi - onehot) * A; d(-H)/dlogits = pi * (logp + H)
    dlogits = (probs - onehot) * adv[:, None] + entropy * probs * (logp + ent[:, None])
    dv = -value_coef * adv  # d(value_coef * (R - V)^2 / 2)/dV
    g = {"wp": h.T @ dlogits, "bp": dlogits.sum(0), "wv": h.T @ dv[:, None],
         "bv": np.array([dv.sum()])}
    dh = (dlogits @ p["wp"].T + dv[:, None] @ p["wv"].T) * (1 - h ** 2)
    g["w1"], g["b1"] = x.T @ dh, dh.sum(0)
    g = {k: v / m for k, v in g.items()}
    pick = probs[np.arange(m), a]
    stats = (float(-(np.log(pick + 1e-12) * adv).mean()), float((adv ** 2).mean() / 2),
             float(ent.mean()))
    return g, stats


def copy_params(net: ActorCritic) -> dict:
    """A copy of ``net``'s parameters (what a learner acts with during its rollout)."""
    return {k: v.copy() for k, v in net.params.items()}


class _Adam:
    """Adam on a parameter dict (the global optimizer every A3C learner steps)."""

    def __init__(self, params: dict, lr: float, beta1=0.9, beta2=0.999, eps=1e-8, clip=5.0):
        self.lr, self.b1, self.b2, self.eps, self.clip, self.t = lr, beta1, beta2, eps, clip, 0
        self.m = {k: np.zeros_like(v) for k, v in params.items()}
        self.v = {k: np.zeros_like(v) for k, v in params.items()}

    def step(self, params: dict, grads: dict) -> None:
        norm = math.sqrt(sum(float((g ** 2).sum()) for g in grads.values()))
        f = min(1.0, self.clip / (norm + 1e-12))  # global-norm clipping: one bad rollout
        self.t += 1
        for k, g in grads.items():
            g = g * f
            self.m[k] = self.b1 * self.m[k] + (1 - self.b1) * g
            self.v[k] = self.b2 * self.v[k] + (1 - self.b2) * g * g
            mh, vh = self.m[k] / (1 - self.b1 ** self.t), self.v[k] / (1 - self.b2 ** self.t)
            params[k] -= self.lr * mh / (np.sqrt(vh) + self.eps)


class A3C:
    """Asynchronous advantage actor-critic over ``envs`` (one learner per environment).

    The learners are *sequential interleaved workers* sharing the global parameters: they
    take one environment step each in turn; a learner acts with its own copy of the global
    parameters taken at the start of its rollout, and after ``n_steps`` steps (or the end of
    its episode) computes the advantage actor-critic gradient of its rollout (n-step returns
    bootstrapped from its value estimate) with that copy and applies it to the global
    parameters (Adam). Meanwhile the other learners have updated them: each gradient is as
    stale as in A3C's threads, but the run is reproducible from its seed (threads would not
    be, and on 2 cores would not run faster: the simulator is pure Python).

    An environment has ``reset() -> state`` and ``step(action) -> (state, reward, done,
    info)``. :meth:`train` returns one ``(episode, learner, return, info)`` per finished
    episode.

    >>> class Bandit:                      # the right action is 1
    ...     def reset(self): return np.ones(2)
    ...     def step(self, a): return np.ones(2), float(a == 1), True, {}
    >>> agent = A3C(ActorCritic(2, 3, hidden=8), [Bandit(), Bandit()], lr=0.05, seed=0)
    >>> _ = agent.train(episodes=150)
    >>> agent.net.act(np.ones(2))
    1
    """

    def __init__(self, net: ActorCritic, envs: Sequence, *, n_steps: int = 5,
                 gamma: float = 0.9, lr: float = 3e-3, entropy: float = 0.01,
                 value_coef: float = 0.5, seed: int = 0):
        if not envs:
            raise ValueError("A3C: need at least one environment (one per learner).")
        self.net, self.envs, self.n_steps, self.gamma = net, list(envs), n_steps, gamma
        self.entropy, self.value_coef = entropy, value_coef
        self.opt = _Adam(net.params, lr)
        self.rng = np.random.default_rng(seed)
        self.updates = 0
        self.losses: list = []  # (update, policy loss, value loss, entropy)

    def train(self, episodes: int, on_episode: Callable | None = None) -> list:
        """Runs the learners until ``episodes`` episodes have finished."""
        history: list = []
        learners = [{"env": e, "state": e.reset(), "params": copy_params(self.net),
                     "rollout": [], "ret": 0.0} for e in self.envs]
        while len(history) < episodes:
            for i, L in enumerate(learners):
                a = self.net.act(L["state"], greedy=False, rng=self.rng, params=L["params"])
                nxt, r, done, info = L["env"].step(a)
                L["rollout"].append((L["state"], a, r))
                L["ret"] += r
                L["state"] = nxt
                if done or len(L["rollout"]) >= self.n_steps:
                    self._update(L, done)
                if done:
                    history.append((len(history), i, L["ret"], info))
                    if on_episode is not None:
                        on_episode(history[-1])
                    L["state"], L["ret"] = L["env"].reset(), 0.0
                if len(history) >= episodes:
                    break
        return history

    def _update(self, L: dict, done: bool) -> None:
        states, actions, rewards = zip(*L["rollout"])
        R = 0.0 if done else float(self.net.forward(L["state"], L["params"])[1][0])
        returns = []
        for r in reversed(rewards):
            R = r + self.gamma * R
            returns.append(R)
        grads, stats = gradients(self.net, states, actions, returns[::-1], L["params"],
                                 self.entropy, self.value_coef)
        self.opt.step(self.net.params, grads)  # the global parameters
        self.updates += 1
        self.losses.append((self.updates, *stats))
        L["rollout"], L["params"] = [], copy_params(self.net)
