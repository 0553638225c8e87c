"""A game slot: one game process's place in the run (its rows, its process, its
history), its states, and the restart policy (the budget and the backoff).

The policy is a pure decision over a slot's history, so the supervisor only acts on it
and the tests can check it without a process (tests/runtime/test_supervisor.py runs it for real).
"""

from __future__ import annotations

import collections
import enum
from dataclasses import dataclass, field
from pathlib import Path

from w3async.observe.run_view import GameView, game_view
from w3async.sync.doorbells import Doorbells


class SlotState(str, enum.Enum):
    """A slot's state, as /status, /games and the events name it."""

    STARTING = "starting"
    RUNNING = "running"
    RESTARTING = "restarting"
    FAILED = "failed"
    STOPPED = "stopped"

    def __str__(self) -> str:  # the plain name in JSON and on the console
        return self.value


@dataclass
class Slot:
    """One game process's place in the run: its rows, its process, its history."""

    index: int
    group: object  # recipes.GameGroup
    runtime: object  # a gamestart.Runtime: native.NativeRuntime, wine.WineRuntime, inject.InjectedRuntime
    binary: Path
    row0: int
    nrows: int
    log_path: Path
    state: SlotState = SlotState.STARTING
    proc: object = None
    pidfd: int = -1
    bells: Doorbells | None = None
    starts: int = 0
    restarts: int = 0  # restarts counted against it: every end but a healthy recycle
    recycles: int = 0  # healthy recycles: exit 0 (host->finish(), an episode quota) after a post
    causes: collections.Counter = field(default_factory=collections.Counter)
    fail_streak: int = 0  # starts in a row that exited before their first post
    stepped: bool = False  # this start posted again after an answer (it took a step)
    same_streak: int = 0  # starts in a row that ended the same way at their first answer (same_failure)
    same_failure: tuple = ()  # (cause, how) of the last such start's end
    started_at: float = 0.0
    progress_at: float = 0.0  # when its rows' sequence numbers last moved
    seq_sum: int = 0
    posted: bool = False  # has this start posted a row yet
    ever_posted: bool = False  # has any start of this slot posted in this run (it can start)
    restart_handle: object = None
    segment: str = ""  # this start's segment: every process the game starts carries its name
    sandboxed: bool = False  # this start runs in a bwrap sandbox (runtime/sandbox.py)
    marker: bytes = b""  # what every process of this start carries in its environment (GameStart.marker)
    game_pid: int = 0  # an injected start's game process (its launcher is proc), once seen
    game_gone_at: float = 0.0  # when the watch first found that game process gone (monotonic; 0: not)
    born: int = 0  # when this start's process started (ticks since boot: runtime/procs.py, started)
    short_streak: int = 0  # starts in a row that lived less than min_uptime_s (the backoff's exponent)
    restart_times: collections.deque = field(default_factory=collections.deque)  # counted in the budget
    log_cut: int = 0  # bytes cut from its log (runtime/gamelog.py), every start together
    cgroup: object = None  # this start's cgroup (runtime/limits.py StartCgroup); None: none here
    seed: int | None = None  # W3S_SEED of its next start only (an env's reset(seed=)); None: a new one each start

    @property
    def rows(self) -> slice:
        return slice(self.row0, self.row0 + self.nrows)

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def view(self, now: float) -> GameView:
        """The slot as /games shows it; now: time.monotonic()."""
        return game_view(self.index, self.group, pid=self.pid, state=self.state, restarts=self.restarts,
                         causes=dict(self.causes), steps=int(self.seq_sum),
                         last_step_age_s=round(now - self.progress_at, 3) if self.progress_at else None)


@dataclass(frozen=True)
class RestartDecision:
    """Restart after delay_s, or (fail set) mark the slot failed with that reason."""

    delay_s: float = 0.0
    fail: str | None = None


ASKED = "env_reset"
"""The cause of a restart the run's caller asked for (an env's reset() ends every game and
starts it again): at once, counted in neither the budget nor the backoff, as a trainer may
reset every few hundred steps."""


def decide_restart(s: Slot, cause: str, now: float, sv, how: str = "") -> RestartDecision:
    """Count a restart of slot s (cause) in its history and decide. `sv` is the recipe's
    [supervisor] section. A recycle (exit 0) of a start that posted is healthy whatever
    its uptime: a game that ends each episode by exiting (host->finish(), an episode
    quota) restarts at once, counted in s.recycles, not in the budget, and its backoff
    starts over (backing it off cost such a game 10x its steps). Every other restart
    (an exit 0 before any post included: a start that cannot get going, a storm) is
    counted in s.restarts and the budget (restart_budget in restart_window_s) and backs
    off, doubling per start in a row that did not post and live min_uptime_s.

    A slot whose starts post and then end the same way (cause and `how`: its exit code
    or signal) before a second post, max_start_failures times in a row, fails with that
    cause: a game that exits at its first answer every start would otherwise restart for
    ever, the backoff keeping it under the budget. (Starts that end before their first
    post have their own count, the keeper's fail_streak.)"""
    s.causes[cause] += 1
    if cause == "recycle" and s.posted:
        s.recycles += 1
        s.short_streak = 0
        return RestartDecision(0.0)
    if cause == ASKED:  # the caller's own reset, however often: no fault of the game's
        s.short_streak = 0
        return RestartDecision(0.0)
    s.restarts += 1
    healthy = s.posted and now - s.started_at >= sv.min_uptime_s
    s.short_streak = 0 if healthy else s.short_streak + 1
    outset = s.posted and not s.stepped  # it never stepped past its first answer
    same = (cause, how) if outset else ()
    s.same_streak = (s.same_streak + 1 if same == s.same_failure else 1) if outset else 0
    s.same_failure = same
    if s.same_streak >= sv.max_start_failures:
        return RestartDecision(fail=f"{s.binary} ended the same way at its first answer {s.same_streak} starts in a "
                                    f"row: cause {cause}" + (f", {how}" if how else ""))
    s.restart_times.append(now)
    while now - s.restart_times[0] > sv.restart_window_s:
        s.restart_times.popleft()
    if len(s.restart_times) > sv.restart_budget:
        top = ", ".join(f"{k} {v}" for k, v in s.causes.most_common(3))
        return RestartDecision(fail=f"{s.binary} needed {len(s.restart_times)} restarts in {sv.restart_window_s:g} s, "
                                    f"over its budget of {sv.restart_budget} (causes so far: {top})")
    return RestartDecision(min(sv.backoff_max_s, sv.backoff_s * 2 ** max(0, s.short_streak - 1)))
