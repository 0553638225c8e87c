"""Which runtime starts each game slot: one native runtime, one Wine runtime a prefix (one
for the run, or one a game with `[runtime] prefix = "per-game"`), and an injected group's
starts through the launcher in its prefix."""

from __future__ import annotations

from pathlib import Path

from w3async.recipes import Recipe
from w3async.runtime.gamestart import Runtime
from w3async.runtime.inject import InjectedRuntime
from w3async.runtime.native import NativeRuntime
from w3async.runtime.sandbox import unavailable, writable
from w3async.runtime.wine import WineConfig, WineRuntime, program_bits


def slot_runtimes(r: Recipe, groups: list, run_dir: Path, runtimes: dict) -> list[Runtime]:
    """The runtime of each slot (groups: one per slot); `runtimes` gets the shared ones by
    key (the supervisor closes them)."""
    bits = program_bits(r.binary_path(x) for x in groups if x.runtime == "wine")
    keys = [f"wine-{i}" if g.runtime == "wine" and r.runtime.prefix == "per-game" else g.runtime
            for i, g in enumerate(groups)]
    out = []
    for g, key in zip(groups, keys):
        if key not in runtimes:
            # The wineserver makes its games' sockets and opens their files: in a
            # sandboxed run it gets only what its games may have (wineprefix.ConfinedServer).
            mine = [x for x, k in zip(groups, keys) if k == key]
            confine = r.supervisor.sandbox != "off" and unavailable() is None
            write = tuple(dict.fromkeys(p for x in mine for p in writable(x, run_dir))) if confine else ()
            runtimes[key] = NativeRuntime() if g.runtime == "native" else WineRuntime(
                WineConfig(wine=r.runtime.wine, cache_dir=r.runtime.cache_dir or None, fsync=r.runtime.fsync,
                           esync=r.runtime.esync, display=r.runtime.display, bits=bits, confine=confine,
                           network=any(x.network for x in mine), writable=write), key)
        rt = runtimes[key]
        out.append(InjectedRuntime(rt, g.inject, run_dir) if g.inject else rt)
    return out
