"""The centre's side of a cluster: game hosts on other machines, through Ray.

The supervisor keeps inference, the learner, the league, evaluation, the logs, the
checkpoints and the status; the groups with `host` set run on game hosts (gamehost.py),
one Ray actor per host name, placed on the node that offers the resource of that name.
Their rows follow the table's in the run's numbering, so the answerer sees one run.

Per host, one task polls: each reply brings the host's rounds (wire.py) and its
games' resets, in the host's order, and they go to the answerer as local rounds do.
The answerer's answers and releases for a host's rows are collected over one turn of
the loop and sent in one call, numbered, so that the host applies them in order. Hosts
never wait on each other: each has its own poll in flight.

Faults go through Ray's own machinery: a host that dies is restarted by Ray (up to
cluster.host_restarts) on its node; the centre hears it as a failed poll or a new
incarnation, cuts its games' open episodes (never trained on as if they ended), and
records the cause (`host_lost`, `host_up` in events.jsonl). A host that died once more
than that and stays lost for cluster.lost_after_s ends the run with the cause; one that
is only unreachable (its node gone) is polled on, and the run goes on with the others. A
host that stopped its games because the centre did not poll it (its watchdog) is made
again by Ray when the centre reaches it.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from w3async import games as games_registry
from w3async.cluster import wire
from w3async.cluster.sweep import HostTraces, machine_id, sweep, sweep_on_node
from w3async.observe.logs import console
from w3async.observe.run_view import GameView, game_view
from w3async.recipes import RecipeError, recipe_from_dict, recipe_to_dict
from w3async.runtime.answerer import Answerer, GameRows, RunControl
from w3async.runtime.life import RunContext
from w3async.runtime.runfolder import RunError
from w3async.sync.gather import Batch

POLL_S = 0.5  # a poll waits this long for a round before it answers empty (and says the host's state)
POLL_GRACE_S = 5.0  # beyond POLL_S, how long a poll may take before the host counts as lost
SIM_OBJECT_STORE = 100 * 1024 * 1024  # a simulated node's object store: rounds are small
SWEEP_S = 20.0  # how long the sweep of a host on another machine may take (a Ray task there)


@dataclass
class HostLink:
    """One game host as the centre sees it."""

    name: str
    row0: int  # its first row in the run's numbering
    nrows: int
    games: list[GameRows]
    actor: object = None
    incarnation: str | None = None  # the host's; a new one is a restarted host
    up: bool = False  # polled since it was last cut
    batch: Batch = None  # the centre's buffer for its rounds
    ops: list = field(default_factory=list)  # answers and releases not yet sent
    seq: int = 0  # the next call of ops
    acked: int = 0  # the last message of the host taken
    lost_since: float = 0.0  # when a poll last failed with the host up (0: it is up)
    state: dict = field(default_factory=dict)  # its last reply's
    deaths: int = 0
    remade: str | None = None  # the incarnation the centre asked Ray to make again
    rows_in: int = 0
    bytes_in: int = 0
    rate: tuple = (0.0, 0, 0.0)  # (time, agent_steps, steps/s) for its steps/s
    traces: HostTraces = field(default_factory=HostTraces)  # what it made, for the sweep at the end


class ClusterLink:
    """The game hosts of one run: started with the run, polled, answered, stopped."""

    def __init__(self, ctx: RunContext, row0: int, slot0: int):
        """`ctx`: the run's context (runtime/life.py); its rows from row0, its slots from slot0.
        The run's control and answerer come with start(): they are made after this link
        (they count its rows)."""
        self.ctx = ctx
        self.config = ctx.recipe.cluster
        self.control: RunControl | None = None
        self.answerer: Answerer | None = None
        self.hosts_: list[HostLink] = []
        row, slot = row0, slot0
        lay = games_registry.get(ctx.recipe.game).spec.layout  # the rows' shape, the game's
        for name in dict.fromkeys(g.host for g in ctx.recipe.games if g.host):
            start, games = row, []
            for g in (g for g in ctx.recipe.games if g.host == name):
                for _ in range(g.count):
                    games.append(GameRows(slot, row, g.lanes * g.sides, g))
                    row, slot = row + g.lanes * g.sides, slot + 1
            n = row - start
            self.hosts_.append(HostLink(name, start, n, games, batch=Batch(n, lay)))
        self.n_rows = row - row0
        self.games = [g for h in self.hosts_ for g in h.games]
        self._sim = None  # a simulated cluster this process started (ray.cluster_utils.Cluster)
        self._ray = None
        self._stopping = False
        self._flush_scheduled = False

    # ---- start and stop -------------------------------------------------------------

    async def start(self, tasks: list, control: RunControl, answerer: Answerer) -> None:
        """Join (or simulate) the cluster, check each host's resource, start the hosts
        and their polls; the hosts' rounds and resets go to control and answerer. Raises
        RunError naming what is missing."""
        self.control, self.answerer = control, answerer
        recipes = {h.name: self._host_recipe(h) for h in self.hosts_}
        for h in self.hosts_:  # a host's recipe is checked before Ray starts: its error is read here
            try:
                recipe_from_dict(recipes[h.name], f"<game host {h.name}>")
            except RecipeError as e:
                raise RunError(f"game host {h.name}: its recipe does not load: {e}") from e
        self._connect()
        offered = self._ray.cluster_resources()
        for h in self.hosts_:
            if h.name not in offered:
                names = sorted(k for k in offered if not k.startswith("node:") and k not in _RAY_RESOURCES)
                raise RunError(f"games.host = {h.name!r}: no node of the cluster offers a resource "
                               f"{h.name!r} (custom resources offered: {', '.join(names) or 'none'})")
        actor_class = self._ray.remote(_host_class())
        for h in self.hosts_:
            h.actor = actor_class.options(
                num_cpus=0, resources={h.name: 0.001}, max_restarts=self.config.host_restarts, max_task_retries=0,
            ).remote(h.name, recipes[h.name], str(self.ctx.run_dir / "hosts" / h.name), self.config.lost_after_s)
            self.ctx.events.info("host_start", host=h.name, rows=[h.row0, h.row0 + h.nrows], games=len(h.games))
            tasks.append(self.ctx.task(self._pump(h), f"game host {h.name}"))

    def _connect(self) -> None:
        os.environ.setdefault("RAY_IGNORE_UNHANDLED_ERRORS", "1")  # ops to a dead host fail, by design
        import ray  # noqa: PLC0415 (only with [cluster])

        self._ray = ray
        c = self.config
        if c.address:
            ray.init(address=c.address, log_to_driver=False, include_dashboard=False)
            return
        from ray.cluster_utils import Cluster  # noqa: PLC0415

        self._sim = Cluster(initialize_head=True, head_node_args=dict(
            num_cpus=1, include_dashboard=False, object_store_memory=SIM_OBJECT_STORE))
        for i in range(1, c.local_nodes + 1):
            self._sim.add_node(num_cpus=1, resources={f"node{i}": 1}, object_store_memory=SIM_OBJECT_STORE)
        self._sim.wait_for_nodes()
        ray.init(address=self._sim.address, log_to_driver=False)

    def _host_recipe(self, h: HostLink) -> dict:
        """The host's own recipe: its groups (run there as local ones), no status, no
        stop condition (the centre stops it), no cluster."""
        d = recipe_to_dict(self.ctx.recipe)
        d.pop("path", None)
        d["games"] = [dict(g, host="") for g in d["games"] if g["host"] == h.name]
        d.update(cluster=None, status=dict(d["status"], enabled=False), stop={}, name=f"{d['name']}-{h.name}")
        d["supervisor"] = dict(d["supervisor"], policy="check")  # unused: the host answers through the centre
        for key in ("learner", "trajectories", "league"):  # the centre learns: a host needs none of them
            d.pop(key, None)                                 # (a schedule would need the stop it has not)
        if isinstance(d.get("network"), dict):  # unset options stay unset (None is no value)
            d["network"] = {k: v for k, v in d["network"].items() if v is not None}
        return d

    async def stop(self) -> None:
        """Each host ends its games (its supervisor's shutdown) and says what is left; a
        host that cannot (dead, its node gone, no answer) is a recorded fault, not a
        failed stop. Then the actors end, the centre sweeps what each host made
        (sweep.py), and Ray and a simulated cluster end. Raises RunError naming what a
        host left that the sweep did not end either."""
        self._stopping = True
        if self._ray is None:
            return
        ray, errors = self._ray, []
        live = [h for h in self.hosts_ if h.actor is not None]
        results = await self._ask_stop(live)
        stopped, left_by = set(), {}
        for h, r in zip(live, results):
            if isinstance(r, BaseException):  # dead or unreachable: the sweep below ends what it made
                cause = _first_line(r) if str(r) else "no answer to stop"
                self.ctx.events.warning("host_stop", host=h.name, fault=cause, failure=None, leftovers=None)
                console(f"w3async: game host {h.name} could not stop its games ({cause}): the centre sweeps them")
                continue
            stopped.add(h.name)
            left = (r.get("leftovers") or {}).get("processes")
            self.ctx.events.info("host_stop", host=h.name, failure=r.get("failure"), leftovers=r.get("leftovers"))
            if left:
                left_by[h.name] = left
        for h in live:
            try:
                ray.kill(h.actor, no_restart=True)
            except Exception:  # noqa: BLE001 (already gone)
                pass
        for h in self.hosts_:
            done = await self._sweep(h, h.name in stopped)
            if h.name in left_by and (done is None or done["left"]):  # the host's own check, then the sweep's
                errors.append(f"game host {h.name}: processes left: {done['left'] if done else left_by[h.name]}")
        for what, end in (("Ray", ray.shutdown), ("the simulated cluster", self._sim and self._sim.shutdown)):
            try:
                if end:
                    end()
            except Exception as e:  # noqa: BLE001 (a node already gone: its processes were ended with it)
                self.ctx.events.warning("cluster_stop", what=what, fault=_first_line(e))
        if errors:
            raise RunError("; ".join(errors))

    async def _ask_stop(self, live: list[HostLink]) -> list:
        """Each host's stop(): its reply or its error, in order. A host that has not
        answered in stop_timeout_s + 15 s, or by a second signal (the shutdown hurried),
        counts as not answering; the sweep ends what it made."""
        timeout = self.ctx.recipe.supervisor.stop_timeout_s + 15.0
        asks = [asyncio.ensure_future(asyncio.wait_for(_awaitable(h.actor.stop.remote()), timeout)) for h in live]
        while asks and not all(a.done() for a in asks) and not self.ctx.life.hurrying:
            await asyncio.wait(asks, timeout=0.1, return_when=asyncio.ALL_COMPLETED)
        out = []
        for a in asks:
            if not a.done():
                a.cancel()
                out.append(TimeoutError("no answer to stop before a second signal hurried the shutdown"))
            else:
                out.append(a.exception() or a.result())
        return out

    async def _sweep(self, h: HostLink, stopped: bool) -> dict | None:
        """End what host h made, wherever it made it: here directly (its lock file read
        too: what it made after its last poll), on its node by a pinned Ray task when it
        did not stop itself; `host_unswept` names what a node that is gone may hold."""
        t, loop = h.traces, asyncio.get_running_loop()
        here = t.machine == machine_id() or not t.machine
        if here:
            t.learn(dict(made=_read_lock(self.ctx.run_dir / "hosts" / h.name)))
        if not t.shms or (stopped and not here):
            return None
        try:
            if here:
                done = await loop.run_in_executor(None, sweep, t.as_dict())
            else:
                done = await asyncio.wait_for(_awaitable(sweep_on_node(self._ray, t.node, t.as_dict())), SWEEP_S)
        except Exception as e:  # noqa: BLE001 (its node is gone: nothing there can be reached)
            self.ctx.events.warning("host_unswept", host=h.name, node=t.node, cause=_first_line(e), **t.as_dict())
            console(f"w3async: game host {h.name}: what it made could not be swept "
                    f"({_first_line(e)}): segments {sorted(t.shms)}, process groups {sorted(t.pgids)}")
            return None
        if done["killed"] or done["unlinked"] or done["wine_killed"] or done["left"] or not stopped:
            self.ctx.events.info("host_sweep", host=h.name, node=t.node, here=here, **done)
        return done

    # ---- the polls ----------------------------------------------------------------

    async def _pump(self, h: HostLink) -> None:
        """Poll the host until the run stops. A poll that fails (the host died, Ray is
        restarting it) or takes too long is tried again with a growing pause; what it
        would have brought comes with the next (the host keeps it until acknowledged)."""
        lost = self._ray.exceptions.RayError  # the actor dead, restarting, its node gone
        pause = 0.1
        while not self._stopping:
            try:
                ref = h.actor.poll.remote(h.acked, POLL_S)
                items, state = await asyncio.wait_for(_awaitable(ref), POLL_S + POLL_GRACE_S)
            except (lost, asyncio.TimeoutError) as e:
                if self._stopping:
                    return
                cause = "no answer to a poll" if isinstance(e, asyncio.TimeoutError) else _first_line(e)
                if h.up:
                    self._cut(h, cause)
                    h.lost_since = time.monotonic()
                spent = h.deaths >= self.config.host_restarts and h.lost_since
                if spent and time.monotonic() - h.lost_since > self.config.lost_after_s:
                    self.ctx.life.fail(f"game host {h.name} died again after {h.deaths} restart(s) "
                                  f"(cluster.host_restarts = {self.config.host_restarts}): {cause}")
                    return
                await asyncio.sleep(pause)
                pause = min(2 * pause, 2.0)
                continue
            pause = 0.1
            if not self._stopping:
                self.ctx.barrier(f"game host {h.name}", self._take, h, items, state)

    def _take(self, h: HostLink, items: list, state: dict) -> None:
        if state.get("centre_lost") and not self._stopping:
            self._make_again(h, state)
            return
        if state["incarnation"] != h.incarnation:
            if h.incarnation is not None:  # Ray made it again: a death, whether a poll saw it or not
                h.deaths += 1
                if h.up:
                    self._cut(h, "restarted")
            h.incarnation, h.seq, h.ops, h.acked, h.lost_since = state["incarnation"], 0, [], 0, 0.0
            self.ctx.events.info("host_up", host=h.name, node=state["node"], pid=state["pid"], deaths=h.deaths)
        elif not h.up:
            # The same host, unreachable for a while: the centre cut its episodes and
            # dropped the answers on their way, so its held rows would wait for ever.
            # Its games start again, as after a death; their resets come back numbered.
            h.ops.append(wire.Restart())
            self._schedule_flush()
            self.ctx.events.info("host_back", host=h.name, node=state["node"], pid=state["pid"])
        h.up = True
        answerer, control = self.answerer, self.control
        for n, msg in items:
            if n <= h.acked:
                continue  # taken from an earlier reply
            h.acked = n
            match msg:
                case wire.Reset():
                    control.rows_reset(slice(h.row0 + msg.start, h.row0 + msg.stop))
                case wire.Round():
                    b = wire.unpack(msg, h.batch, h.row0)
                    h.rows_in += b.n
                    h.bytes_in += wire.nbytes(msg)
                    control.arrived(b.rows[:b.n].astype(np.int64), msg.gen)  # its answer names the host's generations
                    answerer.submit(b)
                case _:
                    raise TypeError(f"a message from game host {h.name} of type {type(msg).__name__}: "
                                    "wire.py's Round or Reset expected")
        now, (t0, steps0, rate) = time.monotonic(), h.rate
        if now - t0 >= 1.0:
            rate = (state["agent_steps"] - steps0) / (now - t0) if t0 else 0.0
            h.rate = (now, state["agent_steps"], rate)
        h.state = state
        h.traces.learn(state)
        if state["failure"]:
            self.ctx.life.fail(f"game host {h.name}: {state['failure']}")

    def _make_again(self, h: HostLink, state: dict) -> None:
        """The host stopped its games, not polled for lost_after_s (the centre was stopped
        or cut off): not a fault of its own, so not the run's end. Ray makes it again
        (a death, within host_restarts); its games start fresh there."""
        if h.remade == state["incarnation"]:
            return  # asked already; its polls fail until the new one answers
        h.remade = state["incarnation"]
        if h.up:
            self._cut(h, f"the host stopped its games: {state['failure']}")
        h.lost_since = time.monotonic()
        self.ctx.events.warning("host_remake", host=h.name, cause=state["failure"])
        self._ray.kill(h.actor, no_restart=False)

    def _cut(self, h: HostLink, cause: str) -> None:
        """The host is gone (or came back as a new one): its games' open episodes end
        here, cut, and what was on its way to it is dropped."""
        h.ops, h.up = [], False
        for g in h.games:
            self.control.rows_reset(slice(g.row0, g.row0 + g.nrows))
        self.ctx.events.warning("host_lost", host=h.name, cause=cause)
        console(f"w3async: game host {h.name} lost ({cause}): its games' open episodes are cut; Ray restarts it")

    # ---- answers ------------------------------------------------------------------

    def _ops(self, op: type[wire.Answer] | type[wire.Release], rows: np.ndarray, gen: np.ndarray, **arrays) -> None:
        for h in self.hosts_:
            sel = (rows >= h.row0) & (rows < h.row0 + h.nrows)
            if not sel.any() or h.incarnation is None:
                continue
            local = (rows[sel] - h.row0).astype(np.int32)
            h.ops.append(op(rows=local, gen=gen[sel].astype(np.uint32), **{k: a[sel] for k, a in arrays.items()}))
        self._schedule_flush()

    def _schedule_flush(self) -> None:
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self.ctx.loop.call_soon(self._flush)

    def answer(self, rows, gen, obs_seq, actions, versions) -> None:
        """Answers for a host's rows, each naming the host's generation of its round."""
        self._ops(wire.Answer, rows, gen, obs_seq=obs_seq, actions=actions, versions=versions)

    def release(self, rows, gen) -> None:
        self._ops(wire.Release, rows, gen)

    def _flush(self) -> None:
        self._flush_scheduled = False
        for h in self.hosts_:
            if h.ops and h.actor is not None and not self._stopping:
                h.actor.apply.remote(h.incarnation, h.seq, h.ops)  # its errors: the poll hears them
                h.seq += 1
            h.ops = []

    # ---- watching -----------------------------------------------------------------

    def waiting_rows(self) -> int:
        return sum(h.state.get("waiting", 0) for h in self.hosts_)

    def hosts(self) -> list[dict]:
        """Each host for /status, /games and the dashboard."""
        out = []
        for h in self.hosts_:
            s = h.state
            out.append(dict(name=h.name, node=s.get("node", ""), up=h.up,
                            games=len(h.games), games_up=s.get("games_up", 0), restarts=s.get("restarts", 0),
                            deaths=h.deaths, agent_steps=s.get("agent_steps", 0), steps_per_s=round(h.rate[2], 1),
                            round_trip_ms=s.get("round_trip_ms"), rows=[h.row0, h.row0 + h.nrows],
                            bytes_per_row=round(h.bytes_in / h.rows_in, 1) if h.rows_in else None,
                            failure=s.get("failure"), accounting=s.get("accounting")))
        return out

    def games_view(self) -> list[GameView]:
        """The hosts' games for /games (run_view.GAME_KEYS): as each host last said,
        "lost" while its host is down."""
        out = []
        for h in self.hosts_:
            slots = h.state.get("slots") or []
            for i, g in enumerate(h.games):
                s = slots[i] if h.up and i < len(slots) else {}  # the host's Slot.view(), as a dict
                state = {k: s[k] for k in ("pid", "state", "restarts", "causes", "steps", "last_step_age_s", "cpu",
                                           "rss_mb") if k in s}
                out.append(game_view(g.index, g.group, host=h.name, **state))
        return out

    def summary(self) -> str:
        parts = []
        for x in self.hosts():
            rt = f" {x['round_trip_ms']:.1f} ms" if x["round_trip_ms"] is not None else ""
            parts.append(f"{x['name']} {x['games_up']}/{x['games']} up{rt}" if x["up"] else f"{x['name']} lost")
        return "hosts: " + ", ".join(parts)


# Ray's own resources, not a host's name (for the error that lists what is offered).
_RAY_RESOURCES = {"CPU", "GPU", "memory", "object_store_memory", "accelerator_type"}


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0][:200]}" if text else type(e).__name__


def _read_lock(run_dir: Path) -> dict:
    """What a host's run lock (runfolder.RunLock) last recorded; {} when there is none."""
    try:
        return json.loads((run_dir / "run.lock").read_text() or "{}")
    except (OSError, ValueError):
        return {}


def _awaitable(ref):
    """A Ray ObjectRef as an asyncio future of the running loop. Its error counts as
    heard even when nobody awaits it any more (a stop that a second signal hurried past,
    then the actor killed): the caller already took that as no answer, and asyncio would
    report the error as never retrieved, a fault of the loop that ends the run."""
    fut = asyncio.wrap_future(ref.future())
    fut.add_done_callback(_heard)
    return fut


def _heard(fut: asyncio.Future) -> None:
    if not fut.cancelled():
        fut.exception()  # marks it retrieved; an awaiting caller still gets it raised


def _host_class():
    from w3async.cluster.gamehost import GameHost  # noqa: PLC0415 (the actor's code, imported on the node too)

    return GameHost

