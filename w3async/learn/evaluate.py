"""`python -m w3async eval CHECKPOINT`: a checkpoint's policy against each evaluation level.

    python -m w3async eval runs/fgself-1/checkpoints/best.pt --games 200
    python -m w3async eval runs/fgself-1 --levels easy,normal --parallel 2   # its best.pt, else latest
    python -m w3async eval runs/a --against runs/b --games 100 --greedy     # A against B, argmax actions

CHECKPOINT is a checkpoint file (ckpt-*.pt, best.pt) or a run folder (its
checkpoints/best.pt, else the one checkpoints/latest names). The network and the games
come from the recipe saved in the checkpoint (`--recipe` names another): for each level
(the game's evaluation levels, e.g. the duel's ai:easy, ai:normal, ai:hard; `--levels`
picks some, "easy" meaning "ai:easy") one group of `--parallel` game processes, made
from the recipe's eval group for that level (else its first eval group, else its first
group) by the game's `eval_env` (the duel: win/loss rewards, W3D_SEED, no replays).

Fixed games: a lane's game seed is the game's function of (W3D_SEED, the lane's global
number, its episode), so every lane plays its first few episodes and the run counts
exactly those: `--games` split over the lanes, the same command line plays the same
games. The policy samples its actions as in training (seeded by --seed, but a round's
rows depend on timing: the actions are not bit-reproducible, the game seeds are);
`--greedy` takes each head's most likely action instead (both checkpoints' with --against).

`--policy SOURCE:FUNCTION`: a model of your own instead of a checkpoint (CHECKPOINT is
its file, `--recipe` names the games and levels): FUNCTION(CHECKPOINT, spec), in SOURCE
(a FILE.py or a module), returns a callable that takes a batch of observations as the
env gives them (glob, ent, ent_type, n_ent, mask; n rows) and returns (n, heads) integer
actions; e.g. `--policy examples/ppo_duel.py:eval_policy --recipe env-duel` for a model
examples/ppo_duel.py saved.

`--against B`: checkpoint A against checkpoint B (a file or a run folder, as CHECKPOINT)
instead of the levels: the recipe's first group with two sides, each game's side 0
answered by A's network and side 1 by B's (one engine, two nets), its environment the
game's eval_env for level "agent" (the duel: W3D_SIDES=agent,agent, win/loss rewards,
W3D_SEED), counted from A's side under the level "vs:<B's path>". B's network must be the
recipe's (the same d_model and layers).

It runs through the Supervisor like any run (a run folder of its own under /tmp, kept
with --keep), with `EvalAnswerer`: the checkpoint's network in an InferenceEngine, no
learner, no trajectories, no checkpoints. It prints per level the games, wins (of them
at the time limit, on the tie-break), draws, losses (of them at the time limit),
truncated, the win rate and the decisive rate (wins before the time limit), each with
its 95% Wilson interval (w3async/outcomes.py); `--json FILE` writes the same. A path that is not there, a file that is not a checkpoint, a checkpoint
whose weights do not fit its network or a --json file that cannot be written: one line
naming the file and why, exit status 2, before any game is played or folder made.
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np

from w3async import eventloop, games
from w3async.files import atomic_write_text, describe
from w3async.learn.best import level_record
from w3async.outcomes import end_of, outcome
from w3async.learn.eval_policy import EvalError, against, load_own_policy, load_policy, resolve
from w3async.learn.tallies import episode_result
from w3async.sync import layout
from w3async.sync.gather import Batch


# ---- the games ------------------------------------------------------------------------

def _levels(game, recipe, wanted: list[str] | None) -> list[str]:
    """The labels to play, in the game's order ("easy" is "ai:easy" where the game says so)."""
    own = [games.get(recipe.game).opponent_of(g.env) for g in recipe.games if g.role == "eval"]
    known = list(game.eval_levels) + [x for x in own if x not in game.eval_levels]
    if game.eval_env is None:
        known = [x for x in known if x in own]
    if not wanted:
        return known
    out = []
    for w in wanted:
        hit = [x for x in known if x == w or x.split(":", 1)[-1] == w]
        if not hit:
            raise EvalError(recipe.path, f"level {w!r}: the game {game.name!r} plays {', '.join(known) or 'none'}")
        out.append(hit[0])
    return out


def plan(recipe, levels: list[str], n_games: int, parallel: int, seed: int, env: dict[str, str],
         lanes: int | None = None) -> tuple[dict, list[str]]:
    """The eval run's recipe (a dict) and each group's level: `parallel` processes a
    level, `lanes` lanes each (default: enough for one game a lane, at most 16; an
    injected game's own, its adapter's: Pong's is one player a process)."""
    from w3async.recipes import recipe_to_dict  # noqa: PLC0415

    game = games.get(recipe.game)
    rd = recipe_to_dict(recipe)
    many = max(1, min(16, math.ceil(n_games / parallel)))
    groups = []
    for lvl in levels:
        base = next((g for g in rd["games"] if g["role"] == "eval" and game.opponent_of(g["env"]) == lvl), None)
        own = base is not None
        base = base or next((g for g in rd["games"] if g["role"] == "eval"), rd["games"][0])
        if lvl.startswith("vs:"):  # --against: a self-play group, both sides agents
            base, own, lvl = next(g for g in rd["games"] if g["sides"] == 2), True, "agent"
        own_lanes = base["lanes"] if base.get("inject") is not None else many
        g = dict(base, count=parallel, lanes=lanes or own_lanes, role="eval", sides=base["sides"] if own else 1)
        g["env"] = dict(game.eval_env(base["env"], lvl, seed) if game.eval_env else base["env"], **env)
        if g.get("inject") is None:
            g.pop("inject", None)
        elif game.eval_args:  # an injected game's level may be its command line
            g["inject"] = dict(g["inject"], args=game.eval_args(g["inject"]["args"], lvl, seed))
        groups.append(g)
    data = {k: rd[k] for k in ("game", "runtime", "network", "spec") if rd.get(k) is not None}
    data.update(name="eval", games=groups,
                supervisor=dict(rd["supervisor"], policy="network", progress_s=0),
                inference=dict(rd["inference"], n_nets=1), status={"enabled": False}, stop={})
    return data, levels


class EvalAnswerer:
    """The supervisor's answerer for `eval` (runtime/answerer.py): every row through one
    network (an InferenceEngine, net 0), each lane's first `quota` finished episodes
    tallied by level; the run stops when every lane has its games."""

    failure: str | None = None
    gathers = False  # the loop runs its rounds

    def __init__(self, control, net, version: int, quota: np.ndarray, level_of_row: list[str], greedy: bool = False,
                 opponent: tuple | None = None, policy=None):
        r = control.recipe
        self.control = control
        self.policy = policy  # --policy: a model of the user's own, answering each batch on the loop
        self.engine = None
        if policy is None:
            from w3async.learn.inference import InferenceEngine  # noqa: PLC0415

            self.engine = InferenceEngine(control.spec, r.network, device=r.inference.device,
                                          n_nets=1 + bool(opponent), max_rows=control.n_rows,
                                          n_table_rows=control.n_rows, num_threads=r.inference.num_threads,
                                          seed=r.inference.seed)
            self.engine.nets[0].load_state_dict(net.state_dict())
            for n in self.engine.nets:
                n.greedy = greedy
        self.opponent = opponent  # (network, version) answering every side-1 row (--against)
        self.row_net = np.zeros(control.n_rows, np.int16)  # per table row: the engine's net answering it
        if opponent is not None:
            for s in control.games:
                self.row_net[s.row0 + 1:s.row0 + s.nrows:s.group.sides] = 1
        self.version = version
        self.quota = quota  # per table row: episodes still to count
        self.level = level_of_row
        self.results: dict[str, list[str]] = {lv: [] for lv in dict.fromkeys(level_of_row)}
        game = games.get(r.game)
        self.result_of = [None] * control.n_rows  # per row: the game's reading of an outcome, its group's env
        for s in control.games:
            self.result_of[s.row0:s.row0 + s.nrows] = [lambda rw, env=s.group.env: game.result_of(rw, env)] * s.nrows
        self._loop = None

    def start(self, loop) -> None:
        self._loop = loop
        if self.engine is None:
            return
        self.engine.start()
        self.engine.publish(self.engine.nets[0].state_dict(), self.version)
        if self.opponent is not None:
            self.engine.load_net(1, self.opponent[0].state_dict(), self.opponent[1])

    def submit(self, b: Batch) -> None:
        n = b.n
        rows = b.rows[:n].astype(np.int64)
        end = (b.flags[:n] & (layout.FLAG_DONE | layout.FLAG_TRUNCATED)) != 0
        for k in np.flatnonzero(end):
            row = int(rows[k])
            if self.quota[row] > 0:
                self.quota[row] -= 1
                res = episode_result(b, k, self.result_of[row])
                self.results[self.level[row]].append(outcome(res, end_of(int(b.flags[k]))))
        if not self.quota.any():
            self.control.request_stop()
        if self.policy is not None:
            self._answer_own(b)
            return
        try:
            fut = self.engine.submit(b, self.row_net[rows] if self.opponent is not None else None)
        except Exception as e:  # noqa: BLE001 (the run stops with the cause)
            self.failure = f"inference submit failed: {describe(e)}"
            self.control.fail(self.failure)
            return
        ticket = self.control.take(rows)
        loop = self._loop
        fut.add_done_callback(lambda f: loop.call_soon_threadsafe(self._answered, f, ticket))

    def _answer_own(self, b: Batch) -> None:
        """--policy's answer to the batch, now: its observations as the env gives them."""
        n, k, lay = b.n, b.bucket, self.control.spec.layout
        ent = np.zeros((n, lay.e_max, lay.f_ent), np.float32)  # the env's shapes: every entity slot
        ent_type = np.zeros((n, lay.e_max), np.int16)
        ent[:, :k], ent_type[:, :k] = b.ent, b.ent_type
        obs = {"glob": b.glob[:n].copy(), "ent": ent, "ent_type": ent_type, "n_ent": b.n_ent[:n].astype(np.int64),
               "mask": b.mask[:n].copy()}
        try:
            actions = np.asarray(self.policy(obs))
            if actions.shape != (n, lay.n_heads) or not np.issubdtype(actions.dtype, np.integer):
                raise ValueError(f"returned {actions.dtype} actions of shape {actions.shape}, not integer ones of "
                                 f"shape ({n}, {lay.n_heads}): a row of choices a head, each row of the batch")
        except Exception as e:  # noqa: BLE001 (the run stops with the cause)
            self.failure = f"--policy failed: {describe(e)}"
            self.control.fail(self.failure)
            return
        self.control.answer_now(b.rows[:n], b.obs_seq[:n], actions.astype(np.int32),
                                np.full(n, self.version, np.uint32))

    def _answered(self, fut, ticket) -> None:
        try:
            res = fut.result()
        except Exception as e:  # noqa: BLE001
            self.failure = f"inference round failed: {e!r}"
            self.control.fail(self.failure)
            return
        # a game restarted meanwhile: RunControl drops its rows' stale answer
        self.control.answer(ticket, res.obs_seq, res.actions, res.versions)

    def rows_reset(self, rows: slice) -> None:
        if self.engine is not None and self.engine.running:
            self.engine.reset_rows(np.arange(rows.start, rows.stop))

    def flush_round_stats(self) -> dict | None:
        return None

    def progress(self) -> str:
        done = sum(len(v) for v in self.results.values())
        return f"eval {done}/{done + int(self.quota.sum())} games"

    def stop(self) -> None:
        if self.engine is not None:
            self.engine.stop()


def _quotas(control, n_games: int, levels_of_group: list[str]) -> tuple[np.ndarray, list[str]]:
    """Per table row: episodes to count (each level's n_games split over its agent rows
    of side 0, lane by lane) and its level."""
    quota = np.zeros(control.n_rows, np.int64)
    level = [""] * control.n_rows
    groups = list(dict.fromkeys(id(s.group) for s in control.games))
    by_level: dict[str, list[int]] = {}
    for s in control.games:
        lvl = levels_of_group[groups.index(id(s.group))]
        level[s.row0:s.row0 + s.nrows] = [lvl] * s.nrows
        by_level.setdefault(lvl, []).extend(range(s.row0, s.row0 + s.nrows, s.group.sides))
    for lvl, rows in by_level.items():
        for i, row in enumerate(rows):
            quota[row] = n_games // len(rows) + (1 if i < n_games % len(rows) else 0)
    return quota, level


def report(results: dict[str, list[str]]) -> dict:
    return {lvl: level_record(res) for lvl, res in results.items()}


def _pct(x) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def main(argv: list[str] | None = None) -> int:
    from w3async.observe.logs import console  # noqa: PLC0415

    p = argparse.ArgumentParser(prog="w3async eval", description=__doc__.split("\n")[0])
    add_arguments(p)
    return run_eval(p.parse_args(argv), console)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("checkpoint", help="a checkpoint file, or a run folder (its best.pt, else its latest)")
    p.add_argument("--games", type=int, default=100, help="games per level (default 100)")
    p.add_argument("--levels", default="", help="comma-separated levels (default: the game's evaluation levels)")
    p.add_argument("--seed", type=int, default=9001, help="the games' base seed (default 9001)")
    p.add_argument("--parallel", type=int, default=2, help="game processes per level (default 2)")
    p.add_argument("--lanes", type=int, default=0,
                   help="lanes per process (default: one game a lane, at most 16; an injected game: its group's)")
    p.add_argument("--recipe", default="", help="the network and games of this recipe, not the checkpoint's")
    p.add_argument("--env", action="append", default=[], metavar="KEY=VALUE",
                   help="extra environment for every game, e.g. W3D_TIME_LIMIT=6000 (repeatable)")
    p.add_argument("--json", default="", help="also write the results to this file")
    p.add_argument("--keep", action="store_true", help="keep the eval run's folder (logs of each game)")
    p.add_argument("--greedy", action="store_true", help="each head's most likely action, no sampling")
    p.add_argument("--against", default="", metavar="CHECKPOINT",
                   help="play against this checkpoint (file or run folder) instead of the levels")
    p.add_argument("--trust-undigested", action="store_true",
                   help="load a checkpoint without a digest (written before checkpoints carried one)")
    p.add_argument("--policy", default="", metavar="SOURCE:FUNCTION",
                   help="play a model of your own (CHECKPOINT is its file): FUNCTION(CHECKPOINT, spec) in SOURCE "
                        "(FILE.py or a module) returns a callable from a batch of observations to actions; "
                        "needs --recipe")


def _check_json(out: Path) -> None:
    """--json's file can be written (its folder exists and takes a file), before any game is
    played: it was a traceback after the whole evaluation (2026-12-02)."""
    from w3async.runtime.preflight import probe_folder  # noqa: PLC0415

    if out.is_dir():
        raise EvalError(out, "--json names a folder, not a file")
    if not out.parent.is_dir():
        raise EvalError(out, f"--json: the folder {out.parent} does not exist")
    why = probe_folder(out.parent)
    if why:
        raise EvalError(out, f"--json: {why}")


def run_eval(args, console) -> int:
    try:
        if args.games < 1 or args.parallel < 1 or args.lanes < 0:
            raise EvalError(args.checkpoint, "--games and --parallel must be >= 1, --lanes >= 0")
        env = {}
        for kv in args.env:
            if "=" not in kv:
                raise EvalError(args.checkpoint, f"--env {kv!r}: expected KEY=VALUE")
            k, v = kv.split("=", 1)
            env[k] = v
        if args.json:
            _check_json(Path(args.json))
        if args.trust_undigested:
            from w3async.learn.checkpoint import trust_undigested  # noqa: PLC0415
            trust_undigested()
        own = None
        if args.policy:
            if args.against:
                raise EvalError(args.checkpoint, "--policy plays the levels: --against has no place")
            path, net, version = Path(args.checkpoint), None, 0
            recipe, own = load_own_policy(args.policy, path, args.recipe or None)
        else:
            path = resolve(args.checkpoint)
            recipe, net, version = load_policy(path, args.recipe or None)
        game = games.get(recipe.game)
        opponent = None
        if args.against and args.levels:
            raise EvalError(args.against, "--against plays one checkpoint against the other: --levels has no place")
        if args.against:
            opponent, levels = against(recipe, resolve(args.against), args.recipe or None)
        else:
            levels = _levels(game, recipe, [x.strip() for x in args.levels.split(",") if x.strip()])
        if not levels:
            raise EvalError(path, f"the game {game.name!r} has no evaluation levels and its recipe no eval group")
        data, levels = plan(recipe, levels, args.games, args.parallel, args.seed, env, args.lanes or None)
    except EvalError as e:
        console(f"w3async: error: eval {e}")
        return 2
    return _play(args, path, data, levels, net, version, console, opponent, own)


def _play(args, path: Path, data: dict, levels: list[str], net, version: int, console, opponent=None,
          own=None) -> int:
    from w3async.recipes import RecipeError, recipe_from_dict  # noqa: PLC0415
    from w3async.runtime.preflight import preflight  # noqa: PLC0415
    from w3async.compose import supervisor  # noqa: PLC0415
    from w3async.runtime.supervisor import RunError  # noqa: PLC0415

    try:
        recipe = recipe_from_dict(data, f"{path} (eval)")
        # Checked where the run folder will be made, before it is: a refused eval left an
        # empty w3async-eval-* folder behind in $TMPDIR each time.
        tmp = Path(tempfile.gettempdir())
        problems = preflight(recipe, tmp / "w3async-eval-(new)" / "run", tmp)
        if problems:
            console(f"w3async: error: eval {path}:\n  " + "\n  ".join(problems))
            return 2
    except RecipeError as e:
        console(f"w3async: error: eval {e}")
        return 2
    made: list[EvalAnswerer] = []
    run_dir = Path(tempfile.mkdtemp(prefix="w3async-eval-")) / "run"

    def answerer(control):
        quota, level = _quotas(control, args.games, levels)
        made.append(EvalAnswerer(control, net, version, quota, level, greedy=args.greedy, opponent=opponent,
                                 policy=own))
        return made[0]

    sup = supervisor(recipe, run_dir, answerer=answerer, cluster=None)  # games on this machine only
    try:
        eventloop.run(sup.run())
    except RunError as e:
        console(f"w3async: eval {path} stopped: {e}")
        return 1
    finally:
        if not args.keep:
            shutil.rmtree(run_dir.parent, ignore_errors=True)
    ans = made[0]
    out = report(ans.results)
    short = int(ans.quota.sum())
    restarts = sum(sup.stats().get("restarts", {}).values())
    console(f"w3async: eval {path} (policy version {version}), {args.games} games a level at seed {args.seed}"
            + (f"; {short} games not played (the run stopped early)" if short else "")
            + (f"; {restarts} game restarts (a restarted lane plays its first seeds again)" if restarts else "")
            + (f"; run folder {run_dir}" if args.keep else ""))
    print(f"{'level':<12} {'games':>5} {'win':>5} {'(time)':>6} {'draw':>5} {'loss':>5} {'(time)':>6} {'trunc':>5} "
          f"{'win rate':>9}  {'95% interval':<16} {'decisive':>9}  95% interval")
    for lvl, r in out.items():
        wins, decisive = f"[{_pct(r['lo'])}, {_pct(r['hi'])}]", f"[{_pct(r['decisive_lo'])}, {_pct(r['decisive_hi'])}]"
        print(f"{lvl:<12} {r['games']:>5} {r['wins']:>5} {r['time_limit_wins']:>6} {r['draws']:>5} {r['losses']:>5} "
              f"{r['time_limit_losses']:>6} {r['truncated']:>5} {_pct(r['win_rate']):>9}  {wins:<16} "
              f"{_pct(r['decisive_rate']):>9}  {decisive}")
    if args.json:
        try:
            atomic_write_text(args.json, json.dumps(dict(checkpoint=str(path), version=version, games=args.games,
                                                         seed=args.seed, levels=out), indent=1) + "\n")
        except OSError as e:  # checked before the games; changed since (the table above has the results)
            console(f"w3async: eval {path}: --json {args.json}: {e}")
            return 1
    return 0 if not short and not sup.error else 1


if __name__ == "__main__":
    sys.exit(main())
