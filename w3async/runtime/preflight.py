"""Checks against the machine and the file system, run before a run creates anything.

recipes/load.py checks what a recipe says; this module checks that this machine can do it:
the game binaries (there, a file, executable), the inference device (torch sees it),
the folders a run writes (the runs folder, the run folder, Wine's cache: each can be
written, with space left), and the resources that follow from the recipe's sizes (the
table against /dev/shm and memory, the game processes against the CPU, process and
open-file limits). Every check returns a list of problems, each naming the key and
the value and, where a limit was hit, the limit; `preflight()` runs them all.

Nothing here creates anything that outlives it: a folder is probed by writing and
removing one file in it (or in its nearest existing parent, when it does not exist yet).
"""

from __future__ import annotations

import errno
import json
import os
import resource
import stat
import tempfile
from pathlib import Path

from w3async import games
from w3async.run_folder import RunFolder
from w3async.runtime import inject_checks, sandbox
from w3async.sync import layout
from w3async.sync.gather import c_extension_problem
from w3async.recipes import Recipe

GAMES_PER_CORE = 64
"""Game processes at most per CPU core: beyond it the games starve the supervisor (and a
recipe wants more lanes per process, not more processes)."""
FDS_PER_GAME = 4
"""File descriptors the supervisor holds per game: its act doorbell, its pidfd, and the
pipes and log file while it starts."""
FD_RESERVE = 256
"""File descriptors kept for the supervisor itself: the status server's clients, the
logs, torch, Wine."""
PROCS_PER_WINE_RUNTIME = 8
"""Wine's own processes (wineserver, services.exe, winedevice.exe, explorer.exe, ...)."""
MIN_FREE_BYTES = 64 << 20
"""Free space the run folder's file system must have at start (logs, checkpoints)."""
PROBE_BYTES = 4096
RUN_FILES = RunFolder.FILES
RUN_FOLDERS = RunFolder.FOLDERS
"""What a run writes in its folder (supervisor.py, training.py): in a folder that is
resumed, none of them may be in the way (a folder where a file goes, or the reverse)."""
SHM_DIR = "/dev/shm"


def _mib(n: float) -> str:
    return f"{n / (1 << 20):,.1f} MiB" if n < (1 << 30) else f"{n / (1 << 30):,.1f} GiB"


# ---- binaries -------------------------------------------------------------------------


def check_binaries(recipe: Recipe) -> list[str]:
    """Problems with the recipe's game binaries, each naming the group, the value and the
    path: missing, a folder, not a regular file, not executable (native), not a Linux
    executable or script (native), not a Windows .exe (wine)."""
    problems = []
    for i, g in enumerate(recipe.games):
        key = f"games[{i}].binary = {g.binary!r}"
        p = recipe.binary_path(g)
        try:
            st = p.stat()
        except FileNotFoundError:
            problems.append(f"{key}: {p} does not exist (run `make build`, or fix the path)")
            continue
        except (OSError, ValueError) as e:
            problems.append(f"{key}: {p} cannot be read ({getattr(e, 'strerror', None) or e})")
            continue
        if stat.S_ISDIR(st.st_mode):
            problems.append(f"{key}: {p} is a folder, not a game binary")
            continue
        if not stat.S_ISREG(st.st_mode):
            problems.append(f"{key}: {p} is not a regular file")
            continue
        try:
            with open(p, "rb") as f:
                magic = f.read(4)
        except OSError as e:
            problems.append(f"{key}: {p} cannot be read ({e.strerror})")
            continue
        if g.runtime == "native":
            if not os.access(p, os.X_OK):
                problems.append(f"{key}: {p} is not executable (chmod +x)")
            elif magic != b"\x7fELF" and not magic.startswith(b"#!"):
                problems.append(f"{key}: {p} is not a Linux executable (no ELF header, no #! line)")
        else:
            if p.suffix.lower() != ".exe":
                problems.append(f"{key}: {p} is not a Windows .exe (runtime = \"wine\")")
            elif not magic.startswith(b"MZ"):
                problems.append(f"{key}: {p} is not a Windows executable (no MZ header)")
    return problems


# ---- build ----------------------------------------------------------------------------


def check_build(recipe: Recipe) -> list[str]:
    """supervisor.gather = 'c' needs the C gatherer built against this layout (make setup)."""
    if recipe.supervisor.gather != "c":
        return []
    problem = c_extension_problem()
    return [f"supervisor.gather = 'c': {problem}"] if problem else []


# ---- device ---------------------------------------------------------------------------


def check_device(recipe: Recipe) -> list[str]:
    """inference.device: 'cpu', or a CUDA device that torch sees here (torch is imported
    only for a device other than 'cpu')."""
    dev = recipe.inference.device
    if dev == "cpu":
        return []
    key = f"inference.device = {dev!r}"
    try:
        import torch  # noqa: PLC0415
    except ImportError as e:
        return [f"{key}: torch cannot be imported ({e}); use 'cpu'"]
    if not torch.cuda.is_available():
        build = f"CUDA {torch.version.cuda}" if torch.version.cuda else "a CPU-only build"
        return [f"{key}: torch {torch.__version__} ({build}) sees no CUDA device on this machine; use 'cpu'"]
    index = int(dev.split(":", 1)[1]) if ":" in dev else 0
    n = torch.cuda.device_count()
    if index >= n:
        return [f"{key}: this machine has {n} CUDA device(s) (cuda:0 .. cuda:{n - 1})"]
    return []


# ---- folders --------------------------------------------------------------------------


def _nearest_existing(path: Path) -> tuple[Path, str | None]:
    """The path itself or its nearest parent that exists, if a folder; or a problem (a
    file where a folder is expected, a part that cannot be read)."""
    for p in (path, *path.parents):
        try:
            st = os.stat(p)
        except (FileNotFoundError, NotADirectoryError):
            continue
        except OSError as e:
            return p, f"{p} cannot be read ({e.strerror})"
        if not stat.S_ISDIR(st.st_mode):
            return p, f"{p} is a file, not a folder"
        return p, None
    return path, f"no part of {path} exists"


def probe_folder(path: str | os.PathLike) -> str | None:
    """Can a run write in this folder (or, where it does not exist yet, create it)? None,
    or why not: a file where a folder is expected, a file system that refuses a write
    (read-only, no permission, full), too little free space. Writes one small file in the
    folder or in its nearest existing parent, and removes it."""
    path = Path(path)
    if "\0" in str(path):
        return f"{str(path)!r} contains a NUL character"
    base, problem = _nearest_existing(Path(os.path.abspath(path)))
    if problem:
        return problem
    try:
        fd, probe = tempfile.mkstemp(prefix=".w3async-probe-", dir=base)
    except OSError as e:
        return f"cannot write in {base} ({_why(e)})"
    try:
        try:
            os.write(fd, b"\0" * PROBE_BYTES)
            os.fsync(fd)
        finally:
            os.close(fd)
            os.unlink(probe)
    except OSError as e:
        return f"cannot write in {base} ({_why(e)})"
    try:
        vfs = os.statvfs(base)
    except OSError:
        return None
    free = vfs.f_bavail * vfs.f_frsize
    if free < MIN_FREE_BYTES:
        return f"only {_mib(free)} free in {base}; a run needs at least {_mib(MIN_FREE_BYTES)}"
    return None


def _why(e: OSError) -> str:
    if e.errno == errno.ENOSPC:
        return "the disk is full"
    if e.errno == errno.EROFS:
        return "a read-only file system"
    return e.strerror or str(e)


def check_folders(recipe: Recipe, run_dir: Path, runs_dir: Path | None = None) -> list[str]:
    """The run folder (an existing one is resumed: it must be a writable folder; a new
    one, the runs folder it goes in), and Wine's cache folder where a group runs under
    Wine or runtime.cache_dir is set."""
    problems = []
    run_dir = Path(run_dir)
    runs_dir = Path(runs_dir) if runs_dir is not None else run_dir.parent
    # An existing run folder (a resume) must be writable itself; a new one is made in the
    # runs folder (or the nearest part of it that exists): the probe goes there.
    why = probe_folder(run_dir)
    if why:
        key = f"run folder {str(run_dir)!r}" if os.path.lexists(run_dir) else f"--runs-dir {str(runs_dir)!r}"
        problems.append(f"{key}: {why}")
    elif os.path.isdir(run_dir):
        for name in RUN_FILES + RUN_FOLDERS:
            p = run_dir / name
            if os.path.lexists(p) and os.path.isdir(p) != (name in RUN_FOLDERS):
                problems.append(f"run folder '{run_dir}': {p} is a {'folder' if os.path.isdir(p) else 'file'}, "
                                f"where the run keeps a {'folder' if name in RUN_FOLDERS else 'file'}")
        problems += check_resume(recipe, run_dir)
    if recipe.runtime.cache_dir or any(g.runtime == "wine" for g in recipe.games):
        from w3async.runtime.wine import WineConfig, cache_root  # noqa: PLC0415

        where = cache_root(WineConfig(cache_dir=recipe.runtime.cache_dir or None))
        why = probe_folder(where)
        if why:
            key = (f"runtime.cache_dir = {recipe.runtime.cache_dir!r}" if recipe.runtime.cache_dir
                   else "Wine's cache ($W3ASYNC_CACHE or ~/.cache/w3async; set runtime.cache_dir)")
            problems.append(f"{key}: {where}: {why}")
    return problems


def check_resume(recipe: Recipe, run_dir: Path) -> list[str]:
    """A run folder is continued by a recipe of its game, and a training run's folder by a
    recipe that trains (policy "network"): another one (a `--run` typed wrong, a recipe mixed up) would append
    its lines to the run's logs and replace its recipe.json. A recipe of another name and
    the same game may continue it (fgself's run under fgself-injected); the checkpoint
    then has to fit its network (learn/resume.py)."""
    try:
        made_by = json.loads(RunFolder(run_dir).recipe.read_text())
    except (OSError, ValueError):
        return []  # a new folder, or one that never got as far as its recipe
    if not isinstance(made_by, dict):
        return []
    was = f"recipe {made_by.get('name')!r} (its recipe.json)"
    if made_by.get("game", "null") != recipe.game:
        return [f"run folder '{run_dir}' holds a run of game {made_by.get('game', 'null')!r}, made by {was}; "
                f"recipe {recipe.name!r} runs game {recipe.game!r}: resume it with a recipe of that game, "
                f"or give this run another --run"]
    ck = RunFolder(run_dir).checkpoints
    trained = ck.is_dir() and any(ck.glob("ckpt-*.pt"))
    if trained and recipe.supervisor.policy != "network":
        return [f"run folder '{run_dir}' holds a training run's checkpoints, made by {was}; recipe "
                f"{recipe.name!r} answers with policy {recipe.supervisor.policy!r}, not a network that trains: "
                f"resume it with a recipe that trains, or give this run another --run"]
    return []


# ---- status server --------------------------------------------------------------------


def check_status(recipe: Recipe) -> list[str]:
    """[status] host and port: resolved and bound once (then closed), as the server will,
    so that a name that does not resolve, an address not on this machine or a port in
    use is found before the run folder is made."""
    st = recipe.status
    if not st.enabled:
        return []
    from w3async.observe.status import StatusError, bind_status  # noqa: PLC0415

    try:
        bind_status(st.host, st.port).close()
    except StatusError as e:
        return [f"status.host = {st.host!r}, status.port = {st.port}: {str(e).removeprefix('status server: ')}"]
    return []


# ---- resources ------------------------------------------------------------------------


def _layout(recipe: Recipe) -> layout.Layout:
    """The recipe's rows' shape: its game's (the default for a game not registered here)."""
    return games.get(recipe.game).spec.layout if recipe.game in games.names() else layout.DEFAULT


def table_bytes(recipe: Recipe) -> int:
    """Shared memory the games' rows take: every row, plus a header page per game and
    one for the table."""
    n_rows = sum(g.count * g.lanes * g.sides for g in recipe.games)
    n_games = sum(g.count for g in recipe.games)
    return n_rows * _layout(recipe).row_size + (n_games + 1) * layout.HEADER_SIZE


def _step_bytes(lay: layout.Layout) -> int:
    """One recorded step of one row in the learner's trajectory buffers (trajectories.py)."""
    return (lay.g_glob * 4 + lay.e_max * lay.f_ent * 4 + lay.e_max * 2
            + lay.n_heads * lay.head_max + lay.n_heads * 4 + 64)


def network_params(recipe: Recipe) -> int:
    """About the parameters of the recipe's network (network.py: embeddings, the blocks'
    attention and feed-forward, pooling, the GRU, the heads); an estimate within a few %."""
    cfg = recipe.network
    if cfg is None:
        return 0
    d = cfg.d_model
    block = 4 * d * d + 2 * cfg.ff_mult * d * d
    lay = _layout(recipe)
    params = cfg.n_layers * block + 2 * d * d + (lay.f_ent + lay.g_glob + 64) * d
    params += (6 * d * d if cfg.gru else 0) + (lay.n_heads * lay.head_max + 2) * d + 2 * d * d
    return params


def memory_bytes(recipe: Recipe) -> int:
    """Memory the recipe's sizes take in the supervisor: the table, and with a network the
    trajectory buffers (seq_len + 1 steps per row) and the networks (one per inference
    slot, the learner's with its gradients and Adam's two moments)."""
    need = table_bytes(recipe)
    if recipe.supervisor.policy == "network" and recipe.trajectories is not None:
        n_rows = sum(g.count * g.lanes * g.sides for g in recipe.games)
        need += n_rows * (recipe.trajectories.seq_len + 1) * _step_bytes(_layout(recipe))
        need += network_params(recipe) * 4 * (recipe.inference.n_nets + 4)
    return need


def _mem_available() -> int | None:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def _read_int(path: str) -> int | None:
    try:
        with open(path) as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _tasks_now() -> int:
    try:
        return sum(1 for n in os.listdir("/proc") if n.isdigit())
    except OSError:
        return 0


def game_limit() -> tuple[int, str]:
    """The most game processes this machine takes, and which limit sets it."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    limits = [(GAMES_PER_CORE * cores, f"{GAMES_PER_CORE} per CPU core, {cores} core(s)")]
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY:
        limits.append((max(0, (soft - FD_RESERVE) // FDS_PER_GAME),
                       f"open files: ulimit -n is {soft}, {FDS_PER_GAME} per game and {FD_RESERVE} kept"))
    soft, _hard = resource.getrlimit(resource.RLIMIT_NPROC)
    now = _tasks_now()
    if soft != resource.RLIM_INFINITY and os.geteuid() != 0:
        limits.append((max(0, soft - now), f"processes: ulimit -u is {soft}, about {now} running"))
    for path, what in (("/proc/sys/kernel/pid_max", "pid_max"), ("/proc/sys/kernel/threads-max", "threads-max")):
        v = _read_int(path)
        if v:
            limits.append((max(0, v - now), f"processes: kernel {what} is {v}, {now} running"))
    return min(limits, key=lambda x: x[0])


def check_resources(recipe: Recipe) -> list[str]:
    """The sizes a recipe asks for against this machine: the table against /dev/shm's
    free space and the memory available, the game processes against game_limit()."""
    problems = []
    groups = "; ".join(f"games[{i}]: count = {g.count}, lanes = {g.lanes}, sides = {g.sides}"
                       for i, g in enumerate(recipe.games))
    n_rows = sum(g.count * g.lanes * g.sides for g in recipe.games)
    table = table_bytes(recipe)
    try:
        vfs = os.statvfs(SHM_DIR)
        shm_free = vfs.f_bavail * vfs.f_frsize
    except OSError:
        shm_free = None
    if shm_free is not None and table > shm_free:
        problems.append(f"games: the table needs {_mib(table)} ({n_rows:,} rows of {_layout(recipe).row_size:,} bytes; "
                        f"{groups}) but {SHM_DIR} has {_mib(shm_free)} free: lower games.count or games.lanes")
    mem = memory_bytes(recipe)
    avail = _mem_available()
    if avail is not None and mem > avail:
        net = ""
        if recipe.supervisor.policy == "network" and recipe.network is not None:
            n = recipe.network
            net = (f"; the networks: network.d_model = {n.d_model}, network.n_layers = {n.n_layers}, "
                   f"network.ff_mult = {n.ff_mult}, inference.n_nets = {recipe.inference.n_nets}, "
                   f"trajectories.seq_len = {recipe.trajectories.seq_len}")
        problems.append(f"games: the run needs {_mib(mem)} of memory ({n_rows:,} rows; {groups}{net}) but "
                        f"{_mib(avail)} is available: lower games.count, games.lanes or the network's sizes")
    n_games = sum(g.count for g in recipe.games)
    n_procs = n_games + (PROCS_PER_WINE_RUNTIME if any(g.runtime == "wine" for g in recipe.games) else 0)
    limit, why = game_limit()
    if n_procs > limit:
        counts = ", ".join(f"games[{i}].count = {g.count}" for i, g in enumerate(recipe.games))
        problems.append(f"games: {n_games:,} game processes ({counts}) are more than this machine takes: "
                        f"{limit:,} ({why}); lower games.count, or raise games.lanes instead")
    return problems


# ---- all ------------------------------------------------------------------------------


def preflight(recipe: Recipe, run_dir: Path, runs_dir: Path | None = None) -> list[str]:
    """Every check above: the problems, all of them, or [] when the run may start."""
    return (check_binaries(recipe) + inject_checks.check(recipe) + check_build(recipe) + check_device(recipe)
            + check_folders(recipe, run_dir, runs_dir)
            + check_status(recipe) + check_resources(recipe) + sandbox.check(recipe.supervisor.sandbox))
