"""The Runtime protocol the keeper talks to, and how one game start is launched.

A runtime (native.py, wine.py, inject.py's injected games) says what a start is: its
command, environment, folder, inherited fds, and what its sandbox must let it reach. The
keeper launches every start the same way (`launch`), through the run's sandbox
(sandbox.py) when there is one: the keeper knows no runtime by name.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, runtime_checkable

from w3async.sync.doorbells import Doorbells, SharedObs
from w3async.sync.table import GameSegment


@dataclass
class GameStart:
    """One game start, as its runtime describes it."""

    argv: list[str]
    env: dict[str, str]  # the whole environment
    cwd: str
    marker: bytes  # what every process of this start carries in its environment block
    pass_fds: tuple[int, ...] = ()
    see: list[str] = field(default_factory=list)  # files it must reach in a sandbox: its segment, its doorbells
    write: list[str] = field(default_factory=list)  # folders it must write in a sandbox (a Wine prefix's users)
    read: list[str] = field(default_factory=list)  # folders it must read in a sandbox, never write (a Wine prefix)
    pid_namespace: bool = True  # False for Wine: wineserver signals client threads by the tids they report
    join: tuple[int, int, int] | None = None  # namespaces to join (a confined wineserver's: wineprefix.namespaces)


@runtime_checkable
class Runtime(Protocol):
    """What the keeper and the supervisor ask of a runtime."""

    name: str  # "native", "wine", "injected": the events' runtime field
    obs: SharedObs | None  # the obs doorbell its games ring (None until open_obs)

    def prepare(self) -> None:
        """Make ready what its games need before the first start (blocking: run off the loop)."""

    def open_obs(self, run_dir: Path) -> SharedObs:
        """The obs doorbell every game of this runtime rings (made once)."""

    def doorbells(self, run_dir: Path, slot: int) -> Doorbells:
        """A fresh act doorbell for a start of slot `slot`."""

    def start(self, slot, env: dict[str, str], segment: GameSegment) -> GameStart:
        """The start of slot (runtime/slots.py Slot: binary, bells, rows) on segment."""

    def game_lost(self, slot) -> bool:
        """The start's process lives but its game is gone (a launcher that missed its
        game's death): the keeper ends the start."""

    def prefixes(self) -> list[str]:
        """What a later run must end if this one is killed (Wine prefixes), for the run lock."""

    def cleanup(self) -> list[int]:
        """End what the runtime runs beside the games (on shutdown); the pids SIGKILLed."""

    def leftovers(self) -> list[int]:
        """The runtime's own processes still alive (after cleanup: none)."""

    def close(self) -> None:
        """Release what it holds (doorbells, a prefix's lock)."""


def launch(start: GameStart, nice: int, log, wrap=None, prefix: list[str] | None = None) -> subprocess.Popen:
    """Start `start` in a process group of its own (ending it ends its children), niced,
    stdout and stderr to log; wrap (Sandbox.wrap) turns its argv into the sandboxed one;
    prefix (limits.py: its cgroup, its OOM score) runs before it and execs it."""
    argv = wrap(start) if wrap else start.argv
    return subprocess.Popen(nice_prefix(nice) + (prefix or []) + argv, env=start.env, pass_fds=start.pass_fds,
                            stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True,
                            cwd=start.cwd)


def nice_prefix(nice: int) -> list[str]:
    """`nice -n N` before the command: exec'd, so every thread of the game starts niced
    (setpriority after the spawn would miss threads made before it, and a preexec_fn
    is unsafe next to the inference thread)."""
    return ["nice", "-n", str(nice)] if nice else []


# What a game inherits of the supervisor's environment: what a program needs to run
# and speak the user's language. Anything else it gets is declared (the recipe's env,
# the runtime's W3S_* and Wine's variables); the operator's shell (tokens, keys, sockets)
# stays out (tests/runtime/test_boundary.py, `env`).
INHERITED = ("PATH", "HOME", "USER", "LOGNAME", "LANG", "LANGUAGE", "TZ", "TERM", "TMPDIR")


def inherited() -> dict[str, str]:
    """The part of os.environ a game inherits (INHERITED and LC_*)."""
    return {k: v for k, v in os.environ.items() if k in INHERITED or k.startswith("LC_")}


def game_environ(*parts: dict) -> dict[str, str]:
    """A game's whole environment: inherited(), updated by each of parts in turn."""
    env = inherited()
    for p in parts:
        env.update(p)
    return env
