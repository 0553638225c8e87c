"""A bubblewrap sandbox around each game start (docs/security.md).

Every start's command becomes `bwrap ... -- command`: the whole file system read-only,
a private /dev/shm holding only the start's own segment, the run folder hidden but for
the start's own doorbells and the folders the recipe lets it write, no network (a
network namespace with loopback only) unless its group allows it, and, for native games,
a pid namespace of its own: every descendant (setsid and double forks included) dies
with the start, and with the supervisor, SIGKILLed or not (--die-with-parent). Wine games
keep the host's pids: their prefix's wineserver, shared and outside, signals a client's
threads by the tids the client reports, which a pid namespace would make wrong.

[supervisor] sandbox = "preferred" (default) uses it where bwrap works here, "required"
refuses a machine without it (preflight), "off" starts games as they are.
"""

from __future__ import annotations

import functools
import shutil
import subprocess
from pathlib import Path

from w3async.runtime.gamestart import GameStart
from w3async.runtime.runfolder import RunError

FIX = ("install bubblewrap (apt-get install bubblewrap) and allow unprivileged user namespaces "
       "(sysctl kernel.unprivileged_userns_clone=1), or set supervisor.sandbox = \"preferred\" or \"off\"")


@functools.cache
def _probe(bwrap: str | None) -> str | None:
    if bwrap is None:
        return "bwrap (bubblewrap) is not on PATH"
    try:
        out = subprocess.run([bwrap, "--unshare-pid", "--unshare-net", "--die-with-parent", "--ro-bind", "/", "/",
                              "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/dev/shm", "true"],
                             capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"{bwrap} cannot run: {e}"
    if out.returncode != 0:
        return f"{bwrap} cannot make namespaces here (exit {out.returncode}: {' '.join(out.stderr.split())[:200]})"
    return None


def unavailable() -> str | None:
    """Why no sandbox can be made on this machine (None: bwrap works)."""
    return _probe(shutil.which("bwrap"))


def check(mode: str) -> list[str]:
    """Preflight: "required" on a machine where bwrap does not work is a problem."""
    why = unavailable() if mode == "required" else None
    return [f"supervisor.sandbox = \"required\": {why}; {FIX}"] if why else []


def writable(group, run_dir: Path) -> list[str]:
    """The folders a group's games may write: its `writable` list, the folders its env
    values under "{run_dir}" or "{run_dir_windows}" name (made here when missing), and
    env values that are absolute paths of existing folders (the recipe named them)."""
    run = str(run_dir.resolve())
    out = []
    named = [(v, False) for v in group.env.values()] + [(v, True) for v in group.writable]
    for v, listed in named:
        if v.startswith("{run_dir_windows}"):
            v = run + v[len("{run_dir_windows}"):].replace("\\", "/")
        elif v.startswith("{run_dir}"):
            v = run + v[len("{run_dir}"):]
        elif not listed and not (v.startswith("/") and Path(v).is_dir()):
            continue
        p = Path(v)
        p.mkdir(parents=True, exist_ok=True)
        out.append(str(p))
    return out


class Sandbox:
    """The run's sandbox: wrap() a start's argv in bwrap."""

    def __init__(self, run_dir: Path, bwrap: str):
        self.run_dir = str(run_dir.resolve())
        self.bwrap = bwrap

    @classmethod
    def for_run(cls, mode: str, run_dir: Path, events=None) -> Sandbox | None:
        """The run's sandbox; None where mode is "off", or "preferred" and bwrap fails here
        (a `sandbox_off` warning in events); RunError for "required" without it."""
        why = None if mode == "off" else unavailable()
        if why and mode == "required":
            raise RunError(f"supervisor.sandbox = \"required\": {why}; {FIX}")
        if why and events is not None:
            events.warning("sandbox_off", reason=why, fix=FIX)
        return None if why or mode == "off" else cls(run_dir, shutil.which("bwrap"))

    def wrap(self, start: GameStart, group) -> list[str]:
        """bwrap's command line around start.argv (group: network, writable folders)."""
        args = [self.bwrap, "--die-with-parent", "--ro-bind", "/", "/", "--dev", "/dev"]
        if start.pid_namespace:  # the game's parent is then the sandbox's pid 1 (the shim dies with it)
            args += ["--unshare-pid", "--proc", "/proc"]
            args += ["--setenv", "W3S_PARENT_PID", "1"] if "W3S_PARENT_PID" in start.env else []
        if not group.network:
            args += ["--unshare-net"]
        write = start.write + writable(group, Path(self.run_dir))
        inside = [p for p in write + [start.cwd] if p.startswith(self.run_dir + "/")]
        # Folders outside the run folder first: one above it (/tmp) must not bring it back.
        for p in write:
            args += ["--bind", p, p] if p not in inside else []
        args += ["--tmpfs", "/dev/shm", "--tmpfs", self.run_dir]  # the neighbours' segments and doorbells hidden
        for p in start.see + inside:
            args += ["--bind", p, p]
        return args + ["--chdir", start.cwd, "--", *start.argv]
