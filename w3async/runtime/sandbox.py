"""A bubblewrap sandbox around each game start (docs/security.md).

Every start's command becomes `bwrap ... -- command`: a user namespace with no
capability in it (as root too: bwrap run by root keeps every capability unless told,
and then a game could unmount what hides the run folder, remount / read-write or setns
out), and none of its own to make (--disable-userns); the whole file system read-only;
a private /dev/shm holding only the start's own segment; the run folder hidden but for
the start's own doorbells and the folders the recipe lets it write; /tmp, /run and
/var/tmp private and every other unix socket of the host covered, so no host service is
reachable by path; private IPC and hostname; no network (a network namespace with
loopback only) unless its group allows it; and, for native games, a pid namespace of
its own: every descendant (setsid and double forks included) dies with the start, and
with the supervisor, SIGKILLed or not (--die-with-parent). A Windows game instead
joins the user and pid namespaces of its prefix's confined wineserver
(wineprefix.ConfinedServer), which signals a client's threads by the tids the client
reports: they must be the tids it sees. Every tmpfs it makes is sized
(supervisor.game_tmpfs_mb): what a game writes there is memory.

[supervisor] sandbox = "preferred" (default) uses it where bwrap works here, "required"
refuses a machine without it (preflight), "off" starts games as they are.
"""

from __future__ import annotations

import functools
import os
import shutil
import stat
import subprocess
from pathlib import Path

from w3async.recipes import system_folder
from w3async.runtime.gamestart import GameStart
from w3async.runtime.runfolder import RunError
from w3async.runtime.wineprefix import join_args, joined_command

FIX = ("install bubblewrap (apt-get install bubblewrap) and allow unprivileged user namespaces "
       "(sysctl kernel.unprivileged_userns_clone=1), or set supervisor.sandbox = \"preferred\" or \"off\"")


@functools.cache
def _probe(bwrap: str | None) -> str | None:
    if bwrap is None:
        return "bwrap (bubblewrap) is not on PATH"
    try:
        out = subprocess.run([bwrap, *_NAMESPACES, "--unshare-pid", "--unshare-net", "--die-with-parent",
                              "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/dev/shm", "true"],
                             capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"{bwrap} cannot run: {e}"
    if out.returncode != 0:
        return f"{bwrap} cannot make namespaces here (exit {out.returncode}: {' '.join(out.stderr.split())[:200]})"
    return None


# A user namespace for every sandbox, with no capability inside and no further user
# namespace: as root, bwrap keeps all capabilities unless told (CapEff 000001fffeffffff),
# so the uid stays 0 (a Wine prefix must be owned by its user) but mount, umount, setns,
# ptrace and raw sockets are refused; unprivileged, bwrap drops them itself.
_PRIVATE = ["--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try"]  # IPC, hostname, cgroup: the start's own
_NAMESPACES = ["--unshare-user", "--disable-userns", *_PRIVATE,
               *(["--uid", "0", "--gid", "0", "--cap-drop", "ALL"] if os.geteuid() == 0 else [])]


def _joined(join: tuple[int, int, int]) -> list[str]:
    """A Windows game's namespaces: its prefix's confined wineserver's user and pid
    namespaces (wineprefix.ConfinedServer; no further user namespace was allowed in them),
    its own IPC, hostname and cgroup ones, no capability."""
    return [*join_args(join), "--uid", str(os.getuid()), "--gid", str(os.getgid()), *_PRIVATE]

# Where a host keeps its services' unix sockets (and its scratch files): private and
# empty in a sandbox. /var/run is a link to /run on current systems.
HIDDEN = ("/tmp", "/run", "/var/run", "/var/tmp")


def host_sockets() -> list[str]:
    """The unix sockets bound to a path that this network namespace lists (/proc/net/unix)
    and that still exist as sockets."""
    try:
        with open("/proc/net/unix") as f:
            paths = {line.split(None, 7)[7] for line in f.read().splitlines()[1:] if len(line.split(None, 7)) > 7}
    except OSError:
        return []
    out = []
    for p in sorted(x for x in paths if x.startswith("/")):
        try:
            if stat.S_ISSOCK(os.stat(p).st_mode):
                out.append(p)
        except OSError:
            pass
    return out


def _linux_path(arg: str) -> str:
    """An argument that names a file: an absolute path, or a Wine Z: path (an injected
    game's launcher is given its hook, adapter, folder and game so); else ""."""
    if arg[:3].upper() == "Z:\\":
        return arg[2:].replace("\\", "/")
    return arg if arg.startswith("/") else ""


def _under(path: str, roots) -> bool:
    return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)


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
        elif not listed and not (v.startswith("/") and Path(v).is_dir()) or system_folder(v):
            continue  # (an env value HOME = "/" makes nothing writable)
        p = Path(v)
        p.mkdir(parents=True, exist_ok=True)
        out.append(str(p))
    return out


def folder_bytes(folder: str) -> int:
    """The bytes of every file under folder (links not followed)."""
    total = 0
    for dirpath, _, names in os.walk(folder):
        for n in names:
            try:
                total += os.lstat(os.path.join(dirpath, n)).st_blocks * 512
            except OSError:
                pass
    return total


def disk_problem(folders: list[str], cap: float, reserve: float) -> str | None:
    """Why the folders a group writes are over what it may take: together over `cap`
    bytes (0: none), or their file system under `reserve` bytes free; else None."""
    if cap:
        used = sum(folder_bytes(f) for f in folders)
        if used > cap:
            return (f"its writable folders ({', '.join(folders)}) hold {used / 2**20:.0f} MiB, over its group's "
                    f"max_disk_mb ({cap / 2**20:.0f})")
    for f in folders:
        try:
            st = os.statvfs(f)
        except OSError:
            continue
        free = st.f_bavail * st.f_frsize
        if reserve and free < reserve:
            return (f"the file system of {f}, which it writes, has {free / 2**20:.0f} MiB free, under "
                    f"supervisor.disk_reserve_mb ({reserve / 2**20:.0f}): kept for the run's checkpoints")
    return None


class Sandbox:
    """The run's sandbox: wrap() a start's argv in bwrap."""

    def __init__(self, run_dir: Path, bwrap: str, tmpfs_mb: float = 64.0):
        self.run_dir = str(run_dir.resolve())
        self.bwrap = bwrap
        self.tmpfs_bytes = str(int(tmpfs_mb * 2**20))
        self.hidden = [h for h in HIDDEN if os.path.isdir(h) and not os.path.islink(h)]

    @classmethod
    def for_run(cls, mode: str, run_dir: Path, events=None, tmpfs_mb: float = 64.0) -> Sandbox | None:
        """The run's sandbox; None where mode is "off", or "preferred" and bwrap fails here
        (a `sandbox_off` warning in events); RunError for "required" without it."""
        why = None if mode == "off" else unavailable()
        if why and mode == "required":
            raise RunError(f"supervisor.sandbox = \"required\": {why}; {FIX}")
        if why and events is not None:
            events.warning("sandbox_off", reason=why, fix=FIX)
        return None if why or mode == "off" else cls(run_dir, shutil.which("bwrap"), tmpfs_mb)

    def _tmpfs(self, path: str) -> list[str]:
        return ["--size", self.tmpfs_bytes, "--tmpfs", path]

    def wrap(self, start: GameStart, group) -> list[str]:
        """bwrap's command line around start.argv (group: network, writable folders)."""
        spaces = _joined(start.join) if start.join else _NAMESPACES
        # --die-with-parent not where the start joins a pid namespace: bwrap then enters it
        # through an intermediate process that exits at once, and the sandboxed process sets
        # its parent-death signal only after its set-up; when that comes first, the
        # intermediate's exit SIGKILLs the start (bubblewrap 0.8's source). What the suite
        # met, about once a run: a Wine start SIGKILLed 23 ms after it began, with no
        # output, beside another start launched at the same moment. Such a game ends with its
        # supervisor otherwise: at its next wait (its act doorbell closed: W3S_EXIT_LOST), and
        # whatever is left of its prefix with the next run (the run lock's clean-up).
        args = [self.bwrap, *spaces, *([] if start.join else ["--die-with-parent"]),
                "--ro-bind", "/", "/", "--dev", "/dev"]
        if start.join:  # the server's pid namespace: its /proc
            args += ["--proc", "/proc"]
        elif start.pid_namespace:  # the game's parent is then the sandbox's pid 1 (the shim dies with it)
            args += ["--unshare-pid", "--proc", "/proc"]
            args += ["--setenv", "W3S_PARENT_PID", "1"] if "W3S_PARENT_PID" in start.env else []
        if not group.network:
            args += ["--unshare-net"]
        # The host's scratch and socket folders private, its other sockets covered: a game
        # reaches no service by path (a socket under /dev/null's bind refuses connections).
        for h in self.hidden + ["/dev/shm"]:
            args += self._tmpfs(h)
        for sock in host_sockets():
            if not _under(sock, self.hidden + [self.run_dir]) and sock not in start.see:
                args += ["--ro-bind", "/dev/null", sock]
        write = start.write + writable(group, Path(self.run_dir))
        inside = [p for p in write + [start.cwd] if _under(p, [self.run_dir])]
        # What a private folder hid that the start runs or reads: its folder, its files on
        # the command line, its runtime's (a Wine prefix); before the writable folders,
        # which may lie inside them.
        argv_files = [p for p in map(_linux_path, start.argv) if p and os.path.exists(p)]
        shown = [p for p in [start.cwd] + argv_files + start.read
                 if _under(p, self.hidden) and not _under(p, write + inside)]
        for p in dict.fromkeys(shown):
            args += ["--ro-bind", p, p]
        # Folders outside the run folder first: one above it (/tmp) must not bring it back.
        for p in write:
            args += ["--bind", p, p] if p not in inside else []
        args += self._tmpfs(self.run_dir)  # the neighbours' segments and doorbells hidden
        for p in start.see + inside:
            args += ["--bind", p, p]
        return args + ["--chdir", start.cwd, "--", *(joined_command(start.argv) if start.join else start.argv)]
