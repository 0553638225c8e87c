"""Duel replay files: read and validate (the format is games/duel/duel_replay.h).

A replay holds the setup (map, seed, turns per step, time limit), both sides' orders
per step, the state hash after each step and, optionally, the full state after each
step: lane fields (LANE_FIELDS) and one row of UNIT_FIELDS per unit. `duel
--play-replay` writes its dumps in the same format, with states, so one reader serves
recordings and playbacks.

Every record ends in a CRC-32 of its bytes: a corrupted or truncated file raises
ReplayError naming the file, the byte offset and the field.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

MAGIC = b"W3DREPL1"
VERSION = 1
HEADER_SIZE = 64
TAG_STEP = 0x50455453  # "STEP"
TAG_END = 0x21444E45  # "END!"
MAX_UNITS = 128
MAPS = ("open", "choke", "camps")
CONTROLLERS = ("agent", "ai", "random", "script", "idle")
LEVELS = ("easy", "normal", "hard")

_SIDE = ("gold", "train_type", "train_left", "supply", "dmg_dealt", "dmg_taken", "kill_value", "loss_value")
LANE_FIELDS = ("turn", "winner", "next_id", "rng_lo", "rng_hi") + tuple(f"s{s}_{f}" for s in (0, 1) for f in _SIDE)
UNIT_FIELDS = ("id", "type", "owner", "order", "x", "y", "hp", "cooldown", "target", "focus", "dest", "home",
               "last_hit_by", "repath", "path_len", "path_pos")
UNIT_DTYPE = np.dtype([(f, "<i4") for f in UNIT_FIELDS])
ORDER_FIELDS = ("train", "cmd", "group", "focus")


class ReplayError(ValueError):
    """A replay that cannot be read: the file, the byte offset and the field at fault."""

    def __init__(self, path: str | Path, offset: int, field: str, why: str):
        self.path, self.offset, self.field = str(path), offset, field
        super().__init__(f"replay {path}: offset {offset}: {field}: {why}")


@dataclass(frozen=True)
class Header:
    map: int
    step_turns: int
    time_limit_turns: int
    flags: int  # 1: the full state after every step
    seed: int
    lane: int
    episode: int
    sides: tuple[str, str]  # controller names, e.g. ("agent", "ai:hard")
    reward_mode: int  # 0 win/loss, 1 shaped, 2 attack

    @property
    def map_name(self) -> str:
        return MAPS[self.map]

    @property
    def has_states(self) -> bool:
        return bool(self.flags & 1)


@dataclass
class Step:
    step: int
    orders: np.ndarray  # (2, 4) int32: train, cmd, group, focus unit id (-1 none)
    hash: int
    lane: np.ndarray | None = None  # (len(LANE_FIELDS),) int32
    units: np.ndarray | None = None  # UNIT_DTYPE, sorted by id


@dataclass
class End:
    steps: int
    winner: int  # 0, 1; 2 a draw; -1 unfinished
    reason: int  # 1 base destroyed, 2 time limit
    hash: int


@dataclass
class Replay:
    path: str
    header: Header
    steps: list[Step] = field(default_factory=list)
    end: End | None = None


def _controller(code: int) -> str:
    kind, level = divmod(code, 16)
    if kind >= len(CONTROLLERS) or (kind == 1 and level >= len(LEVELS)):
        return f"?{code}"
    return f"ai:{LEVELS[level]}" if kind == 1 else CONTROLLERS[kind]


def _crc_ok(buf: bytes, start: int, end: int) -> bool:
    (crc,) = struct.unpack_from("<I", buf, end)
    return zlib.crc32(buf[start:end]) == crc


def parse_header(path: str | Path, buf: bytes) -> Header:
    if len(buf) < HEADER_SIZE:
        raise ReplayError(path, len(buf), "header", f"truncated: the file has {len(buf)} bytes, the header needs {HEADER_SIZE}")
    if buf[:8] != MAGIC:
        raise ReplayError(path, 0, "magic", f"{buf[:8]!r} is not {MAGIC!r} (not a duel replay)")
    if not _crc_ok(buf, 0, 60):
        raise ReplayError(path, 60, "header crc", "does not match the header's bytes: corrupted")
    version, hsize, map_, step_turns, limit, flags, seed, lane, episode, c0, c1, reward = struct.unpack_from(
        "<IIIIIIQIIIII", buf, 8)
    if version != VERSION:
        raise ReplayError(path, 8, "version", f"is {version}, this reader knows {VERSION}")
    if hsize != HEADER_SIZE:  # a writer of another layout, whatever its CRC says
        raise ReplayError(path, 12, "header size", f"is {hsize}, version {VERSION} has {HEADER_SIZE}")
    if map_ >= len(MAPS) or step_turns < 1 or limit < 1:
        raise ReplayError(path, 16, "map/step_turns/time_limit_turns", f"out of range: {map_}, {step_turns}, {limit}")
    return Header(map_, step_turns, limit, flags, seed, lane, episode, (_controller(c0), _controller(c1)), reward)


def read_replay(path: str | Path, *, max_steps: int | None = None, require_end: bool = True) -> Replay:
    """Reads and validates a whole replay (or its first max_steps steps).

    Raises ReplayError for a bad magic, version, header size or CRC, a record cut short,
    a step out of sequence, a unit count over MAX_UNITS, an end record whose step count
    is not the steps read, or (with require_end) a missing end record.
    """
    buf = Path(path).read_bytes()
    header = parse_header(path, buf)
    rep = Replay(str(path), header)
    off = HEADER_SIZE
    n_lane = len(LANE_FIELDS)
    while True:
        if max_steps is not None and len(rep.steps) >= max_steps:
            return rep
        if off == len(buf):
            if require_end:
                after = f"step {len(rep.steps) - 1}" if rep.steps else "the header"
                raise ReplayError(path, off, "end record", f"truncated: the file ends after {after} without one")
            return rep
        if off + 4 > len(buf):
            raise ReplayError(path, off, "record tag", f"truncated: {len(buf) - off} bytes left, a tag needs 4")
        (tag,) = struct.unpack_from("<I", buf, off)
        if tag == TAG_END:
            if off + 28 > len(buf):
                raise ReplayError(path, off, "end record", f"truncated: {len(buf) - off} bytes left, it needs 28")
            if not _crc_ok(buf, off, off + 24):
                raise ReplayError(path, off + 24, "end record crc", "does not match the record's bytes: corrupted")
            steps, winner, reason, h = struct.unpack_from("<IiiQ", buf, off + 4)
            if steps != len(rep.steps):
                # A file cut (or spliced) at a record boundary with an end record after it: its
                # CRCs all pass, and a comparison of the steps left would say "identical".
                raise ReplayError(path, off + 4, "end record steps",
                                  f"is {steps}, the file holds {len(rep.steps)} step records: steps are missing")
            rep.end = End(steps, winner, reason, h)
            return rep
        if tag != TAG_STEP:
            raise ReplayError(path, off, "record tag", f"{tag:#010x} is neither a step nor an end record: corrupted")
        if off + 52 > len(buf):
            raise ReplayError(path, off, f"step record {len(rep.steps)}", f"truncated: {len(buf) - off} bytes left, it needs 52 and more")
        step = struct.unpack_from("<I", buf, off + 4)[0]
        orders = np.frombuffer(buf, "<i4", 8, off + 8).reshape(2, 4).copy()
        h, n_units = struct.unpack_from("<QI", buf, off + 40)
        if n_units > MAX_UNITS:
            raise ReplayError(path, off + 48, f"step record {len(rep.steps)} n_units", f"is {n_units}, at most {MAX_UNITS}: corrupted")
        n = 52
        lane = units = None
        if n_units or header.has_states:
            extra = 4 * (n_lane + n_units * len(UNIT_FIELDS))
            if off + n + extra > len(buf):
                raise ReplayError(path, off + n, f"step record {len(rep.steps)} state", f"truncated: needs {extra} bytes, {len(buf) - off - n} left")
            lane = np.frombuffer(buf, "<i4", n_lane, off + n).copy()
            units = np.frombuffer(buf, UNIT_DTYPE, n_units, off + n + 4 * n_lane).copy()
            n += extra
        if off + n + 4 > len(buf):
            raise ReplayError(path, off + n, f"step record {len(rep.steps)} crc", "truncated: the file ends before it")
        if not _crc_ok(buf, off, off + n):
            raise ReplayError(path, off, f"step record {len(rep.steps)} crc", "does not match the record's bytes: corrupted")
        if step != len(rep.steps):
            raise ReplayError(path, off + 4, "step", f"is {step}, expected {len(rep.steps)}")
        rep.steps.append(Step(step, orders, h, lane, units))
        off += n + 4


@dataclass(frozen=True)
class FieldDiff:
    """One field that differs at a step: what ("unit 17", "lane"), the field, both values."""

    what: str
    field: str
    a: int | str
    b: int | str


def diff_step(a: Step, b: Step, limit: int = 12) -> list[FieldDiff]:
    """The fields in which two steps' states differ (hash first when no states)."""
    out: list[FieldDiff] = []
    if a.lane is None or b.lane is None:
        if a.hash != b.hash:
            out.append(FieldDiff("lane", "state_hash", f"{a.hash:016x}", f"{b.hash:016x}"))
        return out
    for i, name in enumerate(LANE_FIELDS):
        if a.lane[i] != b.lane[i]:
            out.append(FieldDiff("lane", name, int(a.lane[i]), int(b.lane[i])))
    ua = {int(u["id"]): u for u in a.units}
    ub = {int(u["id"]): u for u in b.units}
    for uid in sorted(set(ua) | set(ub)):
        if len(out) >= limit:
            break
        if uid not in ua or uid not in ub:
            out.append(FieldDiff(f"unit {uid}", "present", uid in ua, uid in ub))
            continue
        x, y = ua[uid], ub[uid]
        for name in UNIT_FIELDS:
            if x[name] != y[name]:
                out.append(FieldDiff(f"unit {uid}", name, int(x[name]), int(y[name])))
    if not out and a.hash != b.hash:
        out.append(FieldDiff("lane", "state_hash", f"{a.hash:016x}", f"{b.hash:016x}"))
    return out[:limit]
