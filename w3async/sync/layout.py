"""The shared table's layout, mirrored from shim/w3s_table.h as numpy dtypes.

A row's shape is its game's (a Layout: the spec's entities, features, globals and
action heads); the fixed part before the observation is the same for every game.
Nothing here allocates: table.py maps the segments and hands out views with these
dtypes. tests/shim/test_layout.py compiles a program that prints every offset and
size of the C structs and checks them against ROW_DTYPE and HEADER_DTYPE, and that
layout_hash() equals the C w3s_layout_hash().
"""

from __future__ import annotations

import numpy as np

MAGIC = 0x3143595341335733  # "W3ASYNC1"
VERSION = 3
ROW_MAGIC = 0x77337277

# The default row shape: the duel's and the null game's. A run's shape is its game's
# (GameSpec.layout): a Layout below.
E_MAX = 160  # entities per observation
F_ENT = 16  # float features per entity
G_GLOB = 32  # global float features
N_HEADS = 4  # action heads
HEAD_MAX = 192  # choices per head
HEADS_MAX = 8  # action heads a row can have
E_LIMIT, F_LIMIT, G_LIMIT, CHOICE_LIMIT = 4096, 1024, 65536, 65536  # a shape's largest dimensions
ROW_SIZE_LIMIT = 16 << 20  # bytes a row may take
OBS_OFFSET = 128  # the observation starts a row's third cache line
BUCKETS = (32, 48, 64, 96, 128, 160)  # entity counts a batch pads to (CUDA graphs are captured per bucket)
HEADER_SIZE = 4096
PAGE = 4096  # rows fill whole pages: each game's segment maps into the table's view on its own

FLAG_FIRST = 1
FLAG_DONE = 2
FLAG_TRUNCATED = 4
FLAG_TIME_LIMIT = 8  # with DONE: the game's own time limit ended the episode, its result its tie-break's
FLAGS_KNOWN = FLAG_FIRST | FLAG_DONE | FLAG_TRUNCATED | FLAG_TIME_LIMIT

STATE_RUN = 1
STATE_STOP = 2

EXIT_OK = 0
EXIT_ATTACH = 65
EXIT_LAYOUT = 66
EXIT_CHECK = 67
EXIT_LOST = 68
EXIT_INJECT = 69
EXIT_ADAPTER = 70
EXIT_KILLED = 71
EXIT_CRASH = 72
EXIT_NO_STEP = 73
EXIT_MSGBOX = 74
EXIT_NAMES = {
    EXIT_ATTACH: "could not attach to the table or its doorbells",
    EXIT_LAYOUT: "attached to rows of another layout (its line says: another shim version, or a row shape it was not written for)",
    EXIT_CHECK: "an answer failed the game's check",
    EXIT_LOST: "lost the supervisor",
    EXIT_INJECT: "could not be injected (the launcher named the DLL and the cause)",
    EXIT_ADAPTER: "its adapter failed or crashed",
    EXIT_KILLED: "was killed from outside (its launcher saw it end without exiting)",
    EXIT_CRASH: "crashed (a Windows exception nobody handled: its code is in the game's stderr)",
    EXIT_NO_STEP: "never reached its step point within step_deadline_s (the hook named it)",
    EXIT_MSGBOX: "showed a message box, which would wait for a click (the hook said its text)",
}

HEADER_DTYPE = np.dtype(
    {
        "names": [
            "magic", "version", "header_size", "layout_hash", "row_size", "n_rows",
            "e_max", "f_ent", "g_glob", "n_heads", "head_max", "state", "run_id", "row0",
        ],
        "formats": ["<u8", "<u4", "<u4", "<u8", "<u4", "<u4",
                    "<u4", "<u4", "<u4", "<u4", "<u4", "<u4", "<u8", "<u4"],
        "offsets": [0, 8, 12, 16, 24, 28, 32, 36, 40, 44, 48, 52, 56, 64],
        "itemsize": HEADER_SIZE,
    }
)

# The row's fixed part, (name, numpy format, offset) as the C struct lays it out: the
# counters in the first cache line, the answer in the second.
_HEAD_FIELDS = [
    ("obs_seq", "<u8", 0),
    ("act_seq", "<u8", 8),
    ("row_magic", "<u4", 16),
    ("lane", "<u4", 20),
    ("side", "<u4", 24),
    ("flags", "<u4", 28),
    ("episode", "<u8", 32),
    ("step", "<u4", 40),
    ("n_ent", "<u4", 44),
    ("reward", "<f4", 48),
    ("discarded", "<u4", 52),
    ("state_hash", "<u8", 56),
    ("action", ("<i4", (HEADS_MAX,)), 64),
    ("policy_version", "<u4", 96),
]


def _fnv_word(h: int, w: int) -> int:
    for i in range(4):
        h ^= (w >> (8 * i)) & 0xFF
        h = (h * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def _observation_offsets(e_max: int, f_ent: int, g_glob: int, n_heads: int,
                         head_max: int) -> tuple[int, int, int, int, int]:
    """(glob, ent, ent_type, mask, end): each field right after the one before, from
    OBS_OFFSET, as w3s_layout_make() lays them."""
    glob = OBS_OFFSET
    ent = glob + 4 * g_glob
    ent_type = ent + 4 * e_max * f_ent
    mask = ent_type + 2 * e_max
    return glob, ent, ent_type, mask, mask + n_heads * head_max


class Layout:
    """A row shape and where each field of a row lies: the same arithmetic as
    w3s_layout_make() in shim/w3s_table.h. The observation follows the fixed part at
    OBS_OFFSET: glob float[g_glob], ent float[e_max][f_ent], ent_type int16[e_max], mask
    uint8[n_heads][head_max], each right after the one before; rows are whole pages."""

    __slots__ = ("e_max", "f_ent", "g_glob", "n_heads", "head_max", "offsets", "obs_end", "row_size",
                 "row_dtype", "hash")

    def __init__(self, e_max: int, f_ent: int, g_glob: int, n_heads: int, head_max: int):
        problem = shape_problem(e_max, f_ent, g_glob, n_heads, head_max)
        if problem:
            raise ValueError(problem)
        f_ent = f_ent if e_max else 0
        self.e_max, self.f_ent, self.g_glob, self.n_heads, self.head_max = e_max, f_ent, g_glob, n_heads, head_max
        glob, ent, ent_type, mask, self.obs_end = _observation_offsets(e_max, f_ent, g_glob, n_heads, head_max)
        self.row_size = (self.obs_end + PAGE - 1) // PAGE * PAGE
        self.offsets = {"glob": glob, "ent": ent, "ent_type": ent_type, "mask": mask}
        names = [n for n, _, _ in _HEAD_FIELDS] + ["glob", "ent", "ent_type", "mask"]
        formats = [f for _, f, _ in _HEAD_FIELDS] + [
            ("<f4", (g_glob,)), ("<f4", (e_max, f_ent)), ("<i2", (e_max,)), ("u1", (n_heads, head_max))]
        offs = [o for _, _, o in _HEAD_FIELDS] + [glob, ent, ent_type, mask]
        self.row_dtype = np.dtype({"names": names, "formats": formats, "offsets": offs, "itemsize": self.row_size})
        h = 0xCBF29CE484222325
        for w in (VERSION, self.row_size, e_max, f_ent, g_glob, n_heads, head_max):
            h = _fnv_word(h, w)
        for name, _, off in _HEAD_FIELDS:
            h = _fnv_word(_fnv_word(h, off), self.row_dtype.fields[name][0].itemsize)
        for w in (glob, ent, ent_type, mask, self.obs_end):
            h = _fnv_word(h, w)
        self.hash = h

    @property
    def buckets(self) -> tuple[int, ...]:
        """The entity counts a batch pads to: BUCKETS under e_max, then e_max."""
        return tuple(b for b in BUCKETS if b < self.e_max) + (self.e_max,)

    @property
    def shape(self) -> tuple[int, int, int, int, int]:
        """(e_max, f_ent, g_glob, n_heads, head_max): what the header and W3S_ROW_SHAPE carry."""
        return self.e_max, self.f_ent, self.g_glob, self.n_heads, self.head_max

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Layout) and self.shape == other.shape

    def __hash__(self) -> int:
        return hash(self.shape)

    def __repr__(self) -> str:
        return (f"Layout({self.e_max} entities x {self.f_ent} features, {self.g_glob} globals, "
                f"{self.n_heads} heads of {self.head_max}; {self.row_size} bytes a row)")

    def describe(self) -> str:
        """One line for a run's start: the shape and the bytes a row takes."""
        used = self.obs_end
        return (f"rows of {self.row_size} bytes ({used} used): {self.e_max} entities x {self.f_ent} features, "
                f"{self.g_glob} globals, {self.n_heads} action head{'s' * (self.n_heads != 1)} of up to "
                f"{self.head_max} choices")


def shape_problem(e_max: int, f_ent: int, g_glob: int, n_heads: int, head_max: int) -> str | None:
    """What is wrong with a row shape, or None: the ranges w3s_layout_make() accepts."""
    if not 0 <= e_max <= E_LIMIT:
        return f"entities = {e_max}: must be 0..{E_LIMIT}"
    if not (1 if e_max else 0) <= f_ent <= F_LIMIT:
        return f"features = {f_ent}: must be 1..{F_LIMIT} (features of each of the {e_max} entities)"
    if not 0 <= g_glob <= G_LIMIT:
        return f"globals = {g_glob}: must be 0..{G_LIMIT}"
    if e_max == 0 and g_glob == 0:
        return "entities = 0 and globals = 0: an observation needs one of them"
    if not 1 <= n_heads <= HEADS_MAX:
        return f"{n_heads} action heads: a row has 1..{HEADS_MAX}"
    if not 1 <= head_max <= CHOICE_LIMIT:
        return f"a head of {head_max} choices: must be 1..{CHOICE_LIMIT}"
    end = _observation_offsets(e_max, f_ent, g_glob, n_heads, head_max)[-1]
    if end > ROW_SIZE_LIMIT:
        return f"a row of {end} bytes: more than the {ROW_SIZE_LIMIT} a row may take"
    return None


DEFAULT = Layout(E_MAX, F_ENT, G_GLOB, N_HEADS, HEAD_MAX)
"""The default shape's layout: the duel's and the null game's rows."""
ROW_DTYPE = DEFAULT.row_dtype
ROW_SIZE = DEFAULT.row_size
LAYOUT_HASH = DEFAULT.hash


def layout_hash(lay: Layout = DEFAULT) -> int:
    """The same FNV-1a as w3s_layout_hash() in shim/w3s_table.h."""
    return lay.hash


_HEAD_SALT = np.array([(h * 0x27D4EB2F) & 0xFFFFFFFF for h in range(HEADS_MAX)], np.uint32)


def check_answer(obs_seq: np.ndarray, lane: np.ndarray, side: np.ndarray, head: int | None = None,
                 n_heads: int = N_HEADS) -> np.ndarray:
    """w3s_check_answer() for arrays: the answers the null game expects in check mode.
    With head=None, the first n_heads heads at once: an (n, n_heads) array."""
    x = obs_seq.astype(np.uint32) * np.uint32(0x9E3779B1)
    x ^= lane.astype(np.uint32) * np.uint32(0x85EBCA77)
    x ^= side.astype(np.uint32) * np.uint32(0xC2B2AE3D)
    x = x[:, None] ^ (_HEAD_SALT[None, :n_heads] if head is None else _HEAD_SALT[None, head : head + 1])
    x ^= x >> np.uint32(15)
    x &= np.uint32(0x7FFF)
    return x.view(np.int32) if head is None else x[:, 0].view(np.int32)
