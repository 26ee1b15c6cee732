"""Training CASP's agent (pure, no cluster): the actor-critic and A3C on a contextual bandit,
the training environment on the simulator, and CASP on the simulator."""

from __future__ import annotations


import numpy as np
import pytest

from tf_hetero.policies.community import (MAX_K, STATE_SIZE, ActorCritic,
                                          CommunityGroups, state_features)
from tf_hetero.sim.a3c import A3C, copy_params, gradients


# ---------------------------------------------------------- the actor-critic and A3C
class ContextBandit:
    """Two kinds of cluster, seen in the state: on 'uniform' the right k is 1, on 'one
    straggler' it is 2 (reward 1 for the right k, 0 otherwise, plus noise)."""

    def __init__(self, seed):
        self.rng = np.random.default_rng(seed)

    def _state(self):
        self.kind = int(self.rng.integers(2))
        times = {0: 0.1, 1: 0.1, 2: 0.1, 3: 0.4 if self.kind else 0.1}
        return state_features(times, {}, current_k=1)

    def reset(self):
        return self._state()

    def step(self, action):
        reward = float(action == self.kind) + self.rng.normal(0, 0.3)
        return self._state(), reward, True, {}


def _train_bandit(lr, episodes=300):
    net = ActorCritic(STATE_SIZE, MAX_K, hidden=16, seed=1)
    agent = A3C(net, [ContextBandit(s) for s in range(3)], lr=lr, seed=0)
    history = agent.train(episodes)
    return net, agent, history


def _picks(net):
    uniform = state_features({w: 0.1 for w in range(4)}, {}, current_k=1)
    straggler = state_features({0: 0.1, 1: 0.1, 2: 0.1, 3: 0.4}, {}, current_k=1)
    return net.act(uniform) + 1, net.act(straggler) + 1


def test_a3c_learns_the_right_k_for_each_kind_of_cluster():
    net, agent, history = _train_bandit(lr=0.01)
    assert _picks(net) == (1, 2)
    returns = [h[2] for h in history]
    assert np.mean(returns[-100:]) > np.mean(returns[:100]) + 0.3
    value_loss = [x[2] for x in agent.losses]
    assert np.mean(value_loss[-50:]) < np.mean(value_loss[:50])


def test_without_learning_the_agent_does_not_find_the_right_k():
    """The control: the same run with the learning rate at 0 (no update reaches the global
    parameters) does not get both right."""
    net, _, history = _train_bandit(lr=0.0)
    assert _picks(net) != (1, 2)
    assert np.mean([h[2] for h in history[-100:]]) < 0.6


def test_a3c_learners_act_on_their_own_copy_of_the_global_parameters():
    net = ActorCritic(STATE_SIZE, MAX_K, hidden=8, seed=0)
    agent = A3C(net, [ContextBandit(0), ContextBandit(1)], n_steps=3, lr=0.01, seed=0)
    before = copy_params(net)
    agent.train(6)
    assert agent.updates == 6  # one update per finished one-step episode
    assert any(not np.allclose(before[k], net.params[k]) for k in before)


def test_gradients_match_finite_differences():
    net = ActorCritic(5, 3, hidden=4, seed=3)
    rng = np.random.default_rng(0)
    x, a, ret = rng.normal(size=(6, 5)), rng.integers(3, size=6), rng.normal(size=6)
    grads, _ = gradients(net, x, a, ret, entropy=0.0, value_coef=1.0)

    def critic_loss(params):  # the value part of the loss (the advantage is held fixed)
        v = net.forward(x, params)[1]
        return float(((ret - v) ** 2).mean() / 2)

    p = copy_params(net)
    eps = 1e-6
    p["bv"][0] += eps
    up = critic_loss(p)
    p["bv"][0] -= 2 * eps
    down = critic_loss(p)
    assert grads["bv"][0] == pytest.approx((up - down) / (2 * eps), rel=1e-4)


def test_save_and_load_round_trip(tmp_path):
    net = ActorCritic(STATE_SIZE, MAX_K, seed=4)
    net.save(tmp_path / "a.npz", episodes=3)
    back = ActorCritic.load(str(tmp_path / "a.npz"))
    assert back.meta["episodes"] == 3
    s = np.linspace(0, 1, STATE_SIZE)
    np.testing.assert_allclose(back.forward(s)[0], net.forward(s)[0])


def test_a_missing_weights_file_says_how_to_make_one(tmp_path):
    with pytest.raises(FileNotFoundError, match="train_casp"):
        CommunityGroups(str(tmp_path / "none.npz"))


def test_an_agent_of_the_wrong_shape_is_refused():
    with pytest.raises(ValueError, match="retrain it"):
        CommunityGroups(ActorCritic(3, MAX_K))


# -------------------------------------------------------------- CASP on the simulator
def test_casp_on_the_simulator_applies_every_task_once_and_logs_its_decisions():
    from tf_hetero.sim.casp_env import bench_config
    from tf_hetero.sim.costs import CostModel
    from tf_hetero.sim.run import Simulation

    cfg = bench_config(4, "slow=3:4", rounds=40)
    sim = Simulation("casp", cfg, CostModel(), learn=True)
    result = sim.result(sim.fit())
    assert result["tasks"] == result["applied_tasks"] == 160
    tasks = [t for r in sim.engine.rounds for t in r.tasks]
    assert len(tasks) == len({id(t) for t in tasks}) == 160
    assert sim.config.grouping.decisions  # the agent decided at round boundaries
    summary = sim.monitor.summary()
    assert 1 <= summary["casp_mean_k"] <= MAX_K
    assert any(e[1] == "community_decision" for e in sim.monitor.events)
    assert result["final_accuracy"] > 0.8


@pytest.mark.parametrize("progress", ["loss", "accuracy"])
def test_the_training_environment_runs_episodes_to_their_horizon_or_target(progress):
    from tf_hetero.sim.casp_env import SimEnv
    from tf_hetero.sim.costs import CostModel

    env = SimEnv(CostModel(), seed=0, horizon_s=8.0, progress=progress)
    state, done, steps = env.reset(), False, 0
    while not done:
        state, reward, done, info = env.step(steps % MAX_K)
        steps += 1
        assert np.isfinite(reward) and state.shape == (STATE_SIZE,)
        if progress == "accuracy":
            assert reward < 0  # every second before the target costs
    assert info["t_s"] >= 8.0 or info["accuracy"] >= 0.9
    assert steps >= 2
    env.reset()  # an episode left half way is abandoned cleanly
    env.close()


def test_the_environment_rejects_an_unknown_progress_measure():
    from tf_hetero.sim.casp_env import SimEnv
    from tf_hetero.sim.costs import CostModel

    with pytest.raises(ValueError, match="progress='speed'"):
        SimEnv(CostModel(), progress="speed")
