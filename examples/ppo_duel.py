"""PPO on the duel against its easy AI, CleanRL-style in one file, over w3async.env.

    .venv/bin/python examples/ppo_duel.py --minutes 20 --csv /tmp/ppo_duel.csv
    .venv/bin/python examples/ppo_duel.py --minutes 12 --save-model       # runs/ppo_duel__1__<time>/
    .venv/bin/python examples/ppo_duel.py --play runs/ppo_duel__1__<time>/ppo_duel.model --games 100
    .venv/bin/python -m w3async eval runs/ppo_duel__1__<time>/ppo_duel.model \
        --policy examples/ppo_duel.py:eval_policy --recipe env-duel --games 100   # every level, w3async's table

The env is `w3async.env.make("env-duel")`: 4 game processes of 2 lanes, one agent row a
lane (8 sub-envs), NEXT_STEP autoreset. The agent: entities (features + a type
embedding) through a small MLP, mean- and max-pooled over the first n_ent, with the
global features; three choice heads and a pointer head (a score per entity), each
masked by the observation's `mask`. Prints (and writes to --csv) the win rate against
ai:easy over the last 100 finished games, every update, and the part won decisively (the
base destroyed, not the tie-break at the time limit: info["time_limit"]).

Logging as CleanRL's ppo.py does it, with its loop as it is: each finished episode's
info["final_info"][i]["episode"]["r"] and ["l"] (the vector env's gymnasium-0.29 form;
gymnasium 1.x's RecordEpisodeStatistics, which wraps the env here too, records the same
in info["episode"]) written to TensorBoard as charts/episodic_return and charts/episodic_length, with charts/SPS,
charts/learning_rate and losses/* (value_loss, policy_loss, entropy, approx_kl,
clipfrac), under runs/<exp-name>__<seed>__<unix time>/ (--tb-dir; "" for none), beside
charts/win_rate and charts/decisive_win_rate. --save-model writes the agent's weights and
settings there (ppo_duel.model); --play MODEL plays a saved model, greedy, against the
recipe's opponent and prints its win rate.
"""

from __future__ import annotations

import argparse
import csv
import os
import sys
import time
from collections import deque
from pathlib import Path

import numpy as np
import torch
import torch.nn as nn
from gymnasium.wrappers.vector import RecordEpisodeStatistics
from torch.utils.tensorboard import SummaryWriter

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import w3async.env as we  # noqa: E402
from w3async import games  # noqa: E402


def parse():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--recipe", default="env-duel")
    p.add_argument("--minutes", type=float, default=20.0)
    p.add_argument("--num-steps", type=int, default=128, help="steps per env per rollout")
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--noop-bias", type=float, default=3.0)
    p.add_argument("--gamma", type=float, default=0.99)
    p.add_argument("--gae-lambda", type=float, default=0.95)
    p.add_argument("--update-epochs", type=int, default=3)
    p.add_argument("--num-minibatches", type=int, default=4)
    p.add_argument("--clip-coef", type=float, default=0.2)
    p.add_argument("--ent-coef", type=float, default=0.003)
    p.add_argument("--vf-coef", type=float, default=0.5)
    p.add_argument("--max-grad-norm", type=float, default=0.5)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--csv", default="")
    p.add_argument("--exp-name", default="ppo_duel")
    p.add_argument("--tb-dir", default="runs", help="TensorBoard runs under here ('': none)")
    p.add_argument("--save-model", action="store_true", help="save the agent in its TensorBoard run's folder")
    p.add_argument("--play", default="", help="play this saved model (greedy) instead of training")
    p.add_argument("--games", type=int, default=100, help="--play: finished games to play")
    return p.parse_args()


class Agent(nn.Module):
    def __init__(self, n_types: int, head_sizes, noop=(None,) * 4, noop_bias: float = 3.0, d: int = 64):
        super().__init__()
        self.head_sizes = list(head_sizes)
        self.type_emb = nn.Embedding(n_types, 16)
        self.ent = nn.Sequential(nn.Linear(16 + 16, d), nn.ReLU(), nn.Linear(d, d), nn.ReLU())
        self.glob = nn.Sequential(nn.Linear(32, d), nn.ReLU())
        self.body = nn.Sequential(nn.Linear(3 * d, 2 * d), nn.ReLU(), nn.Linear(2 * d, 2 * d), nn.ReLU())
        self.heads = nn.ModuleList(nn.Linear(2 * d, n) for n in self.head_sizes[:3])
        self.query = nn.Linear(2 * d, d)
        self.value = nn.Linear(2 * d, 1)
        # The no-op prior (docs/training.md, "What made it learn"): each head's "change
        # nothing" choice starts with a logit of noop_bias, so a fresh policy keeps its
        # orders for a few steps instead of re-ordering its army every step.
        self.pointer_bias = nn.Parameter(torch.zeros(self.head_sizes[3]))
        with torch.no_grad():
            for k, c in enumerate(noop):
                if c is not None:
                    (self.heads[k].bias if k < 3 else self.pointer_bias)[c] = noop_bias

    def forward(self, o):
        ent, types, n = o["ent"], o["ent_type"].long(), o["n_ent"]
        valid = (torch.arange(ent.shape[1])[None, :] < n[:, None]).float()
        e = self.ent(torch.cat([ent, self.type_emb(types)], -1)) * valid[..., None]
        mean = e.sum(1) / valid.sum(1, keepdim=True).clamp(min=1)
        mx = (e - 1e4 * (1 - valid[..., None])).max(1).values.clamp(min=0)
        h = self.body(torch.cat([self.glob(o["glob"]), mean, mx], -1))
        logits = [head(h) for head in self.heads]
        logits.append(torch.einsum("bd,bed->be", self.query(h), e) + self.pointer_bias)  # a score per entity
        return logits, self.value(h).squeeze(-1)

    def act(self, o, action=None, greedy: bool = False):
        logits, value = self(o)
        mask = o["mask"].bool()
        logps, ents, acts = [], [], []
        for k, lg in enumerate(logits):
            lg = lg.masked_fill(~mask[:, k, : lg.shape[1]], -1e8)
            dist = torch.distributions.Categorical(logits=lg)
            a = (lg.argmax(1) if greedy else dist.sample()) if action is None else action[:, k]
            acts.append(a)
            logps.append(dist.log_prob(a))
            ents.append(dist.entropy())
        return torch.stack(acts, 1), torch.stack(logps, 1).sum(1), torch.stack(ents, 1).sum(1), value


def to_t(obs):
    return {k: torch.as_tensor(np.asarray(v)) for k, v in obs.items()}


def eval_policy(model: str, spec, greedy: bool = False):
    """For `python -m w3async eval MODEL --policy examples/ppo_duel.py:eval_policy --recipe
    env-duel`: the saved agent as a function from a batch of observations to actions
    (sampled as in training; eval_policy_greedy: each head's most likely choice)."""
    saved = torch.load(model, map_location="cpu", weights_only=True)
    agent = Agent(spec.n_types, spec.head_sizes, spec.noop, saved["args"].get("noop_bias", 3.0))
    agent.load_state_dict(saved["agent"])

    def act(obs):
        with torch.no_grad():
            return agent.act(to_t(obs), greedy=greedy)[0].numpy()

    return act


def eval_policy_greedy(model: str, spec):
    return eval_policy(model, spec, greedy=True)


def play(a, env, game, genv) -> int:
    """--play: the saved agent, greedy, until --games games finished; their win rate."""
    saved = torch.load(a.play, map_location="cpu", weights_only=True)
    agent = Agent(env.run.spec.n_types, env.single_action_space.nvec, env.run.spec.noop, a.noop_bias)
    agent.load_state_dict(saved["agent"])
    obs, _ = env.reset(seed=a.seed)
    results = []
    while len(results) < a.games:
        with torch.no_grad():
            act, *_ = agent.act(to_t(obs), greedy=True)
        obs, rew, term, trunc, info = env.step(act.numpy())
        results += [(game.result_of(float(rew[i]), genv), bool(info["time_limit"][i])) for i in np.flatnonzero(term)]
    results = results[: a.games]
    wins = sum(r == "win" for r, _ in results)
    decisive = sum(r == "win" and not tl for r, tl in results)
    print(f"{a.play}: {len(results)} games, {wins} won ({decisive} decisively, {wins - decisive} at the time limit), "
          f"win rate {wins / len(results):.2f}")
    env.close()
    return 0


def main():
    a = parse()
    torch.manual_seed(a.seed)
    shuffler = np.random.default_rng(a.seed)  # the minibatches' order: the same seed, the same run
    torch.set_num_threads(a.threads)
    env = we.make(a.recipe, supervisor__progress_s=0)
    game = games.get(env.recipe.game)
    genv = env.recipe.games[0].env
    if a.play:
        return play(a, env, game, genv)
    env = RecordEpisodeStatistics(env)  # gymnasium 1.x's: info["episode"] at each finished episode
    run_name = f"{a.exp_name}__{a.seed}__{int(time.time())}"
    writer = SummaryWriter(os.path.join(a.tb_dir, run_name)) if a.tb_dir else None
    if writer:
        writer.add_text("hyperparameters", "|param|value|\n|-|-|\n" + "\n".join(f"|{k}|{v}|" for k, v in vars(a).items()))
    n, T = env.num_envs, a.num_steps
    agent = Agent(env.unwrapped.run.spec.n_types, env.single_action_space.nvec, env.unwrapped.run.spec.noop, a.noop_bias)
    opt = torch.optim.Adam(agent.parameters(), lr=a.lr, eps=1e-5)
    obs, _ = env.reset(seed=a.seed)
    buf_obs = {k: torch.zeros((T, n, *v.shape[1:]), dtype=torch.as_tensor(v).dtype) for k, v in obs.items()}
    acts = torch.zeros((T, n, 4), dtype=torch.long)
    logps, rews, vals = (torch.zeros((T, n)) for _ in range(3))
    dones = torch.zeros((T, n))  # 1: this step's observation starts a new episode (the previous ended)
    next_done = torch.zeros(n)
    results: deque = deque(maxlen=100)
    csv_file = open(a.csv, "w", newline="") if a.csv else None
    out = csv.writer(csv_file) if csv_file else None
    if out:
        out.writerow(["minutes", "agent_steps", "games", "win_rate_last100", "decisive_win_rate_last100"])
    t0, steps, update, n_games = time.monotonic(), 0, 0, 0
    while time.monotonic() - t0 < a.minutes * 60:
        for t in range(T):
            o = to_t(obs)
            for k in buf_obs:
                buf_obs[k][t] = o[k]
            dones[t] = next_done
            with torch.no_grad():
                act, logp, _, v = agent.act(o)
            acts[t], logps[t], vals[t] = act, logp, v
            obs, rew, term, trunc, info = env.step(act.numpy())
            ended = term | trunc
            # the step after an end is the autoreset's: its action is ignored and its reward 0,
            # so the ended step's reward is its episode's last and the next step starts anew
            rews[t] = torch.as_tensor(rew)
            next_done = torch.as_tensor(ended, dtype=torch.float32)
            for i in np.flatnonzero(term):
                results.append((game.result_of(float(rew[i]), genv) == "win", bool(info["time_limit"][i])))
                n_games += 1
            steps += n
            if writer and "final_info" in info:  # the logging loop of CleanRL's ppo.py, as it is there
                for fi in info["final_info"]:
                    if fi and "episode" in fi:
                        writer.add_scalar("charts/episodic_return", fi["episode"]["r"], steps)
                        writer.add_scalar("charts/episodic_length", fi["episode"]["l"], steps)
        with torch.no_grad():
            _, next_v = agent(to_t(obs))
            adv = torch.zeros((T, n))
            last = torch.zeros(n)
            for t in reversed(range(T)):
                nd = next_done if t == T - 1 else dones[t + 1]
                nv = next_v if t == T - 1 else vals[t + 1]
                delta = rews[t] + a.gamma * nv * (1 - nd) - vals[t]
                last = delta + a.gamma * a.gae_lambda * (1 - nd) * last
                adv[t] = last
            # a step whose observation began a new episode after an end: the autoreset step, no learning
            keep = (dones == 0).reshape(-1)
            ret = adv + vals
        flat = {k: v.reshape(T * n, *v.shape[2:]) for k, v in buf_obs.items()}
        b_act, b_logp, b_adv, b_ret = acts.reshape(-1, 4), logps.reshape(-1), adv.reshape(-1), ret.reshape(-1)
        idx_all = np.flatnonzero(keep.numpy())
        mb = max(1, len(idx_all) // a.num_minibatches)
        clipfracs, kls = [], []
        for _ in range(a.update_epochs):
            shuffler.shuffle(idx_all)
            for s in range(0, len(idx_all) - mb + 1, mb):
                idx = torch.as_tensor(idx_all[s:s + mb])
                _, newlogp, ent, newv = agent.act({k: v[idx] for k, v in flat.items()}, b_act[idx])
                logratio = newlogp - b_logp[idx]
                ratio = logratio.exp()
                with torch.no_grad():
                    kls.append(((ratio - 1) - logratio).mean().item())
                    clipfracs.append(((ratio - 1.0).abs() > a.clip_coef).float().mean().item())
                ad = b_adv[idx]
                ad = (ad - ad.mean()) / (ad.std() + 1e-8)
                pg = torch.max(-ad * ratio, -ad * ratio.clamp(1 - a.clip_coef, 1 + a.clip_coef)).mean()
                vloss = 0.5 * ((newv - b_ret[idx]) ** 2).mean()
                loss = pg - a.ent_coef * ent.mean() + a.vf_coef * vloss
                opt.zero_grad()
                loss.backward()
                nn.utils.clip_grad_norm_(agent.parameters(), a.max_grad_norm)
                opt.step()
        update += 1
        mins = (time.monotonic() - t0) / 60
        wr = float(np.mean([w for w, _ in results])) if results else float("nan")
        dwr = float(np.mean([w and not tl for w, tl in results])) if results else float("nan")
        print(f"update {update} {mins:5.1f} min {steps} steps {n_games} games win rate (last {len(results)}) "
              f"{wr:.2f}, decisive {dwr:.2f}", flush=True)
        if out:
            out.writerow([f"{mins:.2f}", steps, n_games, f"{wr:.3f}", f"{dwr:.3f}"])
            csv_file.flush()  # the curve survives a stopped run
        if writer:
            for tag, v in (("charts/learning_rate", opt.param_groups[0]["lr"]), ("losses/value_loss", vloss.item()),
                           ("losses/policy_loss", pg.item()), ("losses/entropy", ent.mean().item()),
                           ("losses/approx_kl", float(np.mean(kls))), ("losses/clipfrac", float(np.mean(clipfracs))),
                           ("charts/SPS", steps / (time.monotonic() - t0))):
                writer.add_scalar(tag, v, steps)
            if results:
                writer.add_scalar("charts/win_rate", wr, steps)
                writer.add_scalar("charts/decisive_win_rate", dwr, steps)
        if a.save_model and writer:  # after every update: a stopped run keeps its last
            path = os.path.join(a.tb_dir, run_name, f"{a.exp_name}.model")
            torch.save({"agent": agent.state_dict(), "args": vars(a)}, path + ".tmp")
            os.replace(path + ".tmp", path)
    if a.save_model and writer:
        print(f"saved {os.path.join(a.tb_dir, run_name, a.exp_name + '.model')}")
    if writer:
        writer.close()
    env.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
