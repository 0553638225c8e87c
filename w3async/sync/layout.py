"""The shared table's layout, mirrored from shim/w3s_table.h as numpy dtypes.

Nothing here allocates: rows.py maps the segment and hands out views with these
dtypes. tests/shim/test_layout.py compiles a program that prints every offset and
size of the C structs and checks them against ROW_DTYPE and HEADER_DTYPE, and that
layout_hash() equals the C w3s_layout_hash().
"""

from __future__ import annotations

import numpy as np

MAGIC = 0x3143595341335733  # "W3ASYNC1"
VERSION = 2
ROW_MAGIC = 0x77337277

E_MAX = 160  # entities per observation
F_ENT = 16  # float features per entity
G_GLOB = 32  # global float features
N_HEADS = 4  # action heads
HEAD_MAX = 192  # choices per head
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
    EXIT_LAYOUT: "attached with the wrong layout version",
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

# (name, numpy format) in declaration order; offsets follow C's natural alignment.
_ROW_FIELDS = [
    ("obs_seq", "<u8"),
    ("act_seq", "<u8"),
    ("row_magic", "<u4"),
    ("lane", "<u4"),
    ("side", "<u4"),
    ("flags", "<u4"),
    ("episode", "<u8"),
    ("step", "<u4"),
    ("n_ent", "<u4"),
    ("reward", "<f4"),
    ("discarded", "<u4"),
    ("state_hash", "<u8"),
    ("action", ("<i4", (N_HEADS,))),
    ("policy_version", "<u4"),
    ("glob", ("<f4", (G_GLOB,))),
    ("ent", ("<f4", (E_MAX, F_ENT))),
    ("ent_type", ("<i2", (E_MAX,))),
    ("mask", ("u1", (N_HEADS, HEAD_MAX))),
]
# Where the C struct pads: the answer block starts a cache line, the observation the next.
_ALIGN_BEFORE = {"action": 64, "glob": 128}


def _row_dtype() -> np.dtype:
    names, formats, offsets = [], [], []
    off = 0
    for name, fmt in _ROW_FIELDS:
        dt = np.dtype(fmt)
        align = dt.base.alignment
        off = (off + align - 1) // align * align
        if name in _ALIGN_BEFORE:
            off = _ALIGN_BEFORE[name]
        names.append(name)
        formats.append(fmt)
        offsets.append(off)
        off += dt.itemsize
    itemsize = (off + PAGE - 1) // PAGE * PAGE
    return np.dtype({"names": names, "formats": formats, "offsets": offsets, "itemsize": itemsize})


ROW_DTYPE = _row_dtype()
ROW_SIZE = ROW_DTYPE.itemsize


def _fnv_word(h: int, w: int) -> int:
    for i in range(4):
        h ^= (w >> (8 * i)) & 0xFF
        h = (h * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def layout_hash() -> int:
    """The same FNV-1a as w3s_layout_hash() in shim/w3s_table.h."""
    h = 0xCBF29CE484222325
    for w in (VERSION, ROW_SIZE, E_MAX, F_ENT, G_GLOB, N_HEADS, HEAD_MAX):
        h = _fnv_word(h, w)
    for name, _ in _ROW_FIELDS:
        off = ROW_DTYPE.fields[name][1]
        h = _fnv_word(h, off)
        h = _fnv_word(h, ROW_DTYPE.fields[name][0].itemsize)
    return h


LAYOUT_HASH = layout_hash()


_HEAD_SALT = np.array([(h * 0x27D4EB2F) & 0xFFFFFFFF for h in range(N_HEADS)], np.uint32)


def check_answer(obs_seq: np.ndarray, lane: np.ndarray, side: np.ndarray, head: int | None = None) -> np.ndarray:
    """w3s_check_answer() for arrays: the answers the null game expects in check mode.
    With head=None, all heads at once: an (n, N_HEADS) array."""
    x = obs_seq.astype(np.uint32) * np.uint32(0x9E3779B1)
    x ^= lane.astype(np.uint32) * np.uint32(0x85EBCA77)
    x ^= side.astype(np.uint32) * np.uint32(0xC2B2AE3D)
    x = x[:, None] ^ (_HEAD_SALT[None, :] if head is None else _HEAD_SALT[None, head : head + 1])
    x ^= x >> np.uint32(15)
    x &= np.uint32(0x7FFF)
    return x.view(np.int32) if head is None else x[:, 0].view(np.int32)
