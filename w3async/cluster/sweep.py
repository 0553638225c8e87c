"""What the game hosts leave on their machines, as the centre learns it, and the sweep
that ends it when a host cannot.

A host runs its own shutdown at the run's end (gamehost.py `stop`). A host that is dead
then cannot: its process SIGKILLed and not yet made again, its node's raylet killed, its
last allowed death spent. Its games and its segments would outlive the run (found from
outside: after a node's raylet was killed, SIGTERM left that host's segment in /dev/shm).
So every poll's state names the host's table, its games' process groups, its Wine
prefixes and its machine; the centre keeps the union over all the host's incarnations
(HostTraces) and, after the hosts' own stops, sweeps them: on its own machine directly,
on another machine by a Ray task pinned to the host's node. A node that is gone too
cannot be swept: what it may hold is recorded by name (`host_unswept`).
"""

from __future__ import annotations

import socket
from dataclasses import dataclass, field

from w3async.runtime import procs
from w3async.runtime.runfolder import cleanup_previous_run


def machine_id() -> str:
    """This machine, as two Ray nodes on it agree: its host name and this boot's id
    (a simulated cluster's nodes are one machine; a rebooted machine is another)."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot = f.read().strip()
    except OSError:
        boot = ""
    return f"{socket.gethostname()}/{boot}"


@dataclass
class HostTraces:
    """Everything a host said it made, over all its incarnations: what a sweep ends."""

    shms: set[str] = field(default_factory=set)  # its tables' names: each prefixes its games' segments
    pgids: set[int] = field(default_factory=set)  # its games' process groups, any start
    wine_prefixes: set[str] = field(default_factory=set)
    machine: str = ""  # machine_id() of the host's machine
    node: str = ""  # its Ray node (a remote sweep is pinned there)

    def learn(self, state: dict) -> None:
        """Take what one poll's state (GameHost.state) names."""
        made = state.get("made") or {}
        if made.get("shm"):
            self.shms.add(made["shm"])
        self.pgids.update(int(p) for p in made.get("pgids") or [])
        self.wine_prefixes.update(made.get("wine_prefixes") or [])
        self.machine = state.get("machine") or self.machine
        self.node = state.get("node") or self.node

    def as_dict(self) -> dict:
        return dict(shms=sorted(self.shms), pgids=sorted(self.pgids), wine_prefixes=sorted(self.wine_prefixes))


def sweep(traces: dict) -> dict:
    """On the host's machine: SIGKILL every process that carries one of the host's
    tables' names in its environment or maps one of their segments (setsid helpers
    included), then what cleanup_previous_run ends (the games' groups, free Wine
    prefixes' processes), and unlink the segments. Returns what was done and what a
    last look still finds (`left`: should be empty)."""
    killed, wine_killed, unlinked = [], [], []
    for shm in traces["shms"]:
        killed += procs.end_marked(*_marks(shm))
        done = cleanup_previous_run(dict(shm=shm, pgids=traces["pgids"], wine_prefixes=traces["wine_prefixes"]))
        killed += done["killed"]
        wine_killed += done["wine_killed"]
        unlinked += done["shm_segments"]
    left = sorted({p for shm in traces["shms"] for p in procs.marked(*_marks(shm))})
    return dict(killed=sorted(set(killed)), wine_killed=wine_killed, unlinked=unlinked, left=left)


def _marks(shm: str) -> tuple:
    """What a process of the table `shm` carries: its name in the environment (W3S_SHM,
    W3S_SHM_PATH), or a mapping of one of its segments."""
    name = shm.lstrip("/")
    return name.encode(), procs.maps_pattern("/dev/shm/" + name + "-", any_suffix=True)


def sweep_on_node(ray, node: str, traces: dict):
    """sweep(traces) as a Ray task on the node `node` (a node id) and nowhere else: the
    ObjectRef of its result. It fails (the node is gone) rather than run elsewhere."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy  # noqa: PLC0415 (only with [cluster])

    task = ray.remote(sweep).options(num_cpus=0, max_retries=0,
                                     scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False))
    return task.remote(traces)
