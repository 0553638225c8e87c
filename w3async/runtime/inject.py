"""Injected games: an unmodified Windows .exe started through the launcher, with the
hook and the user's adapter loaded into it before its first instruction
(docs/hooking.md; the C side is shim/inject/).

The supervisor starts `w3inject.exe` under the group's Wine prefix in place of the
game; the launcher waits for the game and exits with its code, so the game stays
under the supervisor as any other: restarts by cause, the hang watch, backoff, the
process group and the prefix's clean-up. This module turns a group's [games.inject]
section into the launcher's command line and the hook's settings (W3H_*); its checks
before a run are inject_checks.py's.
"""

from __future__ import annotations

import time
import tomllib
from pathlib import Path

from w3async.recipes.sections import REPO_ROOT, InjectSection
from w3async.runtime import procs
from w3async.runtime.gamestart import GameStart
from w3async.runtime.pe import AMD64, I386, PeError, read_pe
from w3async.runtime.wine import LAUNCHER, WineRuntime, windows_path, wine_own

BUILD_WIN64 = LAUNCHER.parent
HOOK = BUILD_WIN64 / "w3hook.dll"
# The launcher and hook of a game's bitness (shim/Makefile builds win32 where i686 mingw is).
BUILDS = {AMD64: BUILD_WIN64, I386: REPO_ROOT / "build" / "win32"}


def repo_path(path: str) -> Path:
    """A recipe path: absolute, or from the repository root."""
    p = Path(path)
    return p if p.is_absolute() else REPO_ROOT / p


def fill(text: str, values: dict[str, str]) -> str:
    """The recipe's placeholders ("{seed}", "{lane}", ...) filled; others kept as written."""
    for k, v in values.items():
        text = text.replace("{" + k + "}", v)
    return text


def launch(inject: InjectSection, game: Path, values: dict[str, str]) -> tuple[Path, list[str], dict[str, str], str]:
    """(the launcher, its arguments, the hook's environment, the working folder) for
    starting `game` with inject's hook settings; values fill the args' placeholders."""
    adapter = windows_path(repo_path(inject.adapter))
    try:
        machine = read_pe(game).machine
    except (OSError, PeError):
        machine = AMD64  # the launcher names what is wrong with the game
    build = BUILDS.get(machine, BUILD_WIN64)
    args = ["--timeout-ms", str(int(inject.timeout_s * 1000)), "--hook", windows_path(build / HOOK.name),
            "--adapter", adapter]
    cwd = windows_path(repo_path(inject.cwd)) if inject.cwd else windows_path(game.parent)
    if inject.desktop == "own":  # a desktop a slot: a game never takes another's focus
        args += ["--own-desktop", f"w3async-slot-{values.get('slot', '0')}"]
    args += ["--cwd", cwd, "--", windows_path(game)] + [fill(a, values) for a in inject.args]
    env = {
        "W3H_ADAPTER": adapter,
        "W3H_STEP_POINT": inject.step_point,
        "W3H_STEP_THREAD": inject.step_thread,
        "W3H_STEP_MS": str(inject.step_ms),
        "W3H_STEP_DEADLINE_MS": str(int(inject.step_deadline_s * 1000)),
        "W3H_CLOCK": "1" if inject.clock else "0",
        "W3H_DRAW": "1" if inject.draw else "0",
        "W3H_DRAW_CALLS": ",".join(inject.draw_calls),
        "W3H_MODULES": ",".join(inject.modules),
    }
    if inject.epoch_s is not None:
        env["W3H_EPOCH_S"] = str(inject.epoch_s)
    env.update({f"W3H_ADDR_{k}": v for k, v in {**file_addresses(inject), **inject.addresses}.items()})
    return build / LAUNCHER.name, args, env, str(game.parent)


def file_addresses(inject: InjectSection) -> dict[str, str]:
    """The names in inject.addresses_file ({} when none is set). Read at every start, so
    that a rebuilt game's offsets are the ones used; check() reports a bad file first."""
    if not inject.addresses_file:
        return {}
    addresses, problem = read_addresses(repo_path(inject.addresses_file))
    if problem:
        raise ValueError(f"inject.addresses_file = {inject.addresses_file!r}: {problem}")
    return addresses


def read_addresses(path: Path) -> tuple[dict[str, str], str | None]:
    """(name -> "module+0xoffset", problem) from an addresses file."""
    try:
        data = tomllib.loads(path.read_text())
    except OSError as e:
        return {}, f"cannot be read ({e.strerror}): make build writes the games' addresses files"
    except tomllib.TOMLDecodeError as e:
        return {}, f"is not TOML ({e})"
    bad = [k for k, v in data.items() if not isinstance(v, str) or "+" not in v or not k.isidentifier()]
    if bad:
        return {}, f"{bad[0]} = {data[bad[0]]!r}: expected name = \"module+0xoffset\""
    return data, None


def _program(pid: int) -> str:
    """The file name of a process's argv[0], lower case ("" when gone): a Windows
    program's is its .exe, Wine rewrites argv."""
    try:
        argv0 = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")[0].decode(errors="replace")
    except OSError:
        return ""
    return argv0.replace("\\", "/").rsplit("/", 1)[-1].lower()


LOST_GRACE_S = 3.0  # game_lost: how long the launcher has to see its game's exit


class InjectedRuntime:
    """A Runtime (gamestart.py) for one group's injected games: starts go through the
    launcher in the Wine runtime's prefix; the prefix, the obs FIFO and the clean-up are
    that Wine runtime's (it owns them, this one only borrows)."""

    name = "injected"

    def __init__(self, wine: WineRuntime, inject: InjectSection, run_dir: Path):
        self.wine, self.inject, self.run_dir = wine, inject, run_dir

    @property
    def obs(self):
        return self.wine.obs

    def prepare(self) -> None:
        self.wine.prepare()

    def open_obs(self, run_dir: Path):
        return self.wine.open_obs(run_dir)

    def doorbells(self, run_dir: Path, slot: int):
        return self.wine.doorbells(run_dir, slot)

    def start(self, slot, env: dict[str, str], segment) -> GameStart:
        values = {"seed": env["W3S_SEED"], "lane": str(slot.row0 // slot.group.sides), "slot": str(slot.index),
                  "run_dir_windows": windows_path(self.run_dir.resolve())}
        return self.wine.start(slot, env, segment, launch=launch(self.inject, slot.binary, values))

    def game_lost(self, slot) -> bool:
        """Wine's launcher may miss its game's death (a SIGKILL): the game process, found
        once by the start's marker (the launcher and Wine's own processes excluded), has
        been gone for LOST_GRACE_S. The grace is the launcher's to see an ordinary exit
        (an episode quota's) and exit itself: on a loaded machine it once took over the
        watch's 1 s, and a recycle was counted as a crash."""
        if slot.game_pid and procs.alive(slot.game_pid):
            slot.game_gone_at = 0.0
            return False
        found = [p for p in procs.mentioning(slot.marker) if p != slot.proc.pid and not wine_own(p)
                 and _program(p) not in ("w3inject.exe", "bwrap")]  # the launcher, its sandbox
        slot.game_pid = found[0] if found else 0
        if found:
            slot.game_gone_at = 0.0
            return False
        slot.game_gone_at = slot.game_gone_at or time.monotonic()
        return time.monotonic() - slot.game_gone_at >= LOST_GRACE_S

    def prefixes(self) -> list[str]:
        return []  # the Wine runtime's

    def cleanup(self) -> list[int]:
        return []

    def leftovers(self) -> list[int]:
        return []

    def close(self) -> None:
        pass
