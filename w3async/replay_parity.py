"""Replay parity: does a change leave a game's simulation identical?

    python -m w3async.replay_parity [--game NAME] REPLAY... [the game's tool's options]

The entry point for every game's parity tool (the games registry's `parity`: a module
with `main(argv, acquire_wine_prefix)` returning the exit status). `--game` picks the
game; without it, the one registered game that has a tool. The duel's tool and its
options: w3async/games/duel/parity.py, docs/duel.md. Exit status: 0 identical,
1 a divergence, 2 broken (a replay that fails to load, a variant that crashes or
hangs, no such game or tool).
"""

from __future__ import annotations

import importlib
import sys

from w3async import games

EXIT_OK, EXIT_DIVERGED, EXIT_BROKEN = 0, 1, 2


def _acquire_wine_prefix():
    """A Wine prefix of the runtime's pool, as a context manager (for --runtime wine)."""
    from w3async.runtime.wine import WineConfig, acquire_running_prefix  # noqa: PLC0415 (only for --runtime wine)

    return acquire_running_prefix(WineConfig())


def tool_for(name: str | None):
    """The parity tool's module of the named game (None: the only game with one)."""
    if name is None:
        with_tool = [g for g in games.all_games() if g.parity]
        if len(with_tool) != 1:
            raise SystemExit(f"replay_parity: --game is needed: games with a parity tool: "
                             f"{', '.join(g.name for g in with_tool) or 'none'}")
        game = with_tool[0]
    else:
        try:
            game = games.get(name)
        except games.UnknownGame as e:
            raise SystemExit(f"replay_parity: {e}") from None
        if not game.parity:
            raise SystemExit(f"replay_parity: game {name!r} has no parity tool")
    return importlib.import_module(game.parity)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    name = None
    for i, a in enumerate(argv):
        if a == "--game" and i + 1 < len(argv):
            name = argv[i + 1]
            del argv[i: i + 2]
            break
        if a.startswith("--game="):
            name = a.partition("=")[2]
            del argv[i]
            break
    if "-h" in argv or "--help" in argv:
        print(__doc__.split("\n\n")[1] + "\n")
    try:
        tool = tool_for(name)
    except SystemExit as e:
        print(e, file=sys.stderr)
        return EXIT_BROKEN
    return tool.main(argv, acquire_wine_prefix=_acquire_wine_prefix)


if __name__ == "__main__":
    sys.exit(main())
