"""The learner: PPO learns a toy contextual bandit end to end (Batch -> engine ->
trajectories -> update -> publish); minibatches grouped by entity counts; NaN rolls back."""

import time

import numpy as np
import pytest
import torch

from w3async.sync import layout
from w3async.sync.gather import Batch
from w3async.learn.inference import InferenceEngine
from w3async.learn.learner import Learner, LearnerConfig, NonFiniteLossError, minibatch_plan
from w3async.learn.network import NetConfig, Network
from w3async.games.spec import GameSpec
from w3async.learn.trajectories import TrajBatch, TrajConfig, Trajectories

# The CUDA cases run the learner, the GRU path and the sampling rounds on the device;
# they skip where there is none (this project's CI), with the reason.
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device"))]

torch.set_num_threads(1)  # shared 2-core machine: OpenMP's spinning threads slow small calls

SPEC = GameSpec("bandit", n_types=3, head_sizes=(4, 2, 2, layout.E_MAX), pointer_head=3)
NET = NetConfig(d_model=32, n_heads=2, n_layers=1)


class Bandit:
    """Each table row plays one-step episodes: a FIRST row shows a context (glob[0] = +-1)
    and 2-6 entities, one of type 2; the next row is terminal (DONE) with the reward
    0.5 * (head 0 == 1 if the context > 0 else 2) + 0.5 * (the pointer picks the type-2
    entity). Head 0 may only choose 0..2 (3 is masked). A random policy earns
    0.5/3 + 0.5 * E[1/n_ent] ~= 0.29."""

    def __init__(self, n_rows: int, seed: int):
        self.n = n_rows
        self.rng = np.random.default_rng(seed)
        self.batch = Batch(n_rows)
        self.terminal = False
        self.reward = np.zeros(n_rows, np.float32)

    def post(self) -> Batch:
        b, n, rng = self.batch, self.n, self.rng
        b.n, b.bucket = n, 32
        b.rows[:n] = np.arange(n)
        b.obs_seq[:n] += 1
        b.glob[:n] = 0
        b.ent_flat[:] = 0
        b.type_flat[:] = 0
        b.mask[:n] = 0
        b.mask[:n, :, 0] = 1
        if self.terminal:
            b.flags[:n] = layout.FLAG_DONE
            b.reward[:n] = self.reward
            b.n_ent[:n] = 1
        else:
            b.flags[:n] = layout.FLAG_FIRST
            b.reward[:n] = 0
            self.ctx = rng.choice([-1.0, 1.0], n).astype(np.float32)
            b.glob[:n, 0] = self.ctx
            b.n_ent[:n] = rng.integers(2, 7, n)
            self.target = (rng.random(n) * b.n_ent[:n]).astype(np.int64)
            for i in range(n):
                k = int(b.n_ent[i])
                b.ent[i, :k, 0] = rng.standard_normal(k)
                b.ent_type[i, :k] = 1
                b.ent_type[i, self.target[i]] = 2
                b.mask[i, 3, :k] = 1
            b.mask[:n, 0, :3] = 1
        return b

    def answer(self, actions: np.ndarray) -> None:
        if not self.terminal:
            good = np.where(self.ctx > 0, 1, 2)
            self.reward = (0.5 * (actions[:, 0] == good) + 0.5 * (actions[:, 3] == self.target)).astype(np.float32)
        self.terminal = not self.terminal


@pytest.mark.parametrize("device", DEVICES)
def test_ppo_learns_a_contextual_bandit(device):
    torch.manual_seed(0)
    n_rows = 32
    env = Bandit(n_rows, seed=1)
    traj = Trajectories(n_rows, TrajConfig(seq_len=4, seqs_per_batch=32, queue_batches=1))
    learner = Learner(Network(SPEC, NET), LearnerConfig(lr=1e-3, update_epochs=4, minibatch_seqs=8, ent_coef=0.003,
                                                         gamma=0.9, seed=0), device=device)
    rewards = []
    t0 = time.perf_counter()
    with InferenceEngine(SPEC, NET, max_rows=n_rows, seed=2, device=device) as engine:
        engine.publish(learner.net.state_dict(), learner.version)
        while learner.version < 12 and time.perf_counter() - t0 < 60:
            b = env.post()
            fut = engine.submit(b)
            traj.record_obs(b)
            res = fut.result()
            traj.record_answer(res)
            env.answer(res.actions)
            if env.terminal:
                continue
            rewards.append(float(env.reward.mean()))
            tb = traj.get(0)
            if tb is not None:
                stats = learner.run_update(tb)
                assert stats.staleness_max <= 1
                engine.publish(learner.net.state_dict(), learner.version)
    early, late = np.mean(rewards[:8]), np.mean(rewards[-8:])
    assert early < 0.45, early
    assert late > 0.8, (early, late, learner.version)


def fake_batch(n_seq=16, seq_len=4, seed=0, reward=1.0) -> TrajBatch:
    rng = np.random.default_rng(seed)
    bucket = 64
    caps = rng.integers(1, 60, n_seq)  # sequences of few and of many entities
    n_ent = rng.integers(1, caps[:, None] + 1, (n_seq, seq_len)).astype(np.int32)
    real = np.arange(bucket) < n_ent[..., None]
    mask = np.zeros((n_seq, seq_len, 4, 192), np.uint8)
    mask[..., 0] = 1
    return TrajBatch(
        glob=rng.standard_normal((n_seq, seq_len, 32), dtype=np.float32),
        ent=rng.standard_normal((n_seq, seq_len, bucket, 16), dtype=np.float32) * real[..., None],
        ent_type=np.zeros((n_seq, seq_len, bucket), np.int16), n_ent=n_ent, mask=mask,
        action=np.zeros((n_seq, seq_len, 4), np.int32), logp=np.zeros((n_seq, seq_len), np.float32),
        value=np.zeros((n_seq, seq_len), np.float32), next_value=np.zeros((n_seq, seq_len), np.float32),
        reward=np.full((n_seq, seq_len), reward, np.float32), done=np.zeros((n_seq, seq_len), bool),
        truncated=np.zeros((n_seq, seq_len), bool), first=np.zeros((n_seq, seq_len), bool),
        version=np.zeros((n_seq, seq_len), np.uint32), rows=np.arange(n_seq, dtype=np.int32), state0=None,
        bucket=bucket,
    )


def test_minibatches_group_similar_entity_counts():
    tb = fake_batch(n_seq=64)
    plan = minibatch_plan(tb.n_ent, 8, np.random.default_rng(0))
    assert sorted(np.concatenate([i for i, _ in plan]).tolist()) == list(range(64))
    for idx, bucket in plan:
        most = tb.n_ent[idx].max()
        assert bucket >= most and (bucket == 32 or most > 32)
    assert any(b == 32 for _, b in plan)  # the small sequences got the small bucket
    fine = minibatch_plan(tb.n_ent, 8, np.random.default_rng(0), entity_pad=8)
    for idx, pad in fine:
        assert pad % 8 == 0 and tb.n_ent[idx].max() <= pad < tb.n_ent[idx].max() + 8
    padding = lambda p: sum(pad * len(i) for i, pad in p)  # noqa: E731
    assert padding(fine) < padding(plan)


def test_update_pauses_between_minibatches_and_reports_stats():
    pauses = []
    learner = Learner(Network(SPEC, NET), LearnerConfig(minibatch_seqs=4, update_epochs=2), pause=lambda: pauses.append(1))
    stats = learner.run_update(fake_batch(n_seq=16))
    assert stats.minibatches == 8 and len(pauses) == 7 and stats.version == 1
    assert np.isfinite([stats.pg_loss, stats.v_loss, stats.entropy, stats.approx_kl]).all()
    assert stats.padding_mean >= 0


def test_nan_loss_is_a_clear_error_and_rolls_back():
    learner = Learner(Network(SPEC, NET), LearnerConfig(minibatch_seqs=4))
    before = {k: v.clone() for k, v in learner.net.state_dict().items()}
    with pytest.raises(NonFiniteLossError, match="rolled back"):
        learner.run_update(fake_batch(reward=float("nan")))
    for k, v in learner.net.state_dict().items():
        assert torch.equal(v, before[k]), k
    assert learner.version == 0


@pytest.mark.parametrize("device", DEVICES)
def test_gru_network_updates(device):
    net = Network(SPEC, NetConfig(d_model=16, n_heads=2, n_layers=1, gru=True))
    before = {k: v.clone() for k, v in net.state_dict().items()}
    tb = fake_batch(n_seq=8)
    tb.state0 = np.zeros((8, 16), np.float32)
    tb.first[:, 0] = True
    learner = Learner(net, LearnerConfig(minibatch_seqs=4), device=device)
    stats = learner.run_update(tb)
    assert np.isfinite(stats.v_loss) and learner.version == 1
    assert any(not torch.equal(before[k], v.cpu()) for k, v in learner.net.state_dict().items() if "core" in k)


def test_config_errors_name_every_key():
    with pytest.raises(ValueError, match="lr=0.*gamma=2"):
        LearnerConfig(lr=0, gamma=2)


def test_thread_nice_applies_to_the_learners_thread_only():
    import os
    import threading

    learner = Learner(Network(SPEC, NET), LearnerConfig(minibatch_seqs=8, update_epochs=1, thread_nice=3))
    seen = {}

    def run():
        tid = threading.get_native_id()
        before = os.getpriority(os.PRIO_PROCESS, tid)
        learner.run_update(fake_batch(n_seq=8))
        learner.run_update(fake_batch(n_seq=8))  # applied once per thread
        seen["delta"] = os.getpriority(os.PRIO_PROCESS, tid) - before

    main_before = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    th = threading.Thread(target=run)
    th.start()
    th.join()
    assert seen["delta"] == 3
    assert os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) == main_before


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("gru", [False, True], ids=["mlp", "gru"])
def test_collected_logp_and_value_equal_the_learners_before_any_step(gru, device):
    """The whole path (engine rounds -> trajectories -> TrajBatch -> evaluate) keeps each
    step's observation, action, GRU state and episode starts aligned: with the same
    weights, the learner recomputes exactly what the rounds sampled with (ratio 1)."""
    from w3async.learn.inference import synthetic_batch
    from w3async.learn.network import Obs

    cfg = NetConfig(d_model=32, n_heads=2, n_layers=1, gru=gru)
    n_rows, ep_len = 6, 5
    rng = np.random.default_rng(3)
    traj = Trajectories(n_rows, TrajConfig(seq_len=4, seqs_per_batch=6), state_dim=32 if gru else None)
    step = rng.integers(0, ep_len, n_rows)  # lanes out of phase
    with InferenceEngine(SPEC, cfg, max_rows=n_rows, n_table_rows=n_rows, seed=4, device=device) as engine:
        batches = []
        while len(batches) < 2:  # the second: its sequences start mid-episode, GRU state and all
            b = synthetic_batch(SPEC, n_rows, rng, max_ent=40)
            b.flags[:n_rows] = np.where(step == 0, layout.FLAG_FIRST, 0) | np.where(step == ep_len, layout.FLAG_DONE, 0)
            b.reward[:n_rows] = rng.standard_normal(n_rows)
            fut = engine.submit(b)
            traj.record_obs(b)
            traj.record_answer(fut.result())
            step = np.where(step == ep_len, 0, step + 1)
            if (got := traj.get(0)) is not None:
                batches.append(got)
        tb = batches[1]
        net = Network(SPEC, cfg).eval()
        net.load_state_dict({k: v.cpu() for k, v in engine.nets[0].state_dict().items()})
    n_seq, t = tb.shape
    flat = lambda a: torch.as_tensor(a).reshape(n_seq * t, *a.shape[2:])  # noqa: E731
    obs = Obs(flat(tb.glob), flat(tb.ent), flat(tb.ent_type).long(), flat(tb.n_ent).long(), flat(tb.mask).bool())
    with torch.no_grad():
        ev = net.evaluate(obs, flat(tb.action).long(), state0=torch.as_tensor(tb.state0) if gru else None,
                          first=flat(tb.first), seq_len=t)
    assert tb.first.any() and tb.done.any() and not tb.first[:, 0].all()
    if gru:
        assert (np.abs(tb.state0).sum(1) > 0).any()
    np.testing.assert_allclose(ev.logp.numpy(), tb.logp.reshape(-1), atol=1e-4)
    np.testing.assert_allclose(ev.value.numpy(), tb.value.reshape(-1), atol=1e-4)


# ---- PPO hygiene: KL limit, schedules, value-target normalisation, gradient norm ----------

def on_policy_batch(net: Network, n_seq=16, seq_len=4, seed=0, reward_scale=1.0) -> TrajBatch:
    """fake_batch with two choices a head, random actions and rewards, and the logp and
    value the net itself gives them (ratio 1 before the first step, as when collected)."""
    from w3async.learn.network import Obs

    rng = np.random.default_rng(seed)
    tb = fake_batch(n_seq=n_seq, seq_len=seq_len, seed=seed)
    tb.mask[..., :2] = 1
    tb.action[..., :3] = rng.integers(0, 2, (n_seq, seq_len, 3))
    tb.reward[:] = rng.standard_normal((n_seq, seq_len)) * reward_scale
    flat = lambda a: torch.as_tensor(a).reshape(n_seq * seq_len, *a.shape[2:])  # noqa: E731
    obs = Obs(flat(tb.glob), flat(tb.ent), flat(tb.ent_type).long(), flat(tb.n_ent).long(), flat(tb.mask).bool())
    net.eval()
    with torch.no_grad():
        ev = net.evaluate(obs, flat(tb.action).long(), state0=None, first=flat(tb.first), seq_len=seq_len)
    tb.logp[:] = ev.logp.numpy().reshape(n_seq, seq_len)
    tb.value[:] = ev.value.numpy().reshape(n_seq, seq_len)
    return tb


@pytest.mark.parametrize("lr, target_kl, stops", [(0.05, 0.01, True), (1e-7, 0.01, False), (0.05, None, False)])
def test_the_kl_limit_stops_an_update_that_moves_too_far(lr, target_kl, stops):
    torch.manual_seed(0)
    net = Network(SPEC, NET)
    tb = on_policy_batch(net)
    cfg = LearnerConfig(lr=lr, target_kl=target_kl, minibatch_seqs=4, update_epochs=4, max_grad_norm=100.0)
    st = Learner(net, cfg).run_update(tb)
    assert st.minibatches_planned == 16 and st.kl_stopped is stops
    if stops:
        assert st.minibatches < 16 and st.approx_kl > 0  # the last one run was over the limit
    else:
        assert st.minibatches == 16


def test_lr_and_entropy_schedules_at_given_updates():
    cfg = LearnerConfig(lr=1e-3, lr_schedule="linear", lr_min=1e-4, ent_coef=0.01, ent_schedule="linear",
                        ent_coef_min=0.002, schedule_updates=4, minibatch_seqs=8, update_epochs=1)
    learner = Learner(Network(SPEC, NET), cfg)
    assert learner.coefficients(0.0) == pytest.approx((1e-3, 0.01))
    assert learner.coefficients(0.5) == pytest.approx((5.5e-4, 0.006))
    assert learner.coefficients(1.0) == learner.coefficients(3.0) == pytest.approx((1e-4, 0.002))  # the floor
    seen = []
    for i in range(6):
        st = learner.run_update(fake_batch(n_seq=8, seed=i))
        seen.append((st.lr, st.ent_coef))
        assert learner.opt.param_groups[0]["lr"] == st.lr
    # update k (version k-1 before it) runs at frac (k-1)/4
    assert [round(x, 7) for x, _ in seen] == [1e-3, 7.75e-4, 5.5e-4, 3.25e-4, 1e-4, 1e-4]
    assert [round(e, 6) for _, e in seen] == [0.01, 0.008, 0.006, 0.004, 0.002, 0.002]
    # without a horizon of its own, the run's progress (Training.schedule_progress)
    run = Learner(Network(SPEC, NET), LearnerConfig(lr=1e-3, lr_schedule="linear", minibatch_seqs=8),
                  progress=lambda: 0.25)
    assert run.coefficients() == pytest.approx((7.5e-4, run.cfg.ent_coef))
    const = Learner(Network(SPEC, NET), LearnerConfig(lr=1e-3), progress=lambda: 0.9)
    assert const.coefficients() == (1e-3, const.cfg.ent_coef)  # the default keeps today's behaviour


def test_schedule_config_checks():
    with pytest.raises(ValueError, match="lr_schedule='cosine'.*lr_min=0.1 must be <= lr"):
        LearnerConfig(lr_schedule="cosine", lr_min=0.1, lr=1e-3)
    with pytest.raises(ValueError, match="target_kl=0"):
        LearnerConfig(target_kl=0.0)


def test_return_norm_merges_batches_like_one():
    from w3async.learn.ppo import ReturnNorm

    rng = np.random.default_rng(0)
    parts = [torch.as_tensor(rng.normal(5.0, 3.0, n)) for n in (10, 200, 37)]
    rn = ReturnNorm(eps=0.0 + 1e-12)
    for p in parts:
        rn.update(p)
    allx = torch.cat(parts)
    assert float(rn.mean) == pytest.approx(float(allx.mean()), rel=1e-6)
    assert float(rn.std) == pytest.approx(float(allx.std(unbiased=False)), rel=1e-6)
    x = torch.tensor([1.0, 7.0])
    assert torch.allclose(rn.denormalize(rn.normalize(x)), x)


def test_value_target_normalisation_keeps_the_value_loss_in_scale_and_resumes():
    torch.manual_seed(0)
    losses = {}
    for norm in (False, True):
        net = Network(SPEC, NET)
        learner = Learner(net, LearnerConfig(norm_value=norm, minibatch_seqs=8, update_epochs=1))
        st = learner.run_update(on_policy_batch(net, reward_scale=100.0))
        losses[norm] = st.v_loss
        if norm:
            assert st.value_std > 10 and st.value_mean is not None
            again = Learner(Network(SPEC, NET), LearnerConfig(norm_value=True))
            again.load_state_dict(learner.state_dict())
            assert float(again.ret_norm.mean) == st.value_mean and float(again.ret_norm.std) == st.value_std
        else:
            assert st.value_mean is None
    assert losses[False] > 100 * losses[True], losses  # returns of ~100s against ~1s


def test_grad_norm_is_reported_before_clipping():
    torch.manual_seed(0)
    net = Network(SPEC, NET)
    st = Learner(net, LearnerConfig(max_grad_norm=1e-3, minibatch_seqs=8, update_epochs=1)).run_update(
        on_policy_batch(net, reward_scale=10.0))
    assert np.isfinite(st.grad_norm) and st.grad_norm > 1e-3  # the norm before the clip to 1e-3


def test_a_linear_schedule_needs_a_horizon_in_the_recipe():
    from w3async.recipes import RecipeError, recipe_from_dict

    with pytest.raises(RecipeError, match="learner.ent_schedule = 'linear' needs a horizon"):
        recipe_from_dict({"name": "x", "learner": {"ent_schedule": "linear"}})
    r = recipe_from_dict({"name": "x", "learner": {"lr_schedule": "linear", "lr_min": 1e-5, "target_kl": 0.02},
                          "stop": {"minutes": 45}})
    assert r.learner.lr_schedule == "linear" and r.learner.target_kl == 0.02
    assert recipe_from_dict({"name": "x"}).learner.target_kl is None  # the defaults: today's update
