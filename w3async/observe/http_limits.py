"""What a status server's clients may take (docs/status.md, "Limits"), and the checks
that do not depend on a connection: the connection cap from the file-descriptor rule,
the Host names answered (an absolute-form target's authority checked the same way), the request rate (GCRA), a path kept inside a folder.
status_server.py applies them; nothing here touches a socket.
"""

from __future__ import annotations

import ipaddress
import os
import resource
from dataclasses import dataclass


@dataclass
class Limits:
    """What one status server may take (docs/status.md, "Limits")."""

    max_connections: int = 256
    """Open connections at most (lowered by the file-descriptor rule, connection_cap())."""
    total_rate: float = 100.0
    """Requests a second answered, all clients together."""
    total_burst: int = 100
    ip_rate: float = 20.0
    """Requests a second answered per client address (the dashboard asks ~2 a second)."""
    ip_burst: int = 40
    max_wait_s: float = 2.0
    """A request that would wait longer for its turn gets 429 instead..."""
    reject_delay_s: float = 1.0
    """...after this long, so that a client looping on 429s does not spin the thread."""
    idle_timeout_s: float = 5.0
    """A connection with no complete request this long after it opened or after its last
    answer is closed (half-open and slow-header connections included)."""
    fd_per_slot: int = 16
    """File descriptors kept free per game slot (a restart takes ~5 at once; Wine more)."""
    fd_margin: int = 128
    """Kept free besides: logs, checkpoints, the learner, the accept burst."""


def open_fds() -> int:
    try:
        return len(os.listdir("/proc/self/fd"))
    except OSError:
        return 64


def connection_cap(limits: Limits, slots: int, backlog: int, fds_open: int | None = None,
                   nofile: int | None = None) -> int:
    """The rule: half of what RLIMIT_NOFILE leaves after the descriptors open now, the
    games' reserve (fd_per_slot each), the listen backlog (a burst of accepts is
    accepted before it is refused) and fd_margin, at least 8; at most
    limits.max_connections."""
    if nofile is None:
        nofile = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        if nofile == resource.RLIM_INFINITY:
            nofile = 1 << 20
    fds_open = open_fds() if fds_open is None else fds_open
    free = nofile - fds_open - limits.fd_per_slot * slots - backlog - limits.fd_margin
    return min(limits.max_connections, max(8, free // 2))


def allowed_hosts(host: str, port: int, extra: tuple[str, ...] = ()) -> set[str]:
    """Host header values this server answers: the loopback names, the bound host and
    `extra`, each bare or with the bound port (lower case)."""
    names = {"localhost", "127.0.0.1", "[::1]", host.lower()} | {h.lower() for h in extra}
    if ":" in host and not host.startswith("["):
        names.add(f"[{host.lower()}]")
    return names | {f"{n}:{port}" for n in names}


def target_authority(target: str) -> str | None:
    """The host[:port] a request target names in absolute form ("GET http://HOST/status",
    RFC 9112 3.2.2), lower case, userinfo kept (so that it matches no allowed name); None
    for the origin form ("/status"). A server must take this authority over the Host
    header: checking Host alone answered `GET http://other.example/status` with
    `Host: 127.0.0.1`. A target of any other form gives "" (matches nothing)."""
    if target.startswith("/"):
        return None
    scheme, sep, rest = target.partition("://")
    if not sep or scheme.lower() not in ("http", "https"):
        return ""
    return rest.split("/", 1)[0].split("?", 1)[0].split("#", 1)[0].lower()


def is_loopback(addr: str) -> bool:
    try:
        return ipaddress.ip_address(addr.split("%")[0]).is_loopback
    except ValueError:
        return addr.lower() == "localhost"


def inside(path: str, root: str) -> str | None:
    """path resolved (symlinks followed) when it lies in root (resolved), else None."""
    real = os.path.realpath(path)
    root = os.path.realpath(root)
    return real if real == root or real.startswith(root.rstrip(os.sep) + os.sep) else None


class RateGate:
    """Virtual scheduling (GCRA): `wait()` says how long a request must wait for its
    turn under `rate` a second with `burst` at once; `take()` books that turn."""

    def __init__(self, rate: float, burst: int):
        self.interval = 1.0 / rate
        self.tolerance = burst * self.interval
        self.tat: dict = {}

    def wait(self, key, now: float) -> float:
        return max(0.0, max(self.tat.get(key, now), now) - self.tolerance - now)

    def take(self, key, now: float) -> None:
        self.tat[key] = max(self.tat.get(key, now), now) + self.interval

    def prune(self, now: float) -> None:
        for k in [k for k, t in self.tat.items() if t < now]:
            del self.tat[k]
