"""render() for the env: each sub-env's last observation drawn as the game's viewer
draws a replay's step (Game.row_view, then w3async.observe.video's rasteriser), with
the sub-env's step in the episode written on it. Only with render_mode="rgb_array": the
env then keeps a copy of each sub-env's last observation (a cost per step that an env
made without it does not pay)."""

from __future__ import annotations

import numpy as np

from w3async import games

RENDER_MODES = ("rgb_array",)
FRAME_SIDE_PX = 256  # a frame's longer side at most this many pixels


def modes_of(game_name: str) -> list[str]:
    """The render modes an env of this game has (metadata["render_modes"])."""
    return list(RENDER_MODES) if games.get(game_name).row_view is not None else []


def check_mode(render_mode: str | None, game_name: str) -> games.Game | None:
    """The game to draw with, or None for render_mode None; a ValueError naming what is
    wrong for a mode the env has not, or a game that draws no observation."""
    if render_mode is None:
        return None
    if render_mode not in RENDER_MODES:
        raise ValueError(f"render_mode={render_mode!r}: this env renders {', '.join(map(repr, RENDER_MODES))} or None")
    game = games.get(game_name)
    if game.row_view is None:
        raise ValueError(f"render_mode={render_mode!r}: the game {game_name!r} has no view of an observation "
                         f"(its registry entry sets no row_view; docs/games.md): use render_mode=None")
    return game


class Renderer:
    """The last observation of each of n sub-envs, and their frames on demand."""

    def __init__(self, game: games.Game, n: int):
        self.game = game
        self.last: list[dict | None] = [None] * n
        self.steps = np.zeros(n, np.int64)

    def remember(self, obs: dict, ids: np.ndarray, steps: np.ndarray) -> None:
        """These sub-envs' new observations (obs's rows in the order of ids)."""
        for j, i in enumerate(np.asarray(ids).tolist()):
            self.last[i] = {k: np.array(v[j]) for k, v in obs.items()}
        self.steps[ids] = steps

    def frame(self, i: int) -> np.ndarray | None:
        """Sub-env i's last observation as an (H, W, 3) uint8 frame; None before any."""
        from w3async.observe.video import render_frames  # noqa: PLC0415 (PIL: only where a frame is drawn)

        if self.last[i] is None:
            return None
        view = self.game.row_view(self.last[i])
        view["steps"][0].setdefault("step", int(self.steps[i]))
        return render_frames(view, max_frames=1, max_side_px=FRAME_SIDE_PX)[0]

    def frames(self) -> tuple:
        return tuple(self.frame(i) for i in range(len(self.last)))
