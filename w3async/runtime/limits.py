"""Limits a game cannot get around: a cgroup of its own per game start, and an OOM score
above the supervisor's (docs/security.md, "Limits").

Every start's files are capped too (RLIMIT_FSIZE, `supervisor.game_file_mb`): its log
among them, so that a burst of output stops at that size at the write that reaches it
(the game gets SIGXFSZ: cause `file_size`), not at the watch's next look at the log.

A start's cgroup caps its tasks (processes and threads: `supervisor.game_max_procs`) and,
where its group sets `max_rss_mb`, its memory, what it writes to a tmpfs included (a
sandbox's private /dev/shm and /tmp are memory that no RSS shows). The kernel enforces
both at once: a fork over the cap fails, an allocation over it is ended by the kernel's
OOM killer inside that cgroup only. The keeper reads back which limit a start hit
(`hit`) and blames it by name (`memory`, `processes`).

Each start's processes join their cgroup before the game runs: the start's command is
prefixed by a shell that writes its own pid into the cgroup, raises its OOM score
(`supervisor.game_oom_score_adj`: the kernel ends a game before the supervisor and its
learner), then execs the game. Every process the game makes is born inside.

Where no cgroup can be made (a read-only /sys/fs/cgroup, a cgroup v2 tree whose
controllers are not delegated to us), the OOM score still applies and the run's events
get one `limits_off` warning naming why; the sampled RSS cap (`max_rss_mb`, accounting)
and the sandbox's sized tmpfs still bound a game.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from w3async.procstat import alive

CONTROLLERS = ("pids", "memory")
_RUN_DIR = re.compile(r"w3async-(\d+)-")  # a run's cgroup folder: w3async-<supervisor pid>-<run>

# Raises its OOM score to $1, caps the size of any file it and its children write to $2
# blocks of 512 bytes (POSIX's unit for `ulimit -f`), joins the cgroups named before "--"
# (their cgroup.procs files), then execs the rest: every process of the start is born
# inside.
_JOIN = ('echo "$1" > /proc/self/oom_score_adj; ulimit -f "$2" || exit 125; shift 2; '
         'for f do shift; [ "$f" = -- ] && break; echo $$ > "$f" || exit 125; done; exec "$@"')


def _mounts() -> list[tuple[str, str, set[str]]]:
    """(mount point, fs type, options) of every cgroup file system."""
    out = []
    try:
        with open("/proc/self/mountinfo") as f:
            for line in f:
                left, _, right = line.partition(" - ")
                fstype, _, opts = (right.split() + ["", "", ""])[:3]
                if fstype in ("cgroup", "cgroup2"):
                    out.append((left.split()[4], fstype, set(opts.split(","))))
    except OSError:
        pass
    return out


def _own_paths() -> dict[str, str]:
    """This process's cgroup per v1 controller, and "" for the v2 tree."""
    out = {}
    try:
        with open("/proc/self/cgroup") as f:
            for line in f:
                _, ctrls, path = line.rstrip("\n").split(":", 2)
                for c in (ctrls.split(",") if ctrls else [""]):
                    out[c] = path
    except OSError:
        pass
    return out


@dataclass
class StartCgroup:
    """A slot's cgroup as one start of it found it: a folder per hierarchy (v1: one per
    controller; v2: one), and its event counts when the start began."""

    dirs: dict[str, Path] = field(default_factory=dict)  # controller -> its folder
    base: dict[str, int] = field(default_factory=dict)  # "memory", "processes" -> the count at the start

    def procs_files(self) -> list[str]:
        return [str(d / "cgroup.procs") for d in dict.fromkeys(self.dirs.values())]


def _count(path: Path, key: str) -> int:
    try:
        for line in path.read_text().splitlines():
            k, _, v = line.partition(" ")
            if k == key:
                return int(v)
    except (OSError, ValueError):
        pass
    return 0


def sweep(parent: Path) -> list[str]:
    """Remove the cgroup folders under parent of runs whose supervisor is gone (a SIGKILL
    never reaches close()): w3async-<pid>-* where no process <pid> lives. A folder still
    holding a process stays (rmdir refuses it). Returns the names removed."""
    gone = []
    for d in (parent.iterdir() if parent.is_dir() else []):
        m = _RUN_DIR.match(d.name)
        if m and d.is_dir() and not alive(int(m.group(1))):
            for sub in d.iterdir():
                if sub.is_dir():
                    try:
                        sub.rmdir()
                    except OSError:
                        pass
            try:
                d.rmdir()
                gone.append(d.name)
            except OSError:
                pass
    return gone


class Limits:
    """The run's cgroups: a folder under this process's own cgroup per controller
    (w3async-<pid>-<run>), a slot's inside it, joined by each of its starts. One cgroup a
    slot, not a start: the first process to join a new cgroup cost 5-35 ms more than a
    join of an existing one (measured here, cgroup v1), on every restart. The pid in the
    name is the supervisor's: a later run removes what a killed one left (sweep)."""

    def __init__(self, run: str, oom_score_adj: int):
        self.oom_score_adj = oom_score_adj
        self.bases: dict[str, Path] = {}  # controller -> the run's folder
        self.v2: set[str] = set()  # controllers of the v2 tree
        self.why_off = ""
        self.swept: list[str] = []  # what runs that died left, removed here
        own = _own_paths()
        for c in CONTROLLERS:
            try:
                base = self._base(c, own, run)
            except OSError as e:
                base, self.why_off = None, f"cannot make a cgroup for {c}: {e}"
            if base is not None:
                self.bases[c] = base
            elif not self.why_off:
                self.why_off = f"no {c} cgroup controller this process can use"

    def _base(self, c: str, own: dict[str, str], run: str) -> Path | None:
        for mount, fstype, opts in _mounts():
            if fstype == "cgroup" and c in opts and c in own:
                base = self._made(Path(mount + own[c]), run)
                return base
        for mount, fstype, _ in _mounts():
            if fstype != "cgroup2" or "" not in own:
                continue
            here = Path(mount + own[""])
            if c not in (here / "cgroup.controllers").read_text().split():
                continue
            # v2 lets a cgroup hand a controller to its children only where it holds no
            # process itself (but the root): the run's folder is the one that delegates.
            (here / "cgroup.subtree_control").write_text(f"+{c}")
            base = self._made(here, run)
            (base / "cgroup.subtree_control").write_text(f"+{c}")
            self.v2.add(c)
            return base
        return None

    def _made(self, parent: Path, run: str) -> Path:
        """The run's folder under parent, made, once what dead runs left there is swept."""
        self.swept += sweep(parent)
        base = parent / f"w3async-{os.getpid()}-{run}"
        base.mkdir(exist_ok=True)
        return base

    def start(self, name: str, max_procs: int, max_mem_mb: float, max_file_mb: float) -> tuple[list[str], StartCgroup]:
        """The cgroup `name` (a slot's) with its caps (max_mem_mb 0: none) for a start, and
        the command prefix that puts the start in it (with no controller here: that only
        raises its OOM score and caps its files, max_file_mb: RLIMIT_FSIZE, which the kernel
        holds at each write). OSError where it cannot be made."""
        cg = StartCgroup()
        for c, base in self.bases.items():
            d = cg.dirs[c] = base / name
            d.mkdir(exist_ok=True)
            if c == "pids":
                (d / "pids.max").write_text(str(max_procs))
            elif c == "memory" and max_mem_mb:
                cap = str(int(max_mem_mb * 2**20))
                (d / ("memory.max" if c in self.v2 else "memory.limit_in_bytes")).write_text(cap)
        cg.base = self._counts(cg)  # what an earlier start of the slot hit is not this one's
        blocks = str(max(1, int(max_file_mb * 2**20) // 512))
        return ["sh", "-c", _JOIN, "w3async-limits", str(self.oom_score_adj), blocks, *cg.procs_files(), "--"], cg

    def _counts(self, cg: StartCgroup) -> dict[str, int]:
        mem, pids = cg.dirs.get("memory"), cg.dirs.get("pids")
        return {"memory": _count(mem / ("memory.events" if "memory" in self.v2 else "memory.oom_control"), "oom_kill")
                if mem is not None else 0,
                "processes": _count(pids / "pids.events", "max") if pids is not None else 0}

    def hit(self, cg: StartCgroup | None) -> str | None:
        """Which cap the start hit: "memory" (the kernel ended a process of it), "processes"
        (a fork was refused), None."""
        if cg is None:
            return None
        now = self._counts(cg)
        return next((k for k in ("memory", "processes") if now[k] > cg.base.get(k, 0)), None)

    def remove(self, cg: StartCgroup | None) -> None:
        """Remove a cgroup once its processes are gone (a busy one stays)."""
        for d in (cg.dirs.values() if cg else []):
            try:
                d.rmdir()
            except OSError:
                pass

    def close(self) -> None:
        """Remove the run's cgroups (every start's first)."""
        for base in self.bases.values():
            for d in (base.iterdir() if base.is_dir() else []):
                if d.is_dir():
                    self.remove(StartCgroup({"": d}))
            try:
                base.rmdir()
            except OSError:
                pass

