"""A fixed checkpoint as the env's opponent: `make(recipe, opponent=CHECKPOINT)`.

In every game group of two agent sides, side 1 of each lane is played by the
checkpoint's policy, answered on the supervisor's loop through an inference engine of
its own (a worker thread, as `w3async eval --against` plays); the caller's sub-envs are
the other rows. The policy samples its actions, as in training (greedy=True: each
head's most likely one). Its rows never reach the caller: no observation, no truncation.
"""

from __future__ import annotations

import numpy as np

from w3async.sync.gather import Batch


def opponent_rows(recipe) -> np.ndarray:
    """Per table row (the recipe's order: group, process, lane, side): True where the
    opponent plays (side 1 of a group with two sides). ValueError when no group has two."""
    played = []
    for g in recipe.games:
        played += [g.sides == 2 and k % 2 == 1 for k in range(g.count * g.lanes * g.sides)]
    if not any(played):
        raise ValueError(f"{recipe.path}: an opponent checkpoint plays side 1 of a game: the recipe needs a group "
                         f"with two agent sides (sides = 2, the duel: W3D_SIDES = \"agent,agent\")")
    return np.asarray(played, bool)


def load_opponent(path, recipe) -> tuple:
    """(network, version) of the checkpoint `path` (a file or a run folder), which must be
    of the recipe's game; w3async.learn.eval_policy.EvalError naming the file otherwise."""
    from w3async.learn.eval_policy import EvalError, load_policy, resolve  # noqa: PLC0415 (torch)

    file = resolve(path)
    own, net, version = load_policy(file)
    if own.game != recipe.game:
        raise EvalError(file, f"a checkpoint of game {own.game!r}; the env's recipe plays {recipe.game!r}")
    return net, version


class Opponent:
    """Answers the opponent's rows of each batch (the rest go on to the caller)."""

    def __init__(self, control, played: np.ndarray, policy: tuple, greedy: bool = False):
        from w3async.learn.inference import InferenceEngine  # noqa: PLC0415 (torch)

        self.control = control
        self.played = played
        net, self.version = policy
        self.engine = InferenceEngine(control.spec, net.cfg, device="cpu", n_nets=1, max_rows=control.n_rows,
                                      n_table_rows=control.n_rows, num_threads=1)
        self.engine.nets[0].load_state_dict(net.state_dict())
        self.engine.nets[0].greedy = greedy
        self.batch = Batch(control.n_rows, control.spec.layout)  # its rows of a round, copied out of the gatherer's
        self.loop = None

    def start(self, loop) -> None:
        self.loop = loop
        self.engine.start()
        self.engine.publish(self.engine.nets[0].state_dict(), self.version)

    def play(self, b: Batch) -> None:
        """Answer b's rows it plays (in a later loop callback) and leave the rest in b."""
        mine = self.played[b.rows[: b.n]]
        if not mine.any():
            return
        b.copy_to(self.batch)
        self.batch.select(mine)
        b.select(~mine)
        rows = self.batch.rows[: self.batch.n].astype(np.int64)
        try:
            fut = self.engine.submit(self.batch)
        except Exception as e:  # noqa: BLE001 (the run stops with the cause)
            self.control.fail(f"the opponent's inference failed: {type(e).__name__}: {e}")
            return
        ticket = self.control.take(rows)  # not gathered again until answered, dropped if its game restarts
        fut.add_done_callback(lambda f: self.loop.call_soon_threadsafe(self._answered, f, ticket))

    def _answered(self, fut, ticket) -> None:
        try:
            res = fut.result()
        except Exception as e:  # noqa: BLE001
            self.control.fail(f"the opponent's inference round failed: {type(e).__name__}: {e}")
            return
        with self.control.lock:  # the caller's thread answers its rows under it too
            self.control.answer(ticket, res.obs_seq, res.actions, res.versions)

    def rows_reset(self, rows: slice) -> None:
        if self.engine.running:
            self.engine.reset_rows(np.arange(rows.start, rows.stop))

    def stop(self) -> None:
        self.engine.stop()
