"""Wine prefixes: made, locked, booted, their services started, checked, and ended.

A prefix is made once per Wine build with `wineboot` under a cache folder and reused by
later runs (a fresh one costs ~20 s and ~700 MB). A run holds its prefix with an
exclusive lock; a second run at the same time takes the next prefix of the pool, so
that `wineserver -k` at the end of one run never ends another run's games.

What a prefix gets once (traps found on the way):
- mscoree and mshtml off while booting: on a machine without internet wineboot
  would otherwise wait on Mono and Gecko installers;
- the crash dialog off and no debugger (AeDebug): a crashing .exe must exit, not wait
  for a click (the shim also calls SetErrorMode);
- the HID, USB and Bluetooth bus drivers off by DLL override (measured in a Warcraft III harness under Wine: the HID bus
  woke every millisecond in every game), winemenubuilder off.

And every Wine process starts with its address space's randomization off (`setarch -R`:
fixed_layout()): Debian's Wine 8 has no preloader, its 64-bit loader is linked at
0x7d000000, and the kernel puts a 64-bit program's heap anywhere in the 1 GiB after it,
so about one start in a few thousand found its heap on the page Wine must map at
0x7ffe0000 and exited 1 at once ("failed to map the shared user data: c0000018"); the
desktop process failing so took a Direct3D game's GL context with it.
"""

from __future__ import annotations

import fcntl
import functools
import hashlib
import json
import os
import re
import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from w3async.observe.logs import console
from w3async.runtime import procs
from w3async.runtime.gamestart import inherited
from w3async.runtime.wineinstall import exe_bits, program_bits, wine_install  # noqa: F401 (program_bits: the supervisor's)

READY_MARK = ".w3async-ready"
# The injection launcher (shim/inject/launcher.c): its --desktop mode starts the prefix's
# desktop before any game (WineRuntime.ensure_prefix).
LAUNCHER = Path(__file__).resolve().parents[2] / "build" / "win64" / "w3inject.exe"
# The launcher of each bitness (shim/Makefile builds win32 where i686 mingw is installed).
LAUNCHERS = {64: LAUNCHER, 32: LAUNCHER.parents[1] / "win32" / LAUNCHER.name}
CHECK_TIMEOUT_S = 60.0
BOOT_TIMEOUT_S = 180.0

DLL_OVERRIDES = "mscoree,mshtml,winemenubuilder.exe=d;winebus.sys,winehid.sys,wineusb.sys,winebth.sys=d"

# Imported once into every new prefix with `wine regedit /S`. The graphics driver is
# Wine's null driver (no display: CreateWindow fails in a prefix without one, "nodrv_
# CreateWindow ... no driver could be loaded"); start_services sets it again each run
# (GRAPHICS), for prefixes made before this line and for display = "xvfb".
PREFIX_REG = r"""REGEDIT4

[HKEY_CURRENT_USER\Software\Wine\WineDbg]
"ShowCrashDialog"=dword:00000000

[HKEY_CURRENT_USER\Software\Wine\Drivers]
"Graphics"="null"

[HKEY_LOCAL_MACHINE\Software\Microsoft\Windows NT\CurrentVersion\AeDebug]
"Debugger"="{no_debugger}"
"Auto"="1"

[HKEY_LOCAL_MACHINE\Software\Wow6432Node\Microsoft\Windows NT\CurrentVersion\AeDebug]
"Debugger"="{no_debugger}"
"Auto"="1"
"""
# Wine starts `winedbg --auto` on a process whose exception nothing handled, also where
# the AeDebug value is deleted (its default); a debugger that does not exist is never
# started, and the process ends at once with its exception (measured: 0.02-0.04 s to the
# exit instead of 0.22-0.25 s and a backtrace, for a 64-bit and a 32-bit crash). Imported
# by the 64-bit regedit, which writes both views (the 32-bit one, Wine 8's default loader
# where wine32 is installed, wrote Wow6432Node twice and left the 64-bit view's winedbg).
NO_DEBUGGER = "w3async-no-debugger %ld %ld"
PREFIX_REG = PREFIX_REG.replace("{no_debugger}", NO_DEBUGGER)


class WineError(RuntimeError):
    """Wine is missing, or a prefix could not be made or ended."""


@dataclass(frozen=True)
class WineConfig:
    wine: str = "wine"
    """The Wine loader (a name on PATH or a path), or a Proton build folder (one with
    files/bin/wine64 or bin/wine64 in it): then WINEDLLPATH and LD_LIBRARY_PATH point
    at its libraries, as Proton's own script sets them."""
    cache_dir: str | None = None
    """Where prefixes live; default $W3ASYNC_CACHE or ~/.cache/w3async, then wine/."""
    fsync: bool = False
    """WINEFSYNC=1: Proton's futex-based sync (measured in a Warcraft III harness under Wine: -28% CPU a step with
    GE-Proton). Stock Wine ignores it: on Debian's Wine 8 it does nothing."""
    esync: bool = False
    """WINEESYNC=1: eventfd-based sync, also Proton/staging only; nothing on stock Wine."""
    display: str = "null"
    """"null": Wine's null graphics driver; "xvfb": an X server for the run (display.py)."""
    confine: bool = False
    """The run's games are sandboxed (bwrap works here): the prefix's wineserver is
    confined too (ConfinedServer).
    Wine's server does work for its games that a sandbox around a game alone cannot hold:
    it makes every Winsock socket, and it opens the files a game creates or writes
    (measured: a sandboxed game whose C:\\windows was read-only wrote a DLL into
    system32 through it)."""
    network: bool = True
    """The prefix's games may use the network. With False and `confine`, the wineserver
    starts in a network namespace of its own with loopback only."""
    writable: tuple[str, ...] = ()
    """With `confine`, the folders the prefix's games may write (their groups' `writable`
    and run-folder env values): the wineserver writes them for the games; the rest of the
    file system, the prefix's C:\\windows and registry files included, is read-only to it."""
    bits: tuple[int, ...] = (64,)
    """The bitnesses of the programs the prefix will run (32, 64): before the games, the
    launcher of each (build/win32, build/win64) is started in --check mode, and a prefix
    that cannot run it is remade once (acquire_running_prefix)."""


@dataclass(frozen=True)
class WineBuild:
    """A resolved Wine: the loader, its wineserver, extra environment, and an id."""

    loader: str
    server: str
    env: dict
    build_id: str
    loaders: dict = field(default_factory=dict)
    """bits -> the loader of that bitness (wineinstall.py). A program started by the
    loader of the other bitness runs behind an extra `start.exe /exec` process in its
    process group (Wine 8 with wine32 installed: /usr/bin/wine runs the 32-bit loader),
    which ends with it, so each program gets the loader of its own bitness."""


def resolve_build(cfg: WineConfig) -> WineBuild:
    """Find the loader and wineserver of cfg.wine; WineError naming what is missing. The
    build's id (its prefixes' folder) is wine_install(cfg.wine).key: the loaders' versions and
    the architectures installed."""
    w = cfg.wine
    env: dict[str, str] = {}
    if os.path.isdir(w):
        root = Path(w)
        for sub in ("files", "dist", "."):
            bindir = root / sub / "bin"
            if (bindir / "wine64").exists() or (bindir / "wine").exists():
                break
        else:
            raise WineError(f"Proton build folder {w} has no files/bin/wine64, dist/bin/wine64 or bin/wine64")
        base = bindir.parent
        loader = str(bindir / ("wine64" if (bindir / "wine64").exists() else "wine"))
        server = str(bindir / "wineserver")
        env["WINEDLLPATH"] = os.pathsep.join(str(base / d) for d in ("lib64/wine", "lib/wine", "lib/vkd3d") if (base / d).exists())
        libs = [str(base / d) for d in ("lib64", "lib") if (base / d).exists()]
        if libs:
            env["LD_LIBRARY_PATH"] = os.pathsep.join(libs + [os.environ.get("LD_LIBRARY_PATH", "")]).rstrip(os.pathsep)
    else:
        loader = shutil.which(w) or (shutil.which("wine64") if w == "wine" else None)
        if not loader:
            raise WineError(f"Wine loader {w!r} not found on PATH (apt-get install wine64, or set runtime.wine)")
        server = shutil.which("wineserver", path=os.path.dirname(loader)) or shutil.which("wineserver")
        if not server:
            raise WineError(f"wineserver not found next to {loader} or on PATH")
    install = wine_install(cfg.wine, loader)
    return WineBuild(loader=loader, server=server, env=env, build_id=install.key, loaders=dict(install.loaders))


def cache_root(cfg: WineConfig) -> Path:
    base = cfg.cache_dir or os.environ.get("W3ASYNC_CACHE") or os.path.join(Path.home(), ".cache", "w3async")
    return Path(base) / "wine"


class WinePrefix:
    """A locked, booted prefix. Use through acquire_prefix()."""

    def __init__(self, build: WineBuild, cfg: WineConfig, path: Path, lock_fd: int):
        self.build = build
        self.cfg = cfg
        self.path = path
        self._lock_fd = lock_fd
        self.xserver = None  # display.Xvfb with display = "xvfb", started by start_services
        self.remade: str | None = None  # what an earlier run's game had changed, when it was made again
        self.server: ConfinedServer | None = None  # cfg.confine: its wineserver's sandbox (start_services)

    def env(self, extra: dict | None = None) -> dict:
        """The environment for a process of this prefix (gamestart.inherited() + Wine's +
        extra): the operator's other variables reach neither the games nor Wine's own."""
        env = inherited()
        env.update(self.build.env)
        env.update(
            WINEPREFIX=str(self.path),
            WINEDEBUG=self.debug_channels(),
            WINEDLLOVERRIDES=DLL_OVERRIDES,
            WINEFSYNC="1" if self.cfg.fsync else "0",
            WINEESYNC="1" if self.cfg.esync else "0",
        )
        env.pop("DISPLAY", None)  # the null driver: no X server; the run's Xvfb otherwise
        if self.xserver is not None:
            env["DISPLAY"] = self.xserver.display
        if extra:
            env.update(extra)
        return env

    def debug_channels(self) -> str:
        """WINEDEBUG: Wine's errors (err:, winediag's "no OpenGL" included) reach the game's
        log and a failure's message; its fixme: notes, many a frame for some games, do not.
        With the null driver, the three lines every start prints because it has no desktop
        ("no driver could be loaded", "Could not create tray window") are left out too."""
        return "fixme-all" + (",err-winediag,err-systray" if self.cfg.display == "null" else "")

    def command(self, exe: str, args: list[str] | tuple[str, ...] = ()) -> list[str]:
        """The command line that starts exe in this prefix, with the loader of exe's
        bitness where the build has it (WineBuild.loaders), else the configured one, its
        layout fixed (fixed_layout: inside a sandbox too, where a setuid bwrap would drop
        a personality set before it)."""
        return [*fixed_layout(), self.build.loaders.get(exe_bits(exe)) or self.build.loader, exe, *args]

    def run(self, argv: list[str], **kw) -> subprocess.CompletedProcess:
        """subprocess.run of one of the prefix's own programs (reg, the launcher's checks,
        `wineserver -k`): beside a confined server, in its namespaces (ConfinedServer.join)."""
        if self.server is not None and self.server.alive():
            return subprocess.run(self.server.join(argv), env=self.env(), pass_fds=self.server.fds, **kw)
        return subprocess.run(argv, env=self.env(), **kw)

    def processes(self) -> list[int]:
        """Live processes (not zombies) whose environment names this prefix: the
        wineserver, services.exe, winedevice.exe, explorer.exe, the games."""
        return processes_with_env("WINEPREFIX", str(self.path))

    def kill(self, timeout_s: float = 10.0) -> list[int]:
        """End every process of the prefix: `wineserver -k`, then SIGKILL whatever is
        left after timeout_s. Returns the pids that had to be SIGKILLed."""
        try:
            # (A confined server that ended took its pid namespace's processes with it; a
            # `wineserver -k` outside would signal the pid its lock file names there.)
            if self.server is None or self.server.alive():
                self.run([self.build.server, "-k"], timeout=timeout_s, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            pass
        deadline = time.monotonic() + timeout_s
        while self.processes() and time.monotonic() < deadline:
            time.sleep(0.05)
        left = self.processes()
        for pid in left:
            procs.kill(pid)
        if self.server is not None:
            self.server.close()
            self.server = None
        if self.xserver is not None:  # after the games: none of them draws any more
            self.xserver.stop()
            self.xserver = None
        return left

    def release(self) -> None:
        if self._lock_fd >= 0:
            os.close(self._lock_fd)  # drops the flock
            self._lock_fd = -1

    def __enter__(self) -> "WinePrefix":
        return self

    def __exit__(self, *exc) -> None:
        try:
            self.kill()
        finally:
            self.release()


def acquire_prefix(cfg: WineConfig, max_prefixes: int = 16) -> WinePrefix:
    """Lock the first free prefix of cfg's Wine build, booting it the first time.
    A context manager: leaving it ends the prefix's processes and unlocks it."""
    build = resolve_build(cfg)
    root = cache_root(cfg) / build.build_id
    root.mkdir(parents=True, exist_ok=True)
    for k in range(max_prefixes):
        path = root / f"prefix-{k}"
        fd = os.open(str(root / f"prefix-{k}.lock"), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        prefix = WinePrefix(build, cfg, path, fd)
        try:
            changed = changed_since_boot(path) if (path / READY_MARK).exists() else None
            if changed:  # a game of an earlier run changed it: never handed on as it is
                prefix.remade = changed
                console(f"w3async: warning: Wine prefix {path} was changed since it was made ({changed}): "
                        f"made again")
            if changed or not (path / READY_MARK).exists():
                _boot(prefix)
            elif not debugger_set(path):
                _run_steps(prefix, _import_steps(prefix))
            return prefix
        except BaseException:
            prefix.kill()
            prefix.release()
            raise
    raise WineError(f"all {max_prefixes} Wine prefixes under {root} are in use by other runs")


def _boot(prefix: WinePrefix) -> None:
    """wineboot a new prefix, import PREFIX_REG, wait for its wineserver to exit."""
    if prefix.path.exists():
        shutil.rmtree(prefix.path)  # a boot that died halfway: start over
    _run_steps(prefix, [[*fixed_layout(), prefix.build.loader, "wineboot", "-i"], *_import_steps(prefix)])
    if not (prefix.path / "system.reg").exists():
        raise WineError(f"Wine prefix {prefix.path}: wineboot left no system.reg (log: {_boot_log(prefix)})")
    (prefix.path / GUARD).write_text(json.dumps(fingerprint(prefix.path)))
    (prefix.path / READY_MARK).write_text(f"{prefix.build.loader}\n")


def _import_steps(prefix: WinePrefix) -> list[list[str]]:
    """PREFIX_REG imported by the 64-bit regedit where there is one (it writes both
    registry views), then the wait for the prefix's server to save it."""
    (prefix.path.parent / "w3async.reg").write_text(PREFIX_REG.replace("\n", "\r\n"))
    return [[*fixed_layout(), prefix.build.loaders.get(64) or prefix.build.loader, "regedit", "/S",
             "Z:" + str(prefix.path.parent / "w3async.reg").replace("/", "\\")], [prefix.build.server, "-w"]]


def _boot_log(prefix: WinePrefix) -> Path:
    return prefix.path.parent / f"{prefix.path.name}.boot.log"


def _run_steps(prefix: WinePrefix, steps: list[list[str]]) -> None:
    """Each command in turn in the prefix (no server of the run's yet), into its boot log;
    WineError naming the one that failed."""
    env, log = prefix.env(), _boot_log(prefix)
    with open(log, "ab") as out:
        for cmd in steps:
            try:
                rc = subprocess.run(cmd, env=env, stdout=out, stderr=subprocess.STDOUT, timeout=BOOT_TIMEOUT_S).returncode
            except subprocess.TimeoutExpired:
                raise WineError(f"Wine prefix {prefix.path}: {' '.join(cmd)} took over {BOOT_TIMEOUT_S:.0f} s (log: {log})")
            except OSError as e:
                raise WineError(f"Wine prefix {prefix.path}: cannot run {cmd[0]}: {e}")
            if rc != 0:
                tail = log.read_text(errors="replace")[-600:]
                raise WineError(f"Wine prefix {prefix.path}: {' '.join(cmd)} exited {rc} (log: {log}):\n{tail}")


def debugger_set(prefix: Path) -> bool:
    """Whether the prefix's AeDebug values, in both registry views, name NO_DEBUGGER (a
    prefix made before it names winedbg: it is imported again before a game gets it)."""
    try:
        text = (prefix / "system.reg").read_text(errors="replace")
    except OSError:
        return False
    found = re.findall(r'\n\[Software\\\\(?:Wow6432Node\\\\)?Microsoft\\\\Windows NT\\\\CurrentVersion\\\\AeDebug\][^\[]*?'
                       r'"Debugger"="([^"\n]*)"', text)
    return len(found) == 2 and all(v == NO_DEBUGGER for v in found)


# A prefix is the next run's too: what a game could change in it to reach the games after
# it is fingerprinted when the prefix is made, and a prefix whose fingerprint changed is
# made again before any game is given it. Its Windows folder (a DLL planted in system32)
# is out of a sandboxed game's reach already (wine.py, prefix_writable); the registry is
# not (the prefix's wineserver writes it for the game), so the keys a program uses to make
# another load its code are fingerprinted.
GUARD = ".w3async-guard"
GUARDED_KEYS = re.compile(
    r"^(software\\\\wine\\\\dlloverrides|software\\\\wine\\\\appdefaults\\\\[^\\]+\\\\dlloverrides"
    r"|software\\\\microsoft\\\\windows nt\\\\currentversion\\\\(windows|image file execution options|winlogon)"
    r"|software\\\\microsoft\\\\windows\\\\currentversion\\\\run|software\\\\classes\\\\clsid"
    r"|system\\\\currentcontrolset\\\\control\\\\session manager|system\\\\currentcontrolset\\\\services"
    r"|environment$)")


def _registry_keys(path: Path) -> list[str]:
    """The guarded keys of one registry file with their values, in order, without Wine's
    timestamps (which change at every save)."""
    out, keep = [], False
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return []
    for line in text.splitlines():
        if line.startswith("["):
            key = line[1:].rsplit("]", 1)[0]
            keep = bool(GUARDED_KEYS.match(key.lower()))
            if keep:
                out.append(f"[{key}]")
        elif keep and line and not line.startswith("#time="):
            out.append(line)
    return out


def fingerprint(prefix: Path) -> dict:
    """What the next run's games would inherit from a prefix: the guarded registry keys and
    every file of C:\\windows (its path, size and modification time)."""
    reg = hashlib.sha256()
    for name in ("system.reg", "user.reg", "userdef.reg"):
        reg.update("\n".join([name, *_registry_keys(prefix / name)]).encode())
    files = hashlib.sha256()
    root = prefix / "drive_c" / "windows"
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for f in sorted(filenames):
            try:
                st = os.lstat(os.path.join(dirpath, f))
            except OSError:
                continue
            files.update(f"{os.path.relpath(os.path.join(dirpath, f), root)}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    return {"registry": reg.hexdigest(), "windows": files.hexdigest()}


def changed_since_boot(prefix: Path) -> str | None:
    """What of the prefix changed since it was made ("its registry's guarded keys", "its
    C:\\windows files", both), or None. A prefix made before fingerprints gets one now."""
    try:
        made = json.loads((prefix / GUARD).read_text())
    except FileNotFoundError:
        (prefix / GUARD).write_text(json.dumps(fingerprint(prefix)))
        return None
    except (OSError, ValueError):
        return "its fingerprint file is unreadable"
    now = fingerprint(prefix)
    what = [w for k, w in (("registry", "its registry's guarded keys"), ("windows", "its C:\\windows files"))
            if made.get(k) != now[k]]
    return " and ".join(what) or None


def start_services(prefix: WinePrefix) -> None:
    """Start the prefix's own processes before any game, each in a session of its own and
    with no game's environment: a persistent wineserver (services.exe and the rest follow
    it) and the desktop (explorer.exe). Started by the first game instead, they would
    carry its environment, and the desktop would sit in its process group: that game's
    exit would end it. With cfg.confine the server is a ConfinedServer, and the rest
    joins it (WinePrefix.run)."""
    quiet = dict(stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    if prefix.cfg.display == "xvfb" and prefix.xserver is None:
        from w3async.runtime.display import DisplayError, Xvfb
        try:
            prefix.xserver = Xvfb().start()
        except DisplayError as e:
            raise WineError(str(e))
    try:
        if prefix.cfg.confine:
            prefix.server = ConfinedServer(prefix)
        else:
            subprocess.run([prefix.build.server, "-p"], env=prefix.env(), timeout=BOOT_TIMEOUT_S, **quiet)
        driver = GRAPHICS[prefix.cfg.display]
        if graphics_driver(prefix) != driver:  # per run: the desktops read it when they start
            prefix.run(prefix.command("reg", ["add", r"HKCU\Software\Wine\Drivers", "/v", "Graphics", "/d", driver,
                                              "/f"]), timeout=BOOT_TIMEOUT_S, **quiet)
        if LAUNCHER.exists():
            prefix.run(prefix.command(str(LAUNCHER), ["--desktop"]), timeout=BOOT_TIMEOUT_S, **quiet)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise WineError(f"Wine prefix {prefix.path}: starting its services failed: {e}")


# The confined server's namespaces: its own user namespace (no further one in it) with
# CAP_SYS_PTRACE only, its own pid namespace (its clients join both: namespaces()).
SERVER_NAMESPACES = ("--unshare-user", "--disable-userns", "--unshare-pid", "--cap-drop", "ALL",
                     "--cap-add", "CAP_SYS_PTRACE")


def _ids() -> list[str]:
    """The uid and gid inside a prefix's namespaces: this process's own (Wine refuses a
    prefix or a server folder that is not its user's)."""
    return ["--uid", str(os.getuid()), "--gid", str(os.getgid())]


def process_tree(pid: int) -> list[int]:
    """pid and its descendants (threads' children included), parents first."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop(0)
        out.append(p)
        try:
            for task in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{task}/children") as f:
                    todo += [int(c) for c in f.read().split()]
        except OSError:
            pass
    return out


class ConfinedServer:
    """A prefix's persistent wineserver in a sandbox of its own (WineConfig.confine), as
    root and unprivileged alike. Wine's server does work for its games that a sandbox
    around a game alone cannot hold: it makes every Winsock socket, opens the files a game
    creates or writes, and signals a client's threads by the pids the client reports.
    So it runs in a user namespace of its own (this process's uid; of the capabilities
    only CAP_SYS_PTRACE, with which it writes an injected game's memory; no further user
    namespace), a pid namespace of its own (it is pid 2 there), the file system read-only
    but for what its games may write (the prefix's user profiles, the groups' writable
    folders, /dev with the games' segments, its socket folder), and no network unless a
    game may have it. Its registry stays as the prefix was made (saves fail: a game's
    DllOverrides value dies with the run).

    Every other process of the prefix joins its user and pid namespaces (join(); a game
    through Sandbox.wrap, GameStart.join): the pids a client reports are then the ones
    the server sees, and a game's raw kill() reaches its own prefix's processes and
    nothing else: not the supervisor, not another prefix's games."""

    def __init__(self, prefix: WinePrefix):
        self.prefix = prefix
        tmp = os.environ.get("TMPDIR") or "/tmp"
        folder = server_dirs(prefix.path, tmp)
        self.binds = [*prefix_writable(prefix.path), *prefix.cfg.writable, *folder]
        st = os.stat(prefix.path)  # Wine's own name for the prefix's server folder
        self.socket = os.path.join(folder[0], f"server-{st.st_dev:x}-{st.st_ino:x}", "socket")
        self.net = [] if prefix.cfg.network else ["--unshare-net"]
        args = [shutil.which("bwrap") or "bwrap", *SERVER_NAMESPACES, *_ids(), *self.net, *self._view(),
                "--dev-bind", "/dev", "/dev", "--", prefix.build.server, "-f", "-p"]
        self.log = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(args, env=prefix.env(), stdin=subprocess.DEVNULL, stdout=self.log,
                                     stderr=self.log, start_new_session=True)
        self.fds: tuple[int, ...] = ()
        try:
            self.pid = self._wait_for_server()
            self.fds = namespaces(self.pid)
        except BaseException:
            self.close()
            raise

    def _view(self) -> list[str]:
        args = ["--ro-bind", "/", "/", "--proc", "/proc"]
        for p in self.binds:
            args += ["--bind", p, p]
        return args

    def _wait_for_server(self) -> int:
        """The wineserver's host pid once it takes connections (a client that came first
        would start a server of its own)."""
        deadline = time.monotonic() + BOOT_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                self.log.seek(0)
                said = " ".join(self.log.read().decode(errors="replace").split())[-400:]
                raise WineError(f"Wine prefix {self.prefix.path}: its confined wineserver exited "
                                f"{self.proc.returncode} at its start: {said or 'no output'}")
            server = [p for p in process_tree(self.proc.pid) if command_name(p).startswith("wineserver")]
            if server and self._listening():
                return server[0]
            time.sleep(0.02)
        raise WineError(f"Wine prefix {self.prefix.path}: its confined wineserver took no connection in "
                        f"{BOOT_TIMEOUT_S:.0f} s")

    def _listening(self) -> bool:
        with socket.socket(socket.AF_UNIX) as s:
            try:
                s.connect(self.socket)
                return True
            except OSError:
                return False

    def alive(self) -> bool:
        return bool(self.fds) and self.proc.poll() is None

    def join(self, argv: list[str]) -> list[str]:
        """argv in the server's user and pid namespaces, seeing what it sees (a process of
        the prefix's own: a game joins in its sandbox instead, Sandbox.wrap)."""
        return [shutil.which("bwrap") or "bwrap", *join_args(self.fds), *_ids(), *self.net,
                *self._view(), "--dev-bind", "/dev", "/dev", "--", *joined_command(argv)]

    def close(self) -> None:
        """After `wineserver -k`: the sandbox ends with its server (the pid namespace's
        other processes with it)."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        for fd in self.fds:
            os.close(fd)
        self.fds = ()
        self.log.close()


NS_GET_PARENT = 0xB702  # ioctl on a namespace's fd: its parent's (linux/nsfs.h)


def namespaces(pid: int) -> tuple[int, int, int]:
    """fds of pid's user namespace's parent, pid's pid namespace and its user namespace:
    what bwrap needs to put a process beside it (join_args). With --disable-userns, bwrap
    leaves its sandbox in a user namespace nested in the one that owns the pid namespace:
    a joiner sets up in the parent (the pid namespace is that one's) and ends in pid's."""
    user = os.open(f"/proc/{pid}/ns/user", os.O_RDONLY | os.O_CLOEXEC)
    try:
        parent = fcntl.ioctl(user, NS_GET_PARENT)
        return parent, os.open(f"/proc/{pid}/ns/pid", os.O_RDONLY | os.O_CLOEXEC), user
    except BaseException:
        os.close(user)
        raise


def join_args(fds: tuple[int, int, int]) -> list[str]:
    """bwrap's options that put its command in the namespaces of namespaces(), with no
    capability but, as root, CAP_SETPCAP: every caller runs its command through
    joined_command(), which drops it before the command's first instruction."""
    parent, pid, user = fds
    caps = ["--cap-drop", "ALL", *(["--cap-add", "CAP_SETPCAP"] if _bounded_by_hand() else [])]
    return ["--userns", str(parent), "--pidns", str(pid), "--userns2", str(user), "--assert-userns-disabled", *caps]


def joined_command(argv: list[str]) -> list[str]:
    """argv as a process that joined namespaces() runs it. As root, bwrap leaves a joining
    process's capability bounding set full (it empties it only in a user namespace it
    makes), and then every exec of uid 0 counts as one that gains capabilities: the
    kernel takes them back (no_new_privs) but clears ADDR_NO_RANDOMIZE on the way, so no
    Wine process kept fixed_layout(). So bwrap keeps CAP_SETPCAP alone (join_args) and
    setpriv empties the bounding set, inheritable and ambient sets before argv: after that
    exec the process has no capability and can get none."""
    if not _bounded_by_hand():
        return argv
    return [_SETPRIV, "--bounding-set", "-all", "--inh-caps", "-all", "--ambient-caps", "-all", *argv]


_SETPRIV = shutil.which("setpriv") or "setpriv"


def _bounded_by_hand() -> bool:
    return os.geteuid() == 0


@functools.cache
def fixed_layout() -> list[str]:
    """`setarch -R` (personality ADDR_NO_RANDOMIZE, inherited by every process Wine
    starts from it), or [] where this machine refuses that personality (a container's
    seccomp profile may): the module's docstring says why. Exec'd, like `nice`."""
    exe = shutil.which("setarch")
    try:
        ok = bool(exe) and subprocess.run([exe, "-R", "true"], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                          stderr=subprocess.DEVNULL, timeout=10).returncode == 0
    except (OSError, subprocess.SubprocessError):
        ok = False
    return [exe, "-R"] if ok else []


def command_name(pid: int) -> str:
    """A process's command name (/proc/PID/comm: anyone may read it, in any namespace)."""
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return ""


def prefix_writable(prefix: Path) -> list[str]:
    """What a sandboxed Windows game may write of its prefix: the user profiles
    (C:\\users: its temporary files, AppData) and nothing else. The rest (C:\\windows,
    system32, the registry files) stays as it was for the next run's games."""
    users = prefix / "drive_c" / "users"
    return [str(users)] if users.is_dir() else []


def server_dirs(prefix: Path, tmp: str) -> list[str]:
    """Where the prefix's wineserver keeps its socket and mappings: Debian's Wine names a
    folder of $TMPDIR in the prefix's `wineserver` file, upstream Wine /tmp/.wine-<uid>
    (made here, so that a confined server can bind it before it exists)."""
    try:
        where = os.path.join(tmp, (prefix / "wineserver").read_text().strip())
    except OSError:
        where = os.path.join(tmp, f".wine-{os.getuid()}")
    os.makedirs(where, mode=0o700, exist_ok=True)
    return [where]


GRAPHICS = {"null": "null", "xvfb": "x11"}  # [runtime] display -> Wine's graphics driver


def graphics_driver(prefix: WinePrefix) -> str | None:
    """The prefix's graphics driver as its user.reg says (None: not set, Wine's default
    "mac,x11", which fails without a display). The file is up to date here: the last
    run's wineserver wrote it when it ended."""
    try:
        text = (prefix.path / "user.reg").read_text(errors="replace")
    except OSError:
        return None
    at = text.find("[Software\\\\Wine\\\\Drivers]")
    if at < 0:
        return None
    section = text[at:].split("\n\n", 1)[0]
    for line in section.splitlines():
        if line.startswith('"Graphics"="'):
            return line[len('"Graphics"="'):].rstrip('"')
    return None


def acquire_running_prefix(cfg: WineConfig) -> WinePrefix:
    """acquire_prefix, then start_services, then check_prefix: for anything that starts
    games one after another (a run, the parity tool, the tests). With no persistent
    wineserver, the server begins its shutdown 3 s after the last game ends (no new
    Windows process from then on) and kills whatever runs 2 s later (exit code 1); the
    next game then boots the prefix again (wineboot, services.exe, winedevice.exe,
    plugplay.exe, svchost.exe). A prefix that cannot start the launcher of a bitness in
    cfg.bits is remade once; a second failure raises WineError with the launcher's output."""
    prefix = acquire_prefix(cfg)
    try:
        start_services(prefix)
        broken = check_prefix(prefix, cfg.bits)
        if broken:
            prefix.kill()
            _boot(prefix)
            start_services(prefix)
            still = check_prefix(prefix, cfg.bits)
            if still:
                raise WineError(f"Wine prefix {prefix.path} cannot run the {still} even after it was made again "
                                f"(first: {broken})")
    except BaseException:
        prefix.kill()
        prefix.release()
        raise
    return prefix


def check_prefix(prefix: WinePrefix, bits: tuple[int, ...]) -> str | None:
    """None when the prefix starts the launcher of each bitness in bits (`w3inject.exe
    --check`: a console program that prints one line and exits); else what failed. A
    bitness whose launcher is not built is not checked (preflight refuses an injected
    game without it). The prefix's wineserver runs already (start_services), so a check
    costs one process start."""
    for b in sorted(set(bits)):
        exe = LAUNCHERS.get(b)
        if exe is None or not exe.exists():
            continue
        cmd = prefix.command(str(exe), ["--check"])
        try:
            out = prefix.run(cmd, capture_output=True, text=True, errors="replace", timeout=CHECK_TIMEOUT_S,
                             stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            return f"{b}-bit launcher: {exe} --check took over {CHECK_TIMEOUT_S:.0f} s"
        except OSError as e:
            return f"{b}-bit launcher: cannot run {cmd[0]}: {e}"
        if out.returncode != 0 or "w3inject --check: ok" not in out.stdout:
            tail = " ".join((out.stdout + out.stderr).split())[-300:]
            return f"{b}-bit launcher: {exe} --check exited {out.returncode}: {tail or 'no output'}"
    return None


def processes_with_env(key: str, value: str) -> list[int]:
    """Pids of live processes (zombies excluded) with key=value in their environment."""
    return procs.with_env(key, value)
