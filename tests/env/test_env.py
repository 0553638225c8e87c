"""w3async.env: the gymnasium VectorEnv and the PettingZoo ParallelEnv over real game
processes (the null game and the duel), their contracts, a game killed mid-episode, and
a close() that leaves nothing behind."""

from __future__ import annotations

import os
import re
import signal

import numpy as np
import pytest
from gymnasium.utils.env_checker import check_action_space, check_observation_space
from gymnasium.vector import AutoresetMode
from pettingzoo.test import parallel_api_test

import w3async.env as we
from w3async.env.bridge import Bridge
from w3async.env.spaces import sample_masked
from w3async.sync import layout
from w3async.sync.table import list_segments

from tests.conftest import REPO, SHM_PREFIX

RECIPES = ["env-null", "env-duel"]


@pytest.fixture(autouse=True)
def _built(null_native):
    return null_native


@pytest.mark.parametrize("bits", [np.random.PCG64, np.random.MT19937])
def test_sample_masked_picks_each_allowed_choice_alike_and_nothing_else(bits):
    """The random policy of the examples and the bench: only allowed choices, each about
    equally often (a head's 1-3 allowed among HEAD_MAX), choice 0 for a head with none;
    with numpy's default bit generator and with one whose raw words are 32-bit."""
    rng = np.random.Generator(bits(1))
    mask = np.zeros((4000, layout.N_HEADS, layout.HEAD_MAX), np.uint8)
    allowed = {0: [5], 1: [0, layout.HEAD_MAX - 1], 2: [3, 7, 11]}  # head 3 allows none
    for h, cs in allowed.items():
        mask[:, h, cs] = 1
    acts = sample_masked(mask, rng)
    assert acts.shape == (4000, layout.N_HEADS) and acts.dtype == np.int64
    for h, cs in allowed.items():
        counts = np.bincount(acts[:, h], minlength=layout.HEAD_MAX)
        assert set(np.flatnonzero(counts)) == set(cs), (h, np.flatnonzero(counts))
        assert counts[cs].min() > 0.8 * 4000 / len(cs), (h, counts[cs])  # uniform: each near 1/len
    assert (acts[:, 3] == 0).all()


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[1][0] != "Z"
    except FileNotFoundError:
        return False


def _check_batch(env, obs, rew, term, trunc, infos) -> None:
    n = env.num_envs
    assert env.observation_space.contains(obs), {k: (v.dtype, v.shape) for k, v in obs.items()}
    assert rew.shape == term.shape == trunc.shape == (n,)
    assert rew.dtype == np.float32 and term.dtype == bool and trunc.dtype == bool
    for k in ("cut", "episode_id", "step", "slot"):
        assert infos[k].shape == (n,) and infos["_" + k].all()
    # every head allows a choice; none past the head's size
    for h, size in enumerate(env.single_action_space.nvec):
        assert obs["mask"][:, h, :size].any(axis=1).all()
        assert not obs["mask"][:, h, size:].any()


def _reset_and_step(env, steps: int, seed: int):
    """reset(), then `steps` steps of masked random actions: the last observation, and the
    rng to go on with."""
    obs, _ = env.reset()
    rng = np.random.default_rng(seed)
    for _ in range(steps):
        obs, *_ = env.step(sample_masked(obs["mask"], rng))
    return obs, rng


@pytest.mark.parametrize("name", RECIPES)
def test_vector_contract(name):
    """Spaces (gymnasium's own space checks), reset and step batches inside them, and the
    NEXT_STEP autoreset: the step after an episode's end gives its lane's first step."""
    env = we.make(name)
    try:
        assert env.metadata["autoreset_mode"] == AutoresetMode.NEXT_STEP
        check_observation_space(env.single_observation_space)
        check_action_space(env.single_action_space)
        obs, infos = env.reset(seed=3)
        assert env.observation_space.contains(obs) and (infos["step"] == 0).all()
        rng = np.random.default_rng(0)
        ended_before = np.zeros(env.num_envs, bool)
        autoresets = 0
        for _ in range(400):
            obs, rew, term, trunc, infos = env.step(sample_masked(obs["mask"], rng))
            _check_batch(env, obs, rew, term, trunc, infos)
            # the step after an end: the next episode's first observation, reward 0
            assert (infos["step"][ended_before] == 0).all() and (rew[ended_before] == 0).all()
            assert not (term & trunc).any()
            autoresets += int(ended_before.sum())
            ended_before = term | trunc
        assert autoresets > 0, "no episode ended in 400 steps: the autoreset was not exercised"
        assert not infos["cut"].any()
    finally:
        env.close()


@pytest.mark.parametrize("runtime", ["native", "wine"])
def test_killed_game_truncates_its_rows_only(runtime, request):
    """A game killed mid-episode (SIGKILL to its pid): its two rows end truncated with
    info cut, once, and then start a new episode at step 0; the other rows go on. The
    same for Windows games under Wine behind the env."""
    sets = ['games.env.W3N_EPISODE_STEPS="100000"']
    if runtime == "wine":
        exe = request.getfixturevalue("null_exe")
        sets += ['games.runtime="wine"', f'games.binary="{exe}"', "games.count=3"]
    env = we.make("env-null", sets=sets)
    try:
        obs, rng = _reset_and_step(env, 20, 1)
        slot = env.run.thread.sup.slots[1]
        victim = slot.proc.pid
        mine = np.arange(slot.row0, slot.row0 + slot.nrows)
        os.kill(victim, signal.SIGKILL)
        seen = np.zeros(env.num_envs, bool)
        for _ in range(200):
            obs, rew, term, trunc, infos = env.step(sample_masked(obs["mask"], rng))
            assert not term.any()
            assert not trunc[~np.isin(np.arange(env.num_envs), mine)].any(), "a row of another game was cut"
            assert (trunc == infos["cut"]).all()
            assert not (seen & trunc).any(), "a cut reported twice"
            seen |= trunc
            if seen[mine].all():
                break
        assert seen[mine].all() and not seen[~np.isin(np.arange(env.num_envs), mine)].any()
        assert (rew[mine] == 0).all()
        obs, rew, term, trunc, infos = env.step(sample_masked(obs["mask"], rng))  # the restarted game
        assert (infos["step"][mine] == 0).all() and (infos["slot"][mine] == 1).all()
        assert infos["step"][0] > 20 and not trunc.any()
        assert slot.proc.pid != victim and env.restarts_seen == len(mine)
    finally:
        env.close()


@pytest.mark.parametrize("gather_here", [True, False], ids=["caller-gathers", "loop-gathers"])
def test_rows_stay_in_order_while_games_are_killed(gather_here, monkeypatch):
    """Games killed at random moments while the caller steps, with the rounds on the
    caller's thread (the default) and on the loop's (a cluster's run): every row's next
    step is its last step + 1, or 0 after an end or a cut; a cut comes only to a killed
    game's rows and shows the row's last observation again; nothing is handed out twice;
    the run goes on."""
    import threading
    import time

    from w3async.runtime.slots import SlotState

    monkeypatch.setattr(Bridge, "gather_here", gather_here)
    env = we.make("env-null", sets=["games.count=4", "supervisor.backoff_s=0.01", "supervisor.backoff_max_s=0.05",
                                    "supervisor.restart_budget=10000"], step_timeout_s=60)
    stop, kills = threading.Event(), []
    try:
        obs, infos = env.reset()
        assert env.run.bridge.gathers is gather_here
        slots = env.run.thread.sup.slots

        def killer():
            rng = np.random.default_rng(7)
            while not stop.wait(float(rng.uniform(0.005, 0.04))):
                s = slots[int(rng.integers(len(slots)))]
                if s.state is not SlotState.RUNNING:  # one that posted since its start: never a start in a row
                    continue
                try:
                    os.kill(s.proc.pid, signal.SIGKILL)
                    kills.append(s.index)
                except (ProcessLookupError, AttributeError):
                    pass

        t = threading.Thread(target=killer)
        t.start()
        rng = np.random.default_rng(4)
        step, ended = infos["step"].copy(), np.zeros(env.num_envs, bool)
        slot_of = infos["slot"].copy()
        cuts = 0
        deadline = time.monotonic() + 4.0
        while time.monotonic() < deadline:
            last_obs = obs
            obs, rew, term, trunc, infos = env.step(sample_masked(obs["mask"], rng))
            cut = infos["cut"]
            assert (trunc[cut]).all() and not term[cut].any() and (rew[cut] == 0).all()
            for k in obs:  # a cut row shows its last observation again
                assert (obs[k][cut] == last_obs[k][cut]).all(), k
            go = ~cut
            fresh = ended | (infos["step"] == 0)
            assert (infos["step"][go & ~fresh] == step[go & ~fresh] + 1).all(), (infos["step"], step)
            assert (infos["step"][go & ended] == 0).all()
            assert (infos["slot"] == slot_of).all()
            cuts += int(cut.sum())
            step = np.where(cut, -1, infos["step"])  # after a cut: the new game's step 0
            ended = (term | trunc) & ~cut | cut
        stop.set()
        t.join()
        assert len(kills) > 10 and cuts > 0, (len(kills), cuts)
        obs, *_ = env.step(sample_masked(obs["mask"], rng))  # still running
    finally:
        stop.set()
        env.close()


@pytest.mark.parametrize("gather_here", [True, False], ids=["caller-gathers", "loop-gathers"])
def test_two_threads_step_their_own_games(gather_here, monkeypatch):
    """Two threads of the caller, each sending to and waiting for the rows of its own
    games at the same time (send, recv_rows): both go on, every row's step moves by one a
    step, nothing raises (each thread sleeps in its own wait, on its own wake-up: a wake-up
    both shared woke one of them, the other after its half-second nap)."""
    import threading

    monkeypatch.setattr(Bridge, "gather_here", gather_here)
    env = we.make("env-null", sets=['games.env.W3N_EPISODE_STEPS="100000"'], step_timeout_s=60)
    try:
        _, infos = env.reset()
        assert env.run.bridge.gathers is gather_here
        errors, steps = [], {}

        def drive(ids):
            try:
                rng = np.random.default_rng(int(ids[0]))
                step = infos["step"][ids].copy()
                mask = np.zeros((len(ids), layout.N_HEADS, layout.HEAD_MAX), np.uint8)
                for h, size in enumerate(env.single_action_space.nvec):  # the first step: any choice of each head
                    mask[:, h, :size] = 1
                for _ in range(300):
                    env.send(sample_masked(mask, rng), ids)
                    obs, rew, term, trunc, inf = env.recv_rows(ids)
                    assert (inf["env_id"] == ids).all() and not trunc.any()
                    assert (inf["step"] == step + 1).all(), (inf["step"], step)
                    step, mask = inf["step"], obs["mask"]
                steps[int(ids[0])] = step
            except BaseException as e:  # said by the test's thread
                errors.append(e)

        half = env.num_envs // 2  # env-null: 2 rows a game, so each half is whole games
        threads = [threading.Thread(target=drive, args=(ids,)) for ids in (np.arange(half), np.arange(half, env.num_envs))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert not errors, errors
        assert sorted(steps) == [0, half] and all((v >= 300).all() for v in steps.values())
    finally:
        env.close()


@pytest.mark.parametrize("gather_here", [True, False], ids=["caller-gathers", "loop-gathers"])
def test_interrupts_in_the_middle_of_steps_ask_for_a_reset_and_lose_nothing(gather_here, monkeypatch):
    """KeyboardInterrupts at random moments inside step() (a timer's signal every 1-4 ms,
    raising only while step() runs, as a Ctrl-C lands in a notebook): each one either
    leaves the env usable, the rows' steps going on, or, when it cut an answer or a round
    in the middle, makes the next step refuse with EnvInterrupted until reset(); no step
    hangs, no observation is handed out twice. Then one interruption inside an answer,
    forced: the same. Both where the rounds run: on the caller's thread, and on the loop
    (a cluster's run), where the caller's thread only waits."""
    import time

    monkeypatch.setattr(Bridge, "gather_here", gather_here)
    env = we.make("env-null", sets=['games.env.W3N_EPISODE_STEPS="100000"'], step_timeout_s=30)
    rng = np.random.default_rng(5)
    counts = {"interrupts": 0, "refused": 0, "steps": 0}
    armed = [False]  # raise only inside step(): the test's own lines stay whole

    def on_alarm(signum, frame):
        signal.setitimer(signal.ITIMER_REAL, float(rng.uniform(0.001, 0.004)))
        if armed[0]:
            raise KeyboardInterrupt

    old = signal.signal(signal.SIGALRM, on_alarm)
    try:
        obs, infos = env.reset()
        step = infos["step"].copy()
        deadline = time.monotonic() + 4.0
        signal.setitimer(signal.ITIMER_REAL, 0.002)
        while time.monotonic() < deadline:
            try:
                armed[0] = True
                obs2, rew, term, trunc, infos = env.step(sample_masked(obs["mask"], rng))
                armed[0] = False
            except KeyboardInterrupt:
                armed[0] = False
                counts["interrupts"] += 1
                # the step's `with` blocks all undone (a lock left held deadlocks a later sleep)
                assert not env.run.bridge.lock._is_owned(), "an interrupt left the run's lock held"
                continue
            except we.EnvInterrupted:
                armed[0] = False
                counts["refused"] += 1
                obs, infos = env.reset()
                step = infos["step"].copy()
                assert (step == 0).all()
                continue
            obs = obs2
            counts["steps"] += 1
            # a step whose result an interrupt took is not seen: more than one ahead, never behind
            assert (infos["step"] > step).all() and not trunc.any(), (infos["step"], step)
            step = infos["step"].copy()
        signal.setitimer(signal.ITIMER_REAL, 0)
        assert counts["interrupts"] > 50 and counts["steps"] > 50, counts
        try:  # the loop's last interrupt may have cut a step: then one refusal, and a reset
            obs, _, _, _, infos = env.step(sample_masked(obs["mask"], rng))
        except we.EnvInterrupted:
            obs, infos = env.reset()
        step = infos["step"].copy()
        for _ in range(30):
            obs, _, _, trunc, infos = env.step(sample_masked(obs["mask"], rng))
            assert (infos["step"] == step + 1).all() and not trunc.any()
            step = infos["step"].copy()

        if not gather_here:  # the loop answers: an interrupt there would be the loop's, not the caller's
            return
        control = env.run.bridge.control
        real = control.answer

        def cut_answer(*a):
            control.answer = real
            raise KeyboardInterrupt  # as if it landed here

        control.answer = cut_answer
        with pytest.raises(KeyboardInterrupt):
            env.step(sample_masked(obs["mask"], rng))
        with pytest.raises(we.EnvInterrupted, match="reset"):
            env.step(sample_masked(obs["mask"], rng))
        obs, infos = env.reset()
        for _ in range(10):
            obs, *_ = env.step(sample_masked(obs["mask"], rng))
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
        env.close()


def test_a_reset_right_after_a_game_died_gives_the_restarted_games_rows():
    """reset() while a game is down (SIGKILLed, its restart waiting out the backoff): the
    reset takes that game's next start for its new one instead of waiting for a kill that
    cannot happen (it waited for its step timeout before: forever by default)."""
    import time

    env = we.make("env-null", step_timeout_s=20)
    try:
        obs, rng = _reset_and_step(env, 5, 6)
        slot = env.run.thread.sup.slots[1]
        os.kill(slot.proc.pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while str(slot.state) != "restarting" and time.monotonic() < deadline:
            time.sleep(0.01)
        assert str(slot.state) == "restarting"
        obs, infos = env.reset()
        assert (infos["step"] == 0).all() and not infos["cut"].any()
        obs, _, _, trunc, infos = env.step(sample_masked(obs["mask"], rng))
        assert (infos["step"] == 1).all() and not trunc.any()
    finally:
        env.close()


def test_a_waiting_thread_sleeps_while_a_game_is_slow():
    """A step's wait yields its core only briefly (Bridge.spin_s) and then sleeps: a game
    that takes long (here one stopped with SIGSTOP, its step never coming within the
    step timeout) costs the caller's thread little CPU, not a core for as long as it
    waits. The step times out naming the wait; after SIGCONT the rows come."""
    import time

    env = we.make("env-null", step_timeout_s=1.5)
    try:
        obs, rng = _reset_and_step(env, 3, 7)
        pid = env.run.thread.sup.slots[0].proc.pid
        os.killpg(pid, signal.SIGSTOP)  # the start's group: in a sandbox, pid is bwrap's, the game its child
        try:
            t0, c0 = time.monotonic(), time.thread_time()
            with pytest.raises(TimeoutError, match="no rows ready within 1.5 s"):
                env.step(sample_masked(obs["mask"], rng))
            wall, cpu = time.monotonic() - t0, time.thread_time() - c0
        finally:
            os.killpg(pid, signal.SIGCONT)
        assert wall >= 1.5
        # a spin for the whole wait would take ~the wall on this thread's core
        assert cpu < 0.25 * wall, (cpu, wall)
        env.run.wait_rows(env.run.rows, 30)  # the stopped game's rows, once it goes on
    finally:
        env.close()


def test_send_recv_serves_every_row():
    """EnvPool style: recv gives batch_size ready rows, oldest first; answering them keeps
    every row moving (none starves)."""
    env = we.make("env-null", batch_size=4)
    try:
        env.reset()
        rng = np.random.default_rng(2)
        env.send(np.zeros((8, 4), np.int64), np.arange(8))
        served = np.zeros(8, np.int64)
        for _ in range(300):
            obs, rew, term, trunc, infos = env.recv(timeout_s=30)
            ids = infos["env_id"]
            assert len(ids) == 4 and len(set(ids.tolist())) == 4
            assert env.single_observation_space.contains({k: v[0] for k, v in obs.items()} | {"n_ent": int(obs["n_ent"][0])})
            served[ids] += 1
            env.send(sample_masked(obs["mask"], rng), ids)
        # oldest first: a game that posts faster is served more often, none is left out
        # (a row never served would be 0 here; 1,200 rows over 8 make 150 a row on average)
        assert served.min() >= 40, served
        with pytest.raises(ValueError, match="expected"):
            env.send(np.zeros((3, 4)), np.arange(2))
    finally:
        env.close()


def test_recvs_final_info_counts_each_sub_envs_own_episode():
    """send/recv in batches of half the rows: each ended episode's final_info entry is that
    sub-env's, its return the sum of the rewards recv gave that env id since its first
    observation and its length the steps counted (the null game's 20-post episodes: 19
    or 20 actions, as gymnasium's wrapper counts them over step())."""
    env = we.make("env-null", batch_size=4, sets=['games.env.W3N_EPISODE_STEPS="20"'])
    try:
        env.reset()
        rng = np.random.default_rng(4)
        env.send(np.zeros((8, 4), np.int64), np.arange(8))
        ret, length, fresh, ended = np.zeros(8), np.zeros(8, np.int64), np.zeros(8, bool), []
        for _ in range(200):
            obs, rew, term, trunc, infos = env.recv(timeout_s=30)
            ids = infos["env_id"]
            for k, e in enumerate(ids):
                if fresh[e]:
                    ret[e], length[e], fresh[e] = 0.0, 0, False
                else:
                    ret[e] += rew[k]
                    length[e] += 1
            done = term | trunc
            assert ("final_info" in infos) == bool(done.any())
            for k in np.flatnonzero(done):
                e = ids[k]
                ep = infos["final_info"][k]["episode"]
                assert infos["_final_info"][k] and int(ep["l"]) == length[e] and abs(float(ep["r"]) - ret[e]) < 1e-4
                ended.append(int(ep["l"]))
                fresh[e] = True
            if "final_info" in infos:
                assert all(infos["final_info"][k] is None for k in np.flatnonzero(~done))
            env.send(sample_masked(obs["mask"], rng), ids)
        assert len(ended) >= 8 and set(ended) <= {19, 20}, ended
    finally:
        env.close()


def test_close_leaves_nothing():
    """close() ends the games and unlinks the segments; a second reset() restarts every
    game, its rows at step 0 again."""
    env = we.make("env-duel")
    obs, rng = _reset_and_step(env, 10, 3)
    pids = [s.proc.pid for s in env.run.thread.sup.slots]
    obs, infos = env.reset()
    assert (infos["step"] == 0).all() and not infos["cut"].any()
    pids2 = [s.proc.pid for s in env.run.thread.sup.slots]
    assert not set(pids) & set(pids2)
    run_dir = env.run.run_dir
    env.close()
    assert not [p for p in pids + pids2 if _alive(p)]
    assert not list_segments(SHM_PREFIX)
    assert not run_dir.exists()
    with pytest.raises(we.EnvClosed):
        env.step(np.zeros((env.num_envs, layout.N_HEADS), np.int64))


@pytest.mark.parametrize("name,sets", [("env-null", ["games.count=1"]), ("env-duel-selfplay", []),
                                       ("env-duel", ["games.lanes=1"])])
def test_parallel_api(name, sets):
    env = we.parallel_env(name, sets=sets)
    try:
        parallel_api_test(env, num_cycles=300)
    finally:
        env.close()


def test_misuse_is_named_before_it_reaches_a_game():
    """step() before reset() says to call reset(); an action outside its head's space
    (999, -1, NaN, 2.5) names the env id or agent, the head and the value; a PettingZoo
    step without every live agent's action names the missing one. Before: an
    AttributeError on None, actions passed to the game as they were, a bare KeyError."""
    env = we.make("env-null", sets=["games.count=1"])
    try:
        with pytest.raises(RuntimeError, match=r"step\(\) before reset\(\): call reset\(\) first"):
            env.step(np.zeros((env.num_envs, len(env.single_action_space.nvec)), np.int64))
        env.reset(seed=1)
        good = np.zeros((env.num_envs, len(env.single_action_space.nvec)), np.int64)
        for bad, why in ((999, "999 is outside 0.."), (-1, "-1 is outside 0.."), (np.nan, "nan is not a whole number"),
                         (2.5, "2.5 is not a whole number")):
            acts = good.astype(np.float64) if isinstance(bad, float) else good.copy()
            acts[1, 2] = bad
            with pytest.raises(ValueError, match=f"env id 1, head 2: {re.escape(why)}"):
                env.step(acts)
        env.step(good)  # the refused steps sent nothing: the env goes on
    finally:
        env.close()
    penv = we.parallel_env("env-null", sets=["games.count=1"])
    try:
        with pytest.raises(RuntimeError, match="call reset"):
            penv.step({})
        penv.reset(seed=1)
        first, *rest = penv.agents
        heads = len(penv.action_space(first).nvec)
        with pytest.raises(ValueError, match=f"no action for {rest[0]}"):
            penv.step({first: np.zeros(heads, np.int64)})
        with pytest.raises(ValueError, match=f"agent {first}, head 0: 999 is outside"):
            penv.step({a: np.full(heads, 999 if a == first else 0) for a in penv.agents})
    finally:
        penv.close()


def test_gymnasiums_episode_statistics_wrapper_records_episodes():
    """gymnasium's RecordEpisodeStatistics (CleanRL's logging reads its info["episode"]
    ["r"], ["l"]) over the vector env: it works, the episode's id being "episode_id".
    Before: ValueError, the key "episode" already in info."""
    from gymnasium.wrappers.vector import RecordEpisodeStatistics

    env = RecordEpisodeStatistics(we.make("env-null", sets=["games.count=1", 'games.env.W3N_EPISODE_STEPS="20"']))
    try:
        obs, info = env.reset(seed=3)
        rng = np.random.default_rng(0)
        done = []
        for _ in range(60):
            obs, rew, term, trunc, info = env.step(sample_masked(obs["mask"], rng))
            if "episode" in info:
                done += [(float(r), int(n)) for r, n, m in zip(info["episode"]["r"], info["episode"]["l"],
                                                                info["_episode"]) if m]
        assert done and all(n in (19, 20) for _, n in done), done  # 20 posts an episode: 19 or 20 actions
        assert "episode_id" in info
    finally:
        env.close()


def test_cleanrls_final_info_loop_reads_the_episodes_gymnasiums_wrapper_records():
    """CleanRL's ppo.py logs `for info in infos["final_info"]: if info and "episode" in
    info: info["episode"]["r"], ["l"]` (gymnasium 0.29's form): over the duel's vector env
    that loop, as it is, sees every ended episode, with the return and length gymnasium
    1.x's RecordEpisodeStatistics records for it in the same steps. Before: no
    "final_info", the loop logged nothing."""
    from gymnasium.wrappers.vector import RecordEpisodeStatistics

    env = RecordEpisodeStatistics(we.make("env-duel"))
    try:
        obs, info = env.reset(seed=5)
        assert "final_info" not in info
        rng = np.random.default_rng(0)
        cleanrl, wrapper = [], []
        while len(wrapper) < 6:
            obs, rew, term, trunc, infos = env.step(sample_masked(obs["mask"], rng))
            if "final_info" in infos:  # the loop of CleanRL's ppo.py
                for info in infos["final_info"]:
                    if info and "episode" in info:
                        cleanrl.append((float(info["episode"]["r"]), int(info["episode"]["l"])))
                assert list(infos["_final_info"]) == list(term | trunc)
            else:
                assert not (term | trunc).any()
            if "episode" in infos:
                wrapper += [(float(r), int(n)) for r, n, m in zip(infos["episode"]["r"], infos["episode"]["l"],
                                                                  infos["_episode"]) if m]
        assert len(cleanrl) == len(wrapper) and len({n for _, n in cleanrl}) > 1, (cleanrl, wrapper)
        assert [n for _, n in cleanrl] == [n for _, n in wrapper]
        assert np.allclose([r for r, _ in cleanrl], [r for r, _ in wrapper], atol=1e-4)
    finally:
        env.close()


def test_parallel_refuses_many_lanes():
    with pytest.raises(ValueError, match="lanes = 1"):
        we.parallel_env("env-duel")


@pytest.mark.parametrize("name", RECIPES)
def test_single_game_env_checkers(name):
    """One game as a gymnasium.Env (w3async.env.single.GameEnv) through gymnasium's own
    check_env, its reset- and step-determinism checks included (reset(seed=) restarts the
    game with that seed), and the passive checkers on every reset and step of a few
    episodes."""
    from gymnasium.utils.env_checker import check_env
    from gymnasium.utils.passive_env_checker import env_reset_passive_checker, env_step_passive_checker

    from w3async.env.single import GameEnv

    env = GameEnv(name, render_mode="rgb_array" if name == "env-duel" else None)
    try:
        check_env(env, skip_render_check=name != "env-duel")  # the duel draws its observation
        ends = 0
        rng = np.random.default_rng(4)
        obs, _ = env_reset_passive_checker(env, seed=5)
        for _ in range(400):
            mask = obs["mask"] if obs["mask"].ndim == 3 else obs["mask"][None]
            act = sample_masked(mask, rng).reshape(env.action_space.shape)
            # MaskablePPO's view: each head's choices, flat; the sampled action allowed in it
            flat, nvec = env.action_masks(), np.tile(env.env.single_action_space.nvec, act.size // env._heads)
            assert flat.dtype == bool and flat.shape == (int(nvec.sum()),)
            assert flat[np.concatenate([[0], np.cumsum(nvec)[:-1]]) + act.reshape(-1)].all()
            obs, rew, term, trunc, info = env_step_passive_checker(env, act)
            assert env.observation_space.contains(obs)
            if term or trunc:
                ends += 1
                obs, info = env_reset_passive_checker(env)
                assert info["step"].max() == 0 if isinstance(info["step"], np.ndarray) else info["step"] == 0
        assert ends > 0
        slot = env.env.run.thread.sup.slots[0]
        assert slot.causes["env_reset"] > 0 and slot.restarts == 0  # the seeded resets: not counted
    finally:
        env.close()


def _trajectory(env, seed, steps):
    """Observations and rewards of `steps` steps from reset(seed=seed), the actions drawn
    from a generator seeded alike."""
    obs, _ = env.reset(seed=seed)
    rng = np.random.default_rng(seed)
    seen = [obs["glob"].copy()]
    for _ in range(steps):
        obs, rew, term, trunc, _ = env.step(sample_masked(obs["mask"], rng))
        seen += [obs["glob"].copy(), obs["ent"].copy(), rew.copy(), term.copy()]
    return seen


def test_seeded_resets_repeat_episodes_and_cost_no_budget():
    """reset(seed=s) restarts every game with seeds made from s: the same seed and actions
    give the same observations and rewards, another seed other ones; a caller's resets,
    more than the restart budget of 2 here, are not counted against the games."""
    env = we.make("env-duel", games__count=2, supervisor__restart_budget=2)
    try:
        a = _trajectory(env, 11, 60)
        for _ in range(3):
            env.reset()  # unseeded resets between: the seeded ones do not depend on history
        b = _trajectory(env, 11, 60)
        c = _trajectory(env, 12, 60)
        assert all(np.array_equal(x, y) for x, y in zip(a, b))
        assert not all(np.array_equal(x, y) for x, y in zip(a, c))
        slots = env.run.thread.sup.slots
        assert [s.restarts for s in slots] == [0, 0]
        assert [s.causes["env_reset"] for s in slots] == [5, 5]
        assert not any(str(s.state) == "failed" for s in slots)
    finally:
        env.close()


def test_exit_without_close_cleans_up(tmp_path):
    """A caller that dies of an exception without close(): at exit every run it made still
    shuts down, every step of it: one running, one dropped unclosed inside a function, one
    made and never reset (no segment left, no game alive, the run folders gone, no
    shutdown error: run from atexit, its off-loop steps found the executors stopped)."""
    import json
    import subprocess
    import sys

    code = ("import gc, json, w3async.env as we\n"
            "def dropped():\n"
            "    e = we.make('env-null'); e.reset()\n"
            "    return [s.proc.pid for s in e.run.thread.sup.slots], str(e.run.run_dir)\n"
            "pids, first = dropped(); gc.collect()\n"
            "env = we.make('env-duel'); env.reset()\n"
            "idle = we.make('env-null')\n"
            "pids += [s.proc.pid for s in env.run.thread.sup.slots]\n"
            "print(json.dumps(dict(pids=pids, dirs=[first, str(env.run.run_dir), str(idle.run.run_dir)])), flush=True)\n"
            "raise RuntimeError('the caller failed')\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert "the caller failed" in r.stderr and r.returncode == 1
    assert "shutdown:" not in r.stderr and "cannot schedule" not in r.stderr, r.stderr[-3000:]
    made = json.loads(r.stdout.strip().splitlines()[-1])
    assert len(made["pids"]) >= 2 and not [p for p in made["pids"] if _alive(p)]
    assert not list_segments(SHM_PREFIX)
    assert not [d for d in made["dirs"] if os.path.exists(os.path.dirname(d))]


@pytest.fixture
def duel_checkpoint(tmp_path):
    """A checkpoint of an untrained duel network (d_model 16) whose recipe is the duel's."""
    from tests.learn.test_eval_modes import checkpoint

    return checkpoint(tmp_path / "opp", seed=3)


def test_a_checkpoint_opponent_plays_side_one(duel_checkpoint):
    """make(opponent=CHECKPOINT): side 1 of each two-sided lane is the checkpoint's, the
    sub-envs are the side-0 rows; its games advance to their ends (the opponent answers),
    and, greedy, the same seed and actions give the same episodes (the opponent's actions
    come from its fixed weights)."""
    env = we.make("env-duel-selfplay", games__count=2, games__env__W3D_TIME_LIMIT=200, opponent=duel_checkpoint,
                  opponent_greedy=True)
    try:
        assert env.num_envs == 2 and list(env._rows) == [0, 2]
        a = _trajectory(env, 5, 40)
        b = _trajectory(env, 5, 40)
        assert all(np.array_equal(x, y) for x, y in zip(a, b))
        obs, _ = env.reset(seed=1)
        rng = np.random.default_rng(0)
        ended, slots = 0, set()
        for _ in range(300):
            obs, rew, term, trunc, info = env.step(sample_masked(obs["mask"], rng))
            ended += int((term | trunc).sum())
            slots |= set(info["slot"].tolist())
            assert not info["cut"].any()
        assert ended >= 2 and slots == {0, 1}  # both games ran to their ends, one sub-env each
    finally:
        env.close()


def test_a_checkpoint_opponent_in_the_parallel_env(duel_checkpoint):
    env = we.parallel_env("env-duel-selfplay", opponent=duel_checkpoint)
    try:
        assert env.possible_agents == ["player_0"]
        parallel_api_test(env, num_cycles=200)
    finally:
        env.close()


def test_a_bad_opponent_is_refused_naming_it(tmp_path, duel_checkpoint):
    from w3async.learn.eval_policy import EvalError

    with pytest.raises(ValueError, match="two agent sides"):
        we.make("env-duel", opponent=duel_checkpoint)
    bad = tmp_path / "bad.pt"
    bad.write_bytes(b"not a checkpoint")
    with pytest.raises(EvalError, match="bad.pt"):
        we.make("env-duel-selfplay", opponent=bad)


@pytest.mark.wine
def test_an_injected_windows_game_behind_the_env(wine):
    """The standalone duel (duel_rt.exe, a game not built for w3async) driven by injection
    under Wine, behind the VectorEnv: steps inside the spaces, its games' steps advance,
    and close() leaves no segment."""
    env = we.make("duel-injected", games__count=2, step_timeout_s=120)
    try:
        obs, infos = env.reset()
        rng = np.random.default_rng(6)
        for _ in range(60):
            obs, rew, term, trunc, infos = env.step(sample_masked(obs["mask"], rng))
            _check_batch(env, obs, rew, term, trunc, infos)
            assert np.isfinite(rew).all()
        assert env.num_envs == 2 and (infos["step"] > 0).any() and set(infos["slot"].tolist()) == {0, 1}
        assert [str(s.runtime.name) for s in env.run.thread.sup.slots] == ["injected"] * 2
    finally:
        env.close()
    assert not list_segments(SHM_PREFIX)


_KILLED_ENV = """
import sys, w3async.env as we
env = we.make("env-null", sets=["games.count=1"])
env.reset(seed=1)
print(env.run.run_dir.parent, env.run.thread.sup.table.name, flush=True)
sys.stdin.read()
"""


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
def test_an_env_killed_by_a_signal_is_cleaned_by_the_next_env(sig):
    """An env's process dies by SIGKILL or SIGTERM (Python's default: no atexit): its
    segments and its folder in /tmp stay (before: for good); the next env made on the
    machine ends what is left of that run and removes both."""
    import subprocess
    import sys
    from pathlib import Path

    p = subprocess.Popen([sys.executable, "-c", _KILLED_ENV], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         text=True)
    folder, table = p.stdout.readline().split()
    p.send_signal(sig)
    p.wait(30)
    assert Path(folder).exists() and list_segments(table), "nothing was left to clean (the test proves nothing)"
    env = we.make("env-null", sets=["games.count=1"])
    try:
        assert not Path(folder).exists(), folder
        assert not list_segments(table), list_segments(table)
        assert env.run.run_dir.parent.exists()  # a live env's own folder is not swept
    finally:
        env.close()


def test_gymnasium_ids_make_a_game_env():
    """`import w3async.env` registers a gymnasium id per shipped env recipe;
    gymnasium.make(id) is that recipe's GameEnv (gymnasium's wrappers around it: the
    order enforcer, the passive checker), keywords passed on."""
    import gymnasium

    assert set(we.ENV_IDS) <= set(gymnasium.registry)
    env = gymnasium.make("w3async/Null-v0", sets=["games.env.W3N_EPISODE_STEPS=5"])
    try:
        obs, _ = env.reset(seed=3)
        assert env.observation_space.contains(obs)
        ends = 0
        for _ in range(12):
            mask = obs["mask"] if obs["mask"].ndim == 3 else obs["mask"][None]
            obs, _, term, trunc, _ = env.step(sample_masked(mask, np.random.default_rng(0)).reshape(
                env.action_space.shape))
            ends += bool(term or trunc)
            if term or trunc:
                obs, _ = env.reset()
        assert ends >= 2  # episodes of 5 steps
        assert type(env.unwrapped).__name__ == "GameEnv"
    finally:
        env.close()


def test_a_training_recipes_evaluation_groups_are_no_sub_envs(tmp_path):
    """A recipe with `role = "eval"` groups behind the env: only its other groups run, so
    every sub-env is a training row; a recipe of evaluation groups alone is refused."""
    null = REPO / "build" / "native" / "null_game"
    group = f'[[games]]\nbinary = "{null}"\ncount = 1\nlanes = 1\nsides = 2\nenv = {{ W3N_CHECK = "0" }}\n'
    (tmp_path / "r.toml").write_text('name = "r"\n' + group + group + 'role = "eval"\n')
    env = we.make(str(tmp_path / "r.toml"))
    try:
        assert env.num_envs == 2 and len(env.run.recipe.games) == 1
        env.reset(seed=1)
    finally:
        env.close()
    (tmp_path / "e.toml").write_text('name = "e"\n' + group + 'role = "eval"\n')
    with pytest.raises(ValueError, match="only evaluation groups"):
        we.make(str(tmp_path / "e.toml"))


@pytest.mark.parametrize("sides,limit_turns", [("agent,ai:easy", 200), ("agent,ai:hard", 12000)])
def test_info_time_limit_tells_the_tie_break_from_a_decided_game(sides, limit_turns):
    """info["time_limit"] is True exactly on a terminated step that the duel's own time
    limit ended (its result the tie-break's: docs/duel.md), False on a decided one: 200
    turns (10 steps of 20) end every game at the limit; against ai:hard with 600 steps,
    random play loses its base long before. Before: nothing in the env told them apart."""
    env = we.make("env-duel", games__count=1, games__env__W3D_SIDES=sides,
                  games__env__W3D_TIME_LIMIT=str(limit_turns))
    limit_steps = limit_turns // 20
    try:
        obs, _ = env.reset(seed=5)
        rng = np.random.default_rng(5)
        ended = []
        for _ in range(2000):
            obs, rew, term, trunc, info = env.step(sample_masked(obs["mask"], rng))
            assert not info["time_limit"][~term].any()
            ended += [(bool(info["time_limit"][i]), int(info["step"][i])) for i in np.flatnonzero(term)]
            if len(ended) >= 2:
                break
        assert len(ended) >= 2, ended
        assert all(tl == (step >= limit_steps) for tl, step in ended), (limit_steps, ended)
        assert all(tl for tl, _ in ended) if limit_turns == 200 else not any(tl for tl, _ in ended), ended
    finally:
        env.close()


def test_render_draws_each_sub_envs_last_observation_with_the_games_viewer():
    """render_mode="rgb_array": render() gives each sub-env's last observation as the
    duel's viewer draws it (its own units in the agent's colour, the step written on it),
    through make() and gymnasium.make's id alike; None without a mode; a game with no
    view of an observation, or a mode the env has not, is refused naming it. Before: no
    render() at all."""
    import gymnasium as gym

    from w3async.observe.video import OWNER_COLOURS

    env = we.make("env-duel", games__count=1, render_mode="rgb_array")
    try:
        assert env.render_mode == "rgb_array" and env.metadata["render_modes"] == ["rgb_array"]
        assert env.render() == (None,) * env.num_envs  # nothing seen yet
        obs, _ = env.reset(seed=4)
        rng = np.random.default_rng(4)
        first = env.render()
        for _ in range(20):
            obs, *_ = env.step(sample_masked(obs["mask"], rng))
        later = env.render()
        assert len(later) == env.num_envs
        for f in (*first, *later):
            assert f.dtype == np.uint8 and f.ndim == 3 and f.shape[2] == 3 and max(f.shape[:2]) <= 256
            assert (f == np.array(OWNER_COLOURS[0], np.uint8)).all(axis=2).any()  # its own units
        assert any((a != b).any() for a, b in zip(first, later))  # the units moved, the step changed
    finally:
        env.close()
    single = gym.make("w3async/Duel-v0", render_mode="rgb_array")
    try:
        single.reset(seed=1)
        assert single.render().shape[2] == 3
    finally:
        single.close()
    plain = we.make("env-duel", games__count=1)
    try:
        plain.reset(seed=1)
        assert plain.render() is None and plain.metadata["render_modes"] == ["rgb_array"]
    finally:
        plain.close()
    with pytest.raises(ValueError, match="the game 'null' has no view of an observation"):
        we.make("env-null", render_mode="rgb_array")
    with pytest.raises(ValueError, match="render_mode='human': this env renders 'rgb_array' or None"):
        we.make("env-duel", render_mode="human")
