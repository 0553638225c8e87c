"""Windows games under Wine: the Runtime (gamestart.py) of a run's .exe games.

Its games share one locked prefix (wineprefix.py: made, booted, ended), ring one obs
FIFO, and each start gets an act FIFO in a folder of its slot's own (bells/<slot>/), so
that a sandbox binds a game's own doorbells and nothing of its neighbours'.
"""

from __future__ import annotations

import os
from pathlib import Path

from w3async.runtime.gamestart import GameStart
from w3async.runtime.wineprefix import (  # noqa: F401 (the names callers import from here)
    BOOT_TIMEOUT_S, CHECK_TIMEOUT_S, DLL_OVERRIDES, GRAPHICS, LAUNCHER, LAUNCHERS, READY_MARK, WineBuild,
    prefix_writable, server_dirs,
    WineConfig, WineError, WinePrefix, acquire_prefix, acquire_running_prefix, cache_root, check_prefix,
    exe_bits, graphics_driver, processes_with_env, program_bits, resolve_build, start_services)
from w3async.run_folder import RunFolder
from w3async.sync.doorbells import Doorbells, fifo_pair, shared_obs_fifo
from w3async.sync.table import GameSegment

SHADER_CACHE_MAX = "256M"  # a slot's shader cache at most (Mesa's MESA_SHADER_CACHE_MAX_SIZE)


def wine_server_dir(prefix: Path) -> list[str]:
    """Where the prefix's wineserver keeps its socket (its clients connect to it there)."""
    return server_dirs(prefix, os.environ.get("TMPDIR") or "/tmp")


def x_socket(prefix: WinePrefix) -> list[str]:
    """The unix socket of the run's X server (display = "xvfb"), which a sandbox's private
    /tmp would hide; [] without one."""
    display = prefix.xserver.display if prefix.xserver is not None else ""
    return [f"/tmp/.X11-unix/X{display[1:].split('.')[0]}"] if display.startswith(":") else []


def windows_path(path: str | os.PathLike) -> str:
    """A Linux path as Wine sees it through the Z: drive."""
    return "Z:" + os.path.abspath(path).replace("/", "\\")


def wine_own(pid: int) -> bool:
    """A process of Wine itself (wineserver, C:\\windows\\...\\services.exe, explorer.exe, ...):
    it may carry the environment of the game that happened to start it, and it is the
    prefix's, ended with the run, never with a game."""
    try:
        argv0 = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")[0].decode(errors="replace")
    except OSError:
        return False
    return argv0.lower().startswith("c:\\windows\\") or argv0.rsplit("/", 1)[-1].startswith("wineserver")


class WineRuntime:
    """Windows games under Wine: FIFO doorbells, the table through Z:\\dev\\shm, one
    locked prefix for the run (acquired on first use), ended with the run."""

    name = "wine"

    def __init__(self, cfg: WineConfig, tag: str = "wine"):
        self.cfg, self.tag = cfg, tag  # tag: its obs FIFO's folder, bells/<tag>/ (a prefix per game: one each)
        self.prefix: WinePrefix | None = None
        self.obs = None
        self.xserver_pid = 0
        self.run_dir: Path | None = None  # (open_obs)

    def open_obs(self, run_dir: Path):
        """The obs FIFO all this runtime's games ring (made once)."""
        if self.obs is None:
            self.obs = shared_obs_fifo(RunFolder(run_dir).bells / self.tag)
            self.run_dir = run_dir
        return self.obs

    def shader_cache(self, slot) -> dict[str, str]:
        """With a display, a shader cache of the slot's own in the run folder, which its
        sandbox lets it write: Mesa's default (~/.cache) is read-only there, and Mesa then
        disabled its cache, so every start compiled every shader again. One a slot, not
        one a prefix: a game could plant compiled code (llvmpipe caches machine code) for
        another to run."""
        if self.prefix is None or self.prefix.xserver is None:
            return {}
        folder = RunFolder(self.run_dir.resolve()).shader_cache / f"slot-{slot.index}"
        folder.mkdir(parents=True, exist_ok=True)
        return {"MESA_SHADER_CACHE_DIR": str(folder), "MESA_SHADER_CACHE_MAX_SIZE": SHADER_CACHE_MAX}

    def ensure_prefix(self) -> WinePrefix:
        if self.prefix is None:
            self.prefix = acquire_running_prefix(self.cfg)
            if self.prefix.xserver is not None:  # for the record (events, tests): the run's X server
                self.xserver_pid = self.prefix.xserver.proc.pid
        elif self.prefix.server is not None and not self.prefix.server.alive():
            # A game of the prefix ended its confined wineserver (its raw kill() reaches
            # that far), and the prefix's processes went with the server's pid namespace:
            # its services again (a second or two, on the loop: only after such a kill).
            self.prefix.kill()
            start_services(self.prefix)
        return self.prefix

    def prepare(self) -> None:
        self.ensure_prefix()

    def doorbells(self, run_dir: Path, slot: int) -> Doorbells:
        obs = self.open_obs(run_dir)
        bells = fifo_pair(RunFolder(run_dir).bells / str(slot), slot, obs)  # a folder a slot: a sandbox binds its own
        # The game opens its FIFOs through Wine's Z: drive.
        bells.child_env.update(W3S_OBS_FIFO=windows_path(obs.path), W3S_ACT_FIFO=windows_path(bells.paths[0]))
        return bells

    def start(self, slot, env: dict[str, str], segment: GameSegment, launch: tuple | None = None) -> GameStart:
        """slot's .exe in the prefix, its segment as a Z: path; with launch (inject.py: the
        launcher, its arguments, the hook's settings, the folder), through the launcher."""
        prefix = self.ensure_prefix()
        shm_path = windows_path(segment.path)
        cache = self.shader_cache(slot)
        extra = {**env, **slot.bells.child_env, "W3S_SHM_PATH": shm_path, **cache}
        exe, args, cwd = str(slot.binary), [], str(slot.binary.parent)
        if launch:
            exe, args, hook_env, cwd = str(launch[0]), launch[1], launch[2], launch[3]
            extra.update(hook_env)
        server = prefix.server
        join = server.fds if server is not None else ()
        return GameStart(prefix.command(exe, args), prefix.env(extra), cwd, f"W3S_SHM_PATH={shm_path}\0".encode(),
                         see=[segment.path, self.obs.path, *slot.bells.paths, *x_socket(prefix)],
                         write=[*prefix_writable(prefix.path), *wine_server_dir(prefix.path),
                                *([cache["MESA_SHADER_CACHE_DIR"]] if cache else [])],
                         read=[str(prefix.path)], pid_namespace=False, join=join or None, pass_fds=join)

    def game_lost(self, slot) -> bool:
        return False

    def prefixes(self) -> list[str]:
        return [str(self.prefix.path)] if self.prefix else []

    def cleanup(self) -> list[int]:
        """End every process of the prefix (on shutdown); the pids that needed SIGKILL."""
        return self.prefix.kill() if self.prefix else []

    def leftovers(self) -> list[int]:
        return self.prefix.processes() if self.prefix else []

    def close(self) -> None:
        if self.obs is not None:
            self.obs.close()
            self.obs = None
        if self.prefix:
            self.prefix.release()
            self.prefix = None
