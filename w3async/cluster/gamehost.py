"""A game host: the supervisor's core for one machine's games, run as a Ray actor.

On its node the host runs a Supervisor of its own for its groups (spawn, restart, the
hang watch, shared memory, doorbells, the C gather and its checks: the untrusted-game
boundary is the same as on one machine), with a `RemoteAnswerer`: each gathered round
is packed (wire.py) into an outbox that the centre (link.py) takes with `poll`, and the
centre's answers come back with `apply`, in the order the centre made them.

Rows a round sent stay held on the host until the centre answers or releases them (a
release without an answer is the learner's back-pressure: they are gathered and sent
again later). Each row has a generation, bumped when its game restarts: an answer or a
release for an older generation was made for the game before, and is dropped.

A host that is not polled for `lost_after_s` stops its games: the centre is gone or
cut off, and a game must not wait on it for ever. The actor runs on Ray's event loop
(an async actor), in a thread that is not the main one: the host's supervisor installs
no signal handlers (Ray's actor machinery ends it, or the centre's stop()).
"""

from __future__ import annotations

import asyncio
import os
import secrets
import time
from pathlib import Path

import numpy as np

from w3async.cluster import wire
from w3async.cluster.sweep import machine_id
from w3async.recipes import recipe_from_dict
from w3async.runtime.answerer import QuietAnswerer, RunControl, Ticket
from w3async.runtime.runfolder import RunError
from w3async.runtime.slots import SlotState
from w3async.runtime.supervisor import Supervisor
from w3async.sync.gather import Batch


class RemoteAnswerer(QuietAnswerer):
    """The host supervisor's Answerer: rounds go to the centre, answers come back."""

    def __init__(self, control: RunControl, host: "GameHost"):
        self.control = control
        self.host = host
        self.sent_at = np.zeros(control.n_rows, np.float64)

    def start(self, loop) -> None:
        pass

    def submit(self, b: Batch) -> None:
        rows = b.rows[: b.n].astype(np.int64)
        ticket = self.control.take(rows)  # held until the centre answers or releases them
        self.sent_at[rows] = time.monotonic()
        self.host.send(wire.pack(b, ticket.gens))

    def rows_reset(self, rows: slice) -> None:
        self.host.send(wire.Reset(rows.start, rows.stop, self.control.generation(rows)))

    def apply(self, ops: list) -> None:
        """The centre's answers and releases, in its order; an op for a row of an older
        generation (its game restarted since) is dropped."""
        c = self.control
        for op in ops:
            match op:
                case wire.Restart():  # the centre lost this host for a while
                    self.host.restart_games()
                case wire.Answer():
                    ticket = Ticket(np.asarray(op.rows, np.int64), np.asarray(op.gen, np.int64))
                    sent = self.sent_at[ticket.rows]
                    keep = c.answer(ticket, op.obs_seq, op.actions, op.versions)
                    if keep.any():
                        self.host.round_trips.append(float(np.mean(time.monotonic() - sent[keep])))
                case wire.Release():
                    if c.release(Ticket(np.asarray(op.rows, np.int64), np.asarray(op.gen, np.int64))).any():
                        c.schedule_round()  # released unanswered: gather them again
                case _:
                    raise TypeError(f"an op from the centre of type {type(op).__name__}: wire.py's Answer, "
                                    "Release or Restart expected")


class GameHost:
    """The actor's body (link.py wraps it with ray.remote). Ray builds it again after a
    crash, with the same arguments: the new supervisor finds the old one's lock in the
    host's folder and ends what it left (games, shared memory) before it starts."""

    def __init__(self, name: str, recipe: dict, run_dir: str, lost_after_s: float):
        self.name = name
        self.incarnation = secrets.token_hex(4)  # the centre tells a restarted host by it
        self.recipe = recipe_from_dict(recipe, f"<game host {name}>")
        self.run_dir = Path(run_dir)
        self.lost_after_s = lost_after_s
        self.sup: Supervisor | None = None
        self.answerer: RemoteAnswerer | None = None
        self.outbox: list[tuple[int, dict]] = []  # (number, message) until the centre acknowledges it
        self._sent = 0
        self.round_trips: list[float] = []
        self.round_trip_ms: float | None = None  # the last poll's median: kept through a poll with no answer
        self.failure: str | None = None
        self.centre_lost = False  # the watchdog stopped the games (not a fault of the host's own)
        self.ended = False
        self.last_poll = time.monotonic()
        self.machine = machine_id()
        self._ready: asyncio.Event | None = None
        self._run: asyncio.Task | None = None
        self._next_seq = 0
        self._early: dict[int, list] = {}

    def _make_answerer(self, control: RunControl) -> RemoteAnswerer:
        self.answerer = RemoteAnswerer(control, self)
        return self.answerer

    def _ensure_started(self) -> None:
        if self._run is not None:
            return
        self._ready = asyncio.Event()
        # The host's run differs from the centre's only in its answerer (RemoteAnswerer) and
        # in having no cluster link; the composition root (w3async/compose.py) sits above this
        # package, so the host hands the Supervisor that answerer itself.
        self.sup = Supervisor(self.recipe, self.run_dir, answerer=self._make_answerer, signals=False)
        self._run = asyncio.ensure_future(self._run_games())
        asyncio.ensure_future(self._watch_centre())

    async def _run_games(self) -> None:
        try:
            await self.sup.run()
        except RunError as e:
            self.failure = str(e)
        except Exception as e:  # noqa: BLE001 (the host's cause, for the centre to say)
            self.failure = f"{type(e).__name__}: {e}"
        finally:
            self.ended = True
            self._ready.set()

    async def _watch_centre(self) -> None:
        while not self.ended:
            await asyncio.sleep(min(1.0, self.lost_after_s / 4))
            quiet = time.monotonic() - self.last_poll
            if quiet > self.lost_after_s and not self.sup.stop_requested:
                self.centre_lost = True  # the centre, if it comes back, makes this host again
                self.sup.fail(f"game host {self.name}: not polled by the centre for {quiet:.0f} s: games stopped")

    def send(self, msg: wire.Round | wire.Reset) -> None:
        self._sent += 1
        self.outbox.append((self._sent, msg))
        self._ready.set()

    async def poll(self, acked: int, timeout: float) -> tuple[list[tuple[int, wire.Round | wire.Reset]], dict]:
        """What the host has for the centre (rounds and resets, numbered, in order) past
        `acked`, the last number the centre took, waiting up to `timeout` seconds for the
        first; and the host's state. A reply the centre never read is sent again: a round
        is never lost on the way (its rows would wait for ever)."""
        self._ensure_started()
        self.last_poll = time.monotonic()
        self.outbox = [(n, m) for n, m in self.outbox if n > acked]
        if not self.outbox and not self.ended:
            self._ready.clear()
            try:
                await asyncio.wait_for(self._ready.wait(), timeout)
            except asyncio.TimeoutError:
                pass
        self.last_poll = time.monotonic()
        return list(self.outbox), self.state()

    async def apply(self, incarnation: str, seq: int, ops: list) -> None:
        """The centre's ops, applied in its order (seq), only by the incarnation they
        were made for."""
        if incarnation != self.incarnation or self.answerer is None:
            return
        self._early[seq] = ops
        while self._next_seq in self._early:
            ops = self._early.pop(self._next_seq)
            self._next_seq += 1
            if not self.sup.stopping:
                self.sup.barrier("centre's answers", self.answerer.apply, ops)

    async def stop(self) -> dict:
        """End the host's games (the supervisor's shutdown); what was left, and why it
        ended if not by this stop."""
        if self.sup is not None and self._run is not None:
            self.sup.request_stop()
            await asyncio.shield(self._run)
        sup = self.sup
        # A host stopped before its supervisor set anything up (an incarnation stopped
        # before the centre's first poll started its run) made nothing: nothing is left.
        left = sup.leftovers if sup is not None and sup.leftovers else dict(processes=[], wine=[])
        return dict(failure=self.failure, leftovers=left, state=self.state())

    def restart_games(self) -> None:
        """End every game and start it again (its rows reset, their generation bumped)."""
        self.sup.restart_games("centre_lost")

    def pid(self) -> int:
        """The actor's process (tests end it to see the host come back)."""
        return os.getpid()

    def _made(self) -> dict:
        """What this host made on its machine, for the centre's sweep (sweep.py) should
        the host die before its own shutdown: its table, its games' groups, its prefixes."""
        sup = self.sup
        if sup is None or sup.table is None:
            return {}
        return dict(shm=sup.table.name, pgids=[s.proc.pid for s in sup.slots if s.proc is not None],
                    wine_prefixes=[p for rt in sup.runtimes.values() for p in rt.prefixes()])

    def state(self) -> dict:
        """For the centre's /status: where the host runs and how its games do."""
        sup = self.sup
        slots = sup.slots if sup is not None else []
        up = sum(s.state in (SlotState.RUNNING, SlotState.STARTING) for s in slots)
        rt, self.round_trips = self.round_trips, []
        if rt:  # a poll between two answers says the last figure, not none (/status flickered to none)
            self.round_trip_ms = round(1000 * float(np.median(rt)), 3)
        c = sup.counters if sup is not None else None
        now = time.monotonic()
        sample = (sup.watch.sample() if sup is not None else None) or {}
        acct = sample.get("games", {})
        return dict(name=self.name, incarnation=self.incarnation, pid=os.getpid(), node=_node_id(),
                    machine=self.machine, made=self._made(),
                    games=len(slots), games_up=up, restarts=sum(s.restarts for s in slots),
                    agent_steps=c.agent_steps if c else 0, bad_rows=c.bad_rows if c else 0,
                    waiting=sup.control.waiting_rows() if sup is not None and sup.control and not self.ended else 0,
                    round_trip_ms=self.round_trip_ms,
                    failure=self.failure, centre_lost=self.centre_lost, ended=self.ended, time=time.time(),
                    accounting=sample.get("kinds"), slots=[
                        dict(s.view(now).as_dict(), state=str(s.state), **_figures(acct.get(s.index))) for s in slots])


def _figures(fig: dict | None) -> dict:
    """A slot's accounting figures for /games (none before the host's second sample)."""
    return dict(cpu=fig["cpu"], rss_mb=round(fig["rss_mb"], 1)) if fig else {}


def _node_id() -> str:
    try:
        import ray  # noqa: PLC0415 (only on a node of a cluster)

        return ray.get_runtime_context().get_node_id()
    except Exception:  # noqa: BLE001 (outside Ray: no node)
        return ""
