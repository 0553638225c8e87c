"""What the Gymnasium and PettingZoo envs share: the recipe made ready for an env, the
run folder, the supervisor on its thread, and the step of a set of rows."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
import threading
from pathlib import Path

import numpy as np

from w3async import games
from w3async.env.bridge import Bridge, EnvClosed, SupervisorThread
from w3async.runtime import procs


def env_recipe(recipe, sets=(), **overrides):
    """A recipe (a name in recipes/, a path, or a Recipe) with its --set style overrides
    (`sets`, and keywords with `__` for the dots: games__count=2), without its evaluation
    groups, and no stop condition unless one is set: the env's caller decides when the run
    ends (close())."""
    from w3async.recipes import Recipe, load_recipe, recipe_from_dict, recipe_to_dict, resolve_recipe_path  # noqa: PLC0415

    sets = list(sets) + [f"{k.replace('__', '.')}={_toml(v)}" for k, v in overrides.items()]
    own_stop = any(s.startswith("stop.") for s in sets)
    if isinstance(recipe, Recipe):
        r = recipe_from_dict(_no_nones({k: v for k, v in recipe_to_dict(recipe).items() if k != "path"}), recipe.path)
    else:
        r = load_recipe(resolve_recipe_path(str(recipe)), sets)
        sets = []
    if sets:
        raise ValueError(f"overrides {sets} apply to a recipe by name or path, not to a Recipe object")
    data = recipe_to_dict(r)
    if not own_stop:
        data["stop"] = {}
    # A training recipe's evaluation groups are the harness's own measure (a learner's
    # fixed seeds, never trained on); behind an env they would be sub-envs like the rest.
    data["games"] = [g for g in data["games"] if g.get("role") != "eval"]
    if not data["games"]:
        raise ValueError(f"recipe {r.name!r} has only evaluation groups (role = \"eval\"): an env runs the others")
    data = {k: v for k, v in data.items() if v is not None and k != "path"}
    return recipe_from_dict(_no_nones(data), r.path)


def _no_nones(d):
    if isinstance(d, dict):
        return {k: _no_nones(v) for k, v in d.items() if v is not None}
    if isinstance(d, list):
        return [_no_nones(v) for v in d]
    return d


def _toml(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(v, dict):
        return "{" + ", ".join(f"{k} = {_toml(x)}" for k, x in v.items()) + "}"
    return str(v)


def game_seeds(seed):
    """reset(seed=)'s seed as each game's W3S_SEED (slot -> int), or None (a new seed at
    every start, the supervisor's own): an int gives game i the seed + i * 1000003; a list
    (one seed per sub-env) gives each game the seed of its first row. The same seed and the
    same actions give the same episodes (docs/env.md)."""
    if seed is None:
        return None
    if isinstance(seed, (int, np.integer)):
        return lambda s: (int(seed) + s.index * 1000003) % 2**31
    seeds = [None if x is None else int(x) % 2**31 for x in seed]
    return lambda s: seeds[s.row0]


class EnvRun:
    """One supervisor run behind an env: started by start(), ended by close()."""

    def __init__(self, recipe, run_dir: str | Path | None = None, keep_run: bool = False, opponent=None,
                 opponent_greedy: bool = False):
        """`opponent`: a checkpoint (file or run folder) playing side 1 of every two-sided
        group (env/opponent.py); `rows` are then the caller's, the others'."""
        self.recipe = recipe
        self.game = games.get(recipe.game)
        self.spec = self.game.spec
        n = sum(g.count * g.lanes * g.sides for g in recipe.games)
        played, opp = np.zeros(n, bool), None
        if opponent is not None:  # loaded here, on the caller's thread: a bad file is said at once
            from w3async.env.opponent import load_opponent, opponent_rows  # noqa: PLC0415 (torch)

            played = opponent_rows(recipe)
            opp = (played, load_opponent(opponent, recipe), opponent_greedy)
        # Made after what may refuse the env: a refused make() left an empty folder in /tmp
        self._own_dir = run_dir is None
        if run_dir is None:
            sweep_dead_envs()  # what an env killed by a signal left: its segments, its folder
        base = Path(tempfile.mkdtemp(prefix=ENV_PREFIX)) if run_dir is None else None
        if base is not None:
            (base / OWNER).write_text(f"{os.getpid()} {procs.started(os.getpid())}\n")
        self.run_dir = base / "run" if base is not None else Path(run_dir)
        self.keep_run = keep_run
        _track(self)
        self.rows = np.flatnonzero(~played)  # the caller's table rows: sub-env (agent) i is rows[i]
        self.thread = SupervisorThread(recipe, self.run_dir, opp)
        self.bridge: Bridge | None = None
        self.closed = False

    def start(self, seed=None) -> Bridge:
        self.thread.seed = game_seeds(seed)
        self.bridge = self.thread.start()
        return self.bridge

    def take(self, rows: np.ndarray) -> tuple[dict, dict]:
        """Hand out these rows (each ready; call with the bridge's lock held)."""
        return self.bridge.take(rows)

    def wait_rows(self, rows: np.ndarray, timeout_s: float | None) -> None:
        self.bridge.wait(self.all_ready(rows), timeout_s)

    def all_ready(self, rows: np.ndarray):
        """The check that every one of these rows is ready (for Bridge.wait: each round
        and each step makes it, one C call)."""
        copies, n = self.bridge.copies, len(rows)
        if n == self.bridge.n_rows:
            return lambda: copies.ready() == n
        rows = np.ascontiguousarray(rows, np.int64)
        return lambda: copies.ready(rows) == n

    def restart_games(self, timeout_s: float | None, seed=None) -> None:
        """End every game at once and restart it (a reset() after the first; `seed` as
        game_seeds'), and wait for every row's first post of the new games. What was
        handed out goes with the games; the cuts are dropped (a reset is no truncation to
        report). Such restarts are not counted in the restart budget (runtime/slots.py)."""
        sup, b = self.thread.sup, self.bridge
        seed_of = game_seeds(seed)
        mark = {}  # each row's epoch before the kills: a post after it is the new game's

        def kill_all():  # on the loop
            with b.lock:
                if seed_of is not None:
                    sup.seed_games(seed_of)
                epochs = b.epoch.copy()
                for rows in sup.games_gone():
                    epochs[rows] -= 1  # gone already (restarting): its next start's rows are fresh
                mark["epochs"] = epochs
            sup.restart_games()

        with b.lock:
            b.handed[:] = False
            b.broken = None  # every row is reset: a step interrupted half-way leaves nothing behind
        self.thread.call(kill_all)
        rows = self.rows  # the caller's: an opponent's are answered, never posted here

        def restarted() -> bool:
            e = mark.get("epochs")
            return e is not None and bool(((b.epoch[rows] > e[rows]) & b.posted[rows]).all())

        b.wait(restarted, timeout_s)
        with b.lock:
            b.cut[:] = False

    def close(self) -> dict:
        if self.closed:
            return self.thread.stats
        self.closed = True
        _open_runs.discard(self)
        self.thread.stop()
        if self._own_dir and not self.keep_run:
            shutil.rmtree(self.run_dir.parent, ignore_errors=True)
        elif self._own_dir:
            (self.run_dir.parent / OWNER).unlink(missing_ok=True)  # kept: never swept
        return self.thread.stats

    @property
    def error(self) -> str | None:
        return self.thread.error


ENV_PREFIX = "w3async-env-"
OWNER = "owner"  # in an env's own folder while its process may use it: "PID STARTTIME"


def _owner_alive(folder: Path) -> bool | None:
    """Whether the process that made an env's folder lives (None: no owner recorded, a
    folder being made or kept)."""
    try:
        pid, born = map(int, (folder / OWNER).read_text().split())
    except (OSError, ValueError):
        return None
    return procs.alive(pid) and procs.started(pid) == born


def sweep_dead_envs(tmp: str | None = None) -> list[str]:
    """Clean what envs whose process died without close() left (SIGKILL, or a SIGTERM
    that Python's default handler turns into an exit without atexit): every process of
    their runs, their segments in /dev/shm, their folders. Each is found by its folder's
    owner file; a live owner's, a kept run's (no owner file) and one being made are left
    alone. Returns the folders removed."""
    from w3async.runtime.runfolder import RunError, RunLock, cleanup_previous_run  # noqa: PLC0415

    removed = []
    for folder in sorted(Path(tmp or tempfile.gettempdir()).glob(ENV_PREFIX + "*")):
        if _owner_alive(folder) is not False:
            continue
        run = folder / "run"
        if (run / "run.lock").exists():
            try:
                lock = RunLock(run)  # held: its supervisor is gone
            except (RunError, OSError):
                continue
            try:
                if lock.previous.get("pid"):
                    cleanup_previous_run(lock.previous)
            finally:
                lock.release()
        shutil.rmtree(folder, ignore_errors=True)
        removed.append(str(folder))
    return removed


# A caller that exits without close() (an exception, sys.exit, an env dropped unclosed)
# still gets the whole shutdown and its folder removed: the supervisor's thread is a
# daemon, stopped without one at exit, which left every game's segment in /dev/shm (8
# runs' worth, 2026-12-04). The open runs are closed among threading's exit calls, before
# concurrent.futures' stops the executors: from atexit, every step the shutdown runs off
# its loop (the accounting's stop, the final checkpoint, the clean-up of strays) failed
# with "cannot schedule new futures after shutdown". Held here until closed, then freed.
_open_runs: set[EnvRun] = set()
_hook: list[bool] = []


def _track(run: EnvRun) -> None:
    _open_runs.add(run)
    if not _hook:
        _hook.append(True)
        import concurrent.futures.thread  # noqa: F401, PLC0415 (its exit call registered first: ours runs before it)

        register = getattr(threading, "_register_atexit", atexit.register)  # CPython's hook for this
        try:
            register(_close_open_runs)  # run before the executors' own (registered earlier)
        except RuntimeError:  # the interpreter is already shutting down: plain atexit
            atexit.register(_close_open_runs)


def _close_open_runs() -> None:
    for run in list(_open_runs):
        run.close()


__all__ = ["EnvClosed", "EnvRun", "env_recipe"]
