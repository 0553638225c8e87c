"""The game keeper: the game processes of a run's slots, from spawn to exit.

It starts a slot's game on a fresh segment with new doorbells, hears its exit (a pidfd
on the loop), kills a misbehaving one, ends everything a game left running (its process
group, and any process carrying its segment's name), restarts by the restart policy
(runtime/slots.py) or fails the slot, and watches for hangs. It is given what it uses
(its constructor): the run's context (recipe, folder, events, loop, life, fault barrier),
the table and its gatherer, the slots, the runtimes, the sandbox, the run lock and
RunControl (a reset's tickets go stale).
"""

from __future__ import annotations

import asyncio
import collections
import errno
import os
import signal
import time
from typing import Callable

from w3async.observe.logs import console
from w3async.runtime import gamelog, procs
from w3async.runtime.answerer import RunControl
from w3async.runtime.life import RunContext
from w3async.runtime.limits import Limits
from w3async.runtime.runfolder import RunLock
from w3async.runtime.sandbox import Sandbox, disk_problem, writable
from w3async.runtime.gamestart import launch
from w3async.runtime.slots import Slot, SlotState, decide_restart
from w3async.runtime.wine import WineError, windows_path, wine_own
from w3async.sync import layout
from w3async.sync.table import Table

STARTING, RUNNING, RESTARTING, FAILED, STOPPED = (SlotState.STARTING, SlotState.RUNNING, SlotState.RESTARTING,
                                                 SlotState.FAILED, SlotState.STOPPED)

# A start that failed for lack of a resource is retried; anything else would fail again.
_TRANSIENT_ERRNOS = {errno.EMFILE, errno.ENFILE, errno.EAGAIN, errno.ENOMEM, errno.ENOSPC, errno.EINTR, errno.EBUSY}
# Exit codes with a cause of their own (an injected game's launcher, hook and adapter; a
# Windows game's unhandled exception, which Wine would pass on as its code's low byte).
_EXIT_CAUSES = {layout.EXIT_INJECT: "inject", layout.EXIT_ADAPTER: "adapter", layout.EXIT_KILLED: "crash",
                layout.EXIT_CRASH: "crash", layout.EXIT_NO_STEP: "inject", layout.EXIT_MSGBOX: "message_box"}


class GameKeeper:
    """Spawns, hears, kills, restarts and watches a run's game slots. `born`: every
    process of the run starts after it (procs.started); `schedule_round`: the
    supervisor's, run by the watch when a doorbell may have been lost."""

    def __init__(self, ctx: RunContext, *, table: Table, gatherer, slots: list[Slot], runtimes: dict,
                 control: RunControl, sandbox: Sandbox | None, lock: RunLock, born: float,
                 schedule_round: Callable[[], None], limits: Limits | None = None):
        self.ctx, self.table, self.gatherer, self.slots, self.runtimes = ctx, table, gatherer, slots, runtimes
        self.control, self.sandbox, self.lock, self.born = control, sandbox, lock, born
        self.limits = limits  # the games' cgroups and OOM score (runtime/limits.py)
        self._writable: dict[int, list[str]] = {}  # id(group) -> its writable folders (check_disk)
        self._schedule_round = schedule_round
        self.groups: set[int] = set()  # every game's process group this run started

    def spawn(self, s: Slot) -> None:
        """Start slot s on freshly zeroed rows with new doorbells."""
        s.restart_handle = None
        if self.ctx.life.stopping:
            return
        try:
            segment = self.table.renew(s.index)  # fresh rows and header: nothing of the last start
            s.bells = s.runtime.doorbells(self.ctx.run_dir, s.index)
        except OSError as e:
            self._start_failed(s, f"cannot make its rows or doorbells: {e}", e)
            return
        # "{run_dir}" in a value becomes the run folder (e.g. where to record replays);
        # "{run_dir_windows}" the same as Wine's Z: path.
        env = {k: v.replace("{run_dir}", str(self.ctx.run_dir.resolve()))
                   .replace("{run_dir_windows}", windows_path(self.ctx.run_dir.resolve()))
               for k, v in s.group.env.items()}
        env.update(W3S_ROW0=str(s.row0), W3S_NROWS=str(s.nrows), W3S_LANES=str(s.group.lanes),
                   W3S_SIDES=str(s.group.sides), W3S_SLOT=str(s.index),
                   W3S_ROW_SHAPE=" ".join(map(str, self.table.layout.shape)),
                   W3S_SEED=str(s.index * 1000003 + s.starts if s.seed is None else s.seed))
        s.seed = None  # a seed given for a start (an env's reset(seed=)) is for that start only
        sandbox = self.sandbox
        wrap = (lambda start: sandbox.wrap(start, s.group)) if sandbox is not None else None
        try:
            prefix = self._limits_for(s)
            with gamelog.open_for_start(s.log_path, s.starts) as log:
                start = s.runtime.start(s, env, segment)
                s.proc = launch(start, s.group.nice, log, wrap, prefix)
        except (OSError, WineError) as e:
            s.bells.close()
            s.bells = None
            self._start_failed(s, f"cannot start {s.binary}: {e}", e)
            return
        s.starts += 1
        s.state = STARTING
        s.started_at = s.progress_at = time.monotonic()
        s.seq_sum = 0
        s.posted = s.stepped = False
        s.segment = segment.name
        s.marker = start.marker
        s.sandboxed = wrap is not None
        s.game_pid = 0
        s.game_gone_at = 0.0
        s.born = procs.started(s.proc.pid)  # what it starts, it starts after this
        self.groups.add(s.proc.pid)
        s.pidfd = os.pidfd_open(s.proc.pid)
        self.ctx.loop.add_reader(s.pidfd, self.ctx.barrier, "game_exit", self._on_exit, s)
        with self.control.lock:
            self.gatherer.attach_game(s.index, s.rows, s.bells.act)
        self._record_pgids()
        self.ctx.events.info("game_start", slot=s.index, pid=s.proc.pid, runtime=s.runtime.name, binary=str(s.binary),
                             rows=[s.row0, s.row0 + s.nrows], start=s.starts, sandboxed=wrap is not None)

    def _limits_for(self, s: Slot) -> list[str]:
        """The command prefix that puts slot s's next start in a cgroup of its own, capped
        (limits.py); [] without limits. OSError where the cgroup cannot be made."""
        if self.limits is None:
            return []
        sv = self.ctx.recipe.supervisor
        prefix, s.cgroup = self.limits.start(f"slot-{s.index}", sv.game_max_procs, s.group.max_rss_mb,
                                             sv.file_cap_mb)
        return prefix

    def _record_pgids(self) -> None:
        pg = [s.proc.pid for s in self.slots if s.proc and s.proc.returncode is None]
        self.lock.update(pgids=pg, wine_prefixes=[p for rt in self.runtimes.values() for p in rt.prefixes()])

    def unwire(self, s: Slot) -> None:
        """Stop listening to slot s and stop gathering its rows; its process is gone.
        Under RunControl.lock: an answer on another thread rings no closed doorbell."""
        with self.control.lock:
            self.gatherer.detach_game(s.index)
        if s.pidfd >= 0:
            self.ctx.loop.remove_reader(s.pidfd)
            os.close(s.pidfd)
            s.pidfd = -1
        self._end_strays(s)
        s.cgroup = None  # (the slot's cgroup stays for its next start: limits.py)
        with self.control.lock:
            if s.bells:
                s.bells.close()
                s.bells = None
            self.table.reset_rows(s.row0, s.row0 + s.nrows)
            self.control.rows_reset(s.rows)  # a round in flight for them is stale

    def _note_posted(self, s: Slot) -> None:
        """Did this start post any row, and step past its first answer (a second post)?
        Read before its rows are reset: a game that crashes between two watch ticks
        still counts as one that ran."""
        seqs = self.table.column("obs_seq")[s.rows]
        if not s.posted and int(seqs.sum()) > 0:
            s.posted, s.ever_posted, s.fail_streak = True, True, 0
        s.stepped = int(seqs.max(initial=0)) > 1

    def cap_logs(self) -> None:
        """Cut every game's log that passed the recipe's game_log_mb (the watch, twice a
        second, and the shutdown, once its games are gone)."""
        cap = int(self.ctx.recipe.supervisor.game_log_mb * 2**20)
        for s in self.slots:
            cut = gamelog.cap(s.log_path, cap)
            if cut and not s.log_cut:  # said once a slot: a flooding game would fill events.jsonl too
                self.ctx.events.warning("game_log_cut", slot=s.index, path=str(s.log_path), cut_bytes=cut,
                                        max_bytes=cap)
            s.log_cut += cut

    def _end_strays(self, s: Slot) -> None:
        """End what the slot's game left running: its process group, and any process
        that carries this start's segment in its environment, its own session or not (a
        native game's helpers; an injected game, which Wine starts outside the
        launcher's process group), or that still maps its segment (a helper that
        scrubbed its environment). Wine's own processes are the prefix's and end with
        the run."""
        if s.proc is None:
            return
        procs.killpg(s.proc.pid, signal.SIGKILL)
        if s.segment:
            procs.end_marked(s.marker, procs.maps_pattern("/dev/shm/" + s.segment[1:]), since=s.born,
                             spare=wine_own)

    def _on_exit(self, s: Slot) -> None:
        """The slot's process exited (its pidfd is readable)."""
        code = s.proc.wait()
        if s.sandboxed and 128 < code < 128 + signal.NSIG:  # bwrap says a game's death by signal N as 128 + N
            code = 128 - code
        tail = gamelog.tail(s.log_path)
        over = self.limits.hit(s.cgroup) if self.limits is not None else None  # before unwire clears it
        self._note_posted(s)
        self.unwire(s)
        if self.ctx.life.stopping:
            return
        if code == layout.EXIT_OK and not self.ctx.life.stopping and not self.table.header_intact(s.index):
            cause = "exit"  # it wrote its own header (a forged stop): a failure, not a recycle
        elif over is not None:
            cause = over  # the kernel held its cap (limits.py): "memory", "processes"
        elif code == layout.EXIT_OK:
            cause = "recycle"
        elif code == -signal.SIGXFSZ:
            cause = "file_size"  # a file it wrote reached game_file_mb (limits.py)
        elif code < 0:
            cause = "crash"
        elif code in _EXIT_CAUSES:
            cause = _EXIT_CAUSES[code]
        else:
            cause = "exit"
        how = f"signal {signal.Signals(-code).name}" if code < 0 else f"code {code}"
        self.ctx.events.warning("game_exit", slot=s.index, pid=s.proc.pid, returncode=code, cause=cause,
                                posted=s.posted, up_s=round(time.monotonic() - s.started_at, 3), stderr=tail)
        if self._deterministic(s, code):
            self.fail_slot(s, f"{s.binary} {layout.EXIT_NAMES[code]} (exit {code}): {tail}")
            return
        if not s.posted:  # exit 0 included: a game that ends before its first post is failing
            s.fail_streak += 1
            if s.fail_streak >= self.ctx.recipe.supervisor.max_start_failures:
                self.fail_slot(s, f"{s.binary} exited before its first post {s.fail_streak} times in a row, "
                                   f"last with {how}: {tail}")
                return
        self.schedule_restart(s, cause, how, tail)

    @staticmethod
    def _deterministic(s: Slot, code: int) -> bool:
        """Would a restart of slot s fail the same way (its start ended with code)? A
        table it cannot map or a doorbell it cannot attach, always. A step point never
        reached, before the slot's first post: it fails step_deadline_s after its start,
        not after three starts. A message box before the slot's first post, on a second
        start in a row: a game that cannot start, saying why (one box alone may be a
        passing fault: a device that could not be made on a loaded machine). A slot that
        has posted in this run can start: such an end on a later start is restarted,
        counted like any start that ended before its first post (max_start_failures)."""
        if code in (layout.EXIT_LAYOUT, layout.EXIT_ATTACH):
            return True
        if s.ever_posted:  # (set with posted: this start's post counts)
            return False
        return code == layout.EXIT_NO_STEP or (code == layout.EXIT_MSGBOX and s.fail_streak >= 1)

    def restart_after_fault(self, s: Slot) -> None:
        """A fault of ours concerned slot s: its game is ended and restarted from scratch."""
        if s.proc is not None and s.proc.poll() is None:
            procs.killpg(s.proc.pid, signal.SIGKILL)
            s.proc.wait()
        if s.pidfd >= 0 or s.bells is not None:
            self.unwire(s)
        if s.state not in (FAILED, STOPPED) and s.restart_handle is None:
            self.schedule_restart(s, "fault")

    def bad_rows(self, bad) -> None:
        """Log each bad row of a gather with its game, lane and field; restart its game."""
        seen = set()
        games = [int(self.gatherer.row_game[r.row]) for r in bad]  # before a kill detaches a game's rows
        for r, gi in zip(bad, games):
            row = self.table.rows[r.row]
            self.ctx.events.error("bad_row", slot=gi, row=r.row, lane=int(row["lane"]), side=int(row["side"]),
                                  field=r.field, index=r.index, value=repr(r.value))
            if gi >= 0 and gi not in seen:
                seen.add(gi)
                self.kill(self.slots[gi], "bad_row", {"field": r.field, "row": r.row})

    def kill(self, s: Slot, cause: str, detail: dict) -> None:
        """End a misbehaving game at once (no grace) and restart it."""
        if s.proc is None or s.proc.returncode is not None or s.state in (FAILED, STOPPED):
            return
        self._end(s, cause, detail)
        if cause == "hang" and not s.posted:
            s.fail_streak += 1
            if s.fail_streak >= self.ctx.recipe.supervisor.max_start_failures:
                self.fail_slot(s, f"{s.binary} posted nothing within start_timeout_s, {s.fail_streak} starts in a row")
                return
        self.schedule_restart(s, cause, str(detail.get("field", "")))

    def schedule_restart(self, s: Slot, cause: str, how: str = "", tail: str = "") -> None:
        """Restart slot s after its backoff, within its restart budget. A recycle (exit
        0) of a start that posted restarts at once and is not counted, whatever its
        uptime. Every other restart (an exit 0 before any post included) is counted in
        the budget (restart_budget in restart_window_s) and backs off, doubling per
        short-lived start in a row; a slot over its budget is marked failed."""
        d = decide_restart(s, cause, time.monotonic(), self.ctx.recipe.supervisor, how)
        if d.fail:
            self.fail_slot(s, f"{d.fail}: {tail}" if tail else d.fail)
            return
        delay = d.delay_s
        s.state = RESTARTING
        self.ctx.events.info("game_restart", slot=s.index, cause=cause, delay_s=round(delay, 3), restarts=s.restarts,
                             recycles=s.recycles)
        s.restart_handle = self.ctx.loop.call_later(delay, self.ctx.barrier, "spawn", self.spawn, s)

    def _start_failed(self, s: Slot, why: str, e: BaseException) -> None:
        """A start that failed before the game ran: a missing or wrong binary fails the
        slot at once; a lack of resources (no fd, no memory, a full /dev/shm) is retried
        after the backoff, inside the budget."""
        if isinstance(e, OSError) and e.errno in _TRANSIENT_ERRNOS:
            self.ctx.events.warning("game_start_failed", slot=s.index, reason=why)
            s.posted, s.started_at = False, time.monotonic()
            self.schedule_restart(s, "start_error")
            return
        self.fail_slot(s, why)

    def fail_slot(self, s: Slot, why: str) -> None:
        if s.restart_handle:
            s.restart_handle.cancel()
            s.restart_handle = None
        s.state = FAILED
        self.ctx.events.error("slot_failed", slot=s.index, reason=why)
        console(f"w3async: game slot {s.index} failed: {why}")
        if all(x.state == FAILED for x in self.slots):
            self.ctx.life.fail(f"every game slot failed; the last: slot {s.index}: {why}")

    async def watch(self) -> None:
        """Twice a second: find games that posted nothing for too long, cut logs past their
        cap, and run a round."""
        sv = self.ctx.recipe.supervisor
        obs, act = self.table.column("obs_seq"), self.gatherer.acked  # our act_seq, not the game's
        ticks = 0
        while not self.ctx.life.stopping:
            await asyncio.sleep(0.5)
            self.cap_logs()
            # Rounds run when a doorbell rings; a ring can be lost to a game (a Windows game
            # can open the shared obs FIFO and read it). A round now bounds such a loss to
            # half a second instead of leaving the rows waiting for good.
            self._schedule_round()
            ticks += 1
            if ticks % 4 == 0:  # every 2 s: a walk of the writable folders is not free
                self.check_disk()
            now = time.monotonic()
            for s in self.slots:
                if s.state not in (STARTING, RUNNING) or s.proc is None:
                    continue
                over = self.limits.hit(s.cgroup) if self.limits is not None else None
                if over is not None:  # a fork refused, a process the kernel ended: recycled, blamed
                    self.kill(s, over, {"cgroup": str(next(iter(s.cgroup.dirs.values())))})
                    continue
                seq = int(obs[s.rows].sum())
                if seq != s.seq_sum:
                    s.seq_sum, s.progress_at = seq, now
                    if not s.posted:
                        s.posted, s.ever_posted, s.state, s.fail_streak = True, True, RUNNING, 0
                    continue
                answered = bool((obs[s.rows] == act[s.rows]).all())  # a game rewriting obs_seq hangs itself
                idle = now - s.progress_at
                if not s.posted and idle > sv.start_timeout_s:
                    self.kill(s, "hang", {"phase": "start", "idle_s": round(idle, 1)})
                elif s.posted and answered and idle > sv.hang_timeout_s:
                    self.kill(s, "hang", {"phase": "step", "idle_s": round(idle, 1)})
                elif s.posted and answered and idle > 1.0 and s.runtime.game_lost(s):
                    # Wine's launcher may miss its game's death (a SIGKILL): end the start now
                    self.kill(s, "crash", {"phase": "step", "idle_s": round(idle, 1),
                                           "reason": "the injected game ended and its launcher did not see it"})

    def check_disk(self) -> None:
        """Fail the slots of a group whose writable folders hold more than its max_disk_mb,
        or whose file system has less free than supervisor.disk_reserve_mb: a game must
        not fill the disk the run's checkpoints are written to."""
        reserve = self.ctx.recipe.supervisor.disk_reserve_mb * 2**20
        for slots in self._groups().values():
            group = slots[0].group
            folders = self._writable.setdefault(id(group), writable(group, self.ctx.run_dir))
            why = disk_problem(folders, group.max_disk_mb * 2**20, reserve)
            if why:
                for s in slots:
                    self.fail_for(s, "disk", f"{s.binary}: {why}")

    def _groups(self) -> dict[int, list[Slot]]:
        """The slots still in the run of each group that may write folders, by id(group)."""
        out: dict[int, list[Slot]] = {}
        for s in self.slots:
            if s.state not in (FAILED, STOPPED) and (s.group.writable or s.group.env):
                out.setdefault(id(s.group), []).append(s)
        return out

    def fail_for(self, s: Slot, cause: str, why: str) -> None:
        """End slot s's game at once and fail the slot with cause (not restarted)."""
        if s.proc is not None and s.proc.returncode is None:
            self._end(s, cause, {"reason": why})
        s.causes[cause] += 1
        self.fail_slot(s, why)

    def _end(self, s: Slot, cause: str, detail: dict) -> None:
        """SIGKILL slot s's live game (said as game_kill) and unwire it."""
        self.ctx.events.warning("game_kill", slot=s.index, pid=s.proc.pid, cause=cause, **detail)
        procs.killpg(s.proc.pid, signal.SIGKILL)
        s.proc.wait()
        self._note_posted(s)
        self.unwire(s)

    def summary(self) -> str:
        states = collections.Counter(s.state for s in self.slots)
        restarts = sum(s.restarts for s in self.slots)
        return (f"{states[RUNNING] + states[STARTING]} games up, {states[RESTARTING]} restarting, "
                f"{states[FAILED]} failed | {restarts} restarts")

    def _run_marker(self) -> bytes:
        """What every game process of this run carries in its environment (native:
        W3S_SHM, Wine: W3S_SHM_PATH): the table's name, unique to the run."""
        return self.table.name.lstrip("/").encode()

    def _run_maps(self):
        """What /proc/PID/maps shows of a process that maps any segment of the run."""
        return procs.maps_pattern("/dev/shm/" + self.table.name[1:] + "-", any_suffix=True)

    def end_run_strays(self) -> list[int]:
        """SIGKILL every process still carrying the run's marker or mapping one of its
        segments: a game's helper that left its process group, or a group of an earlier
        start."""
        marker = self._run_marker()
        return procs.end_marked(marker, self._run_maps(), since=self.born) if marker else []

    def leftovers(self) -> dict:
        """Every process of the run still alive: members of any game's process group of
        any start, any process carrying the run's marker or mapping one of its segments,
        the Wine prefixes' processes."""
        marker = self._run_marker()
        grouped = {p for g in self.groups for p in procs.group_members(g) if marker in procs.environ(p)}
        marked = set(procs.marked(marker, self._run_maps(), since=self.born)) if marker else set()
        wine = [p for rt in self.runtimes.values() for p in rt.leftovers()]
        return dict(processes=sorted(grouped | marked), wine=wine)

