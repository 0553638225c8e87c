"""The shared table of rows: the one place that allocates and lays out shared memory.

The table is the run's rows side by side; each game's rows live in a segment of their
own, made anew at each start of the game (posix_ipc, so that no multiprocessing
resource tracker unlinks it behind our back): a header page the game reads, then its
rows. The supervisor maps every game's rows into one contiguous view (MAP_FIXED over a
reserved region; rows are whole pages, so each game's range maps on its own), so that
`Table.rows` is one structured array over every row and `Table.column` gives strided
views for the hot path. A game maps only its own segment: it cannot write the header
another game reads, nor another game's rows (docs/protocol.md, "The untrusted game").
"""

from __future__ import annotations

import ctypes
import mmap
import os
import secrets
import weakref
from typing import NamedTuple

import numpy as np
import posix_ipc

from w3async.sync import layout

SHM_PREFIX = "/w3a-"

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
_MAP_FIXED = 0x10  # Linux's value on every architecture we run on; Python's mmap module does not export it
_MAP_FAILED = ctypes.c_void_p(-1).value


def segment_prefix() -> str:
    """SHM_PREFIX, or $W3ASYNC_SHM_PREFIX (which must start with it): the tests tag their
    segments with their pid so that a leak check never touches another process's."""
    p = os.environ.get("W3ASYNC_SHM_PREFIX", SHM_PREFIX)
    if not p.startswith(SHM_PREFIX) or "/" in p[1:]:
        raise ValueError(f"W3ASYNC_SHM_PREFIX={p!r} must start with {SHM_PREFIX!r} and hold no other '/'")
    return p


def segment_name(run_tag: str) -> str:
    """A table name for a run: its games' segments are named after it, and the prefix lets
    a later run find what a killed one left."""
    return f"{segment_prefix()}{run_tag}-{secrets.token_hex(4)}"


class GameSegment(NamedTuple):
    """Where a game finds its rows: the segment's name (native games, shm_open) and its
    file (/dev/shm/..., what a Windows game maps through Z:)."""

    name: str
    path: str


def _mmap(addr: int | None, size: int, prot: int, flags: int, fd: int = -1, offset: int = 0) -> int:
    p = _libc.mmap(addr, size, prot, flags, fd, offset)
    if p in (None, _MAP_FAILED):
        e = ctypes.get_errno()
        raise OSError(e, f"mmap({size} bytes at {addr or 0:#x}, fd {fd}) failed: {os.strerror(e)}")
    return p


class Table:
    """A view of `n_rows` rows (`lay.row_dtype`: the run's row shape, the default's
    unless given) after a header page, the rows of each game in `games` ((row0, nrows)
    ranges; default one game holding every row) backed by that game's own segment."""

    def __init__(self, name: str, n_rows: int, *, games: list[tuple[int, int]] | None = None, run_id: int = 0,
                 lay: layout.Layout = layout.DEFAULT):
        if not name.startswith("/") or "/" in name[1:]:
            raise ValueError(f"shared-memory name {name!r} must look like '/w3a-...' (one leading slash)")
        if n_rows <= 0:
            raise ValueError(f"a table needs at least one row, got n_rows={n_rows}")
        if mmap.PAGESIZE != layout.PAGE:
            raise OSError(f"the page size is {mmap.PAGESIZE} bytes; the table's rows are laid out for {layout.PAGE}")
        games = [(0, n_rows)] if games is None else list(games)
        covered = np.zeros(n_rows, np.int32)
        for row0, nrows in games:
            if nrows <= 0 or row0 < 0 or row0 + nrows > n_rows:
                raise ValueError(f"game rows {row0}..{row0 + nrows} are not in a table of {n_rows} rows")
            covered[row0 : row0 + nrows] += 1
        if (covered > 1).any():
            raise ValueError(f"games' row ranges overlap: {games}")
        self.name = name
        self.layout = lay
        self.row_size = lay.row_size
        self.n_rows = n_rows
        self.run_id = run_id
        self.games = games
        self.size = layout.HEADER_SIZE + n_rows * self.row_size
        # The view: private anonymous pages (the supervisor's own header, rows of no game)
        # until each game's segment is mapped over its rows. Unmapped when the last view of
        # it is gone (numpy holds a reference to the buffer), never under a live array.
        self._addr = _mmap(None, self.size, mmap.PROT_READ | mmap.PROT_WRITE, mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        self._buf = (ctypes.c_char * self.size).from_address(self._addr)
        weakref.finalize(self._buf, _libc.munmap, self._addr, self.size)
        self.header = np.ndarray((), layout.HEADER_DTYPE, buffer=self._buf, offset=0)
        self.rows = np.ndarray((n_rows,), lay.row_dtype, buffer=self._buf, offset=layout.HEADER_SIZE)
        self._fill_header(self.header, 0, n_rows)
        self._segments: list[tuple[str, mmap.mmap] | None] = [None] * len(games)
        self._starts = [0] * len(games)
        try:
            for g in range(len(games)):
                self.renew(g)
        except BaseException:
            self.unlink()
            raise

    @property
    def rows_buffer(self) -> memoryview:
        """The rows as one writable buffer (what the C gatherer reads)."""
        return memoryview(self._buf).cast("B")[layout.HEADER_SIZE : self.size]

    def segment(self, game: int) -> GameSegment:
        """The segment game `game` attaches to now."""
        name = self._segments[game][0]
        return GameSegment(name, "/dev/shm/" + name[1:])

    def renew(self, game: int) -> GameSegment:
        """A fresh segment for game `game` (before each start): zeroed rows and a header
        of its own, mapped over its rows in the view. The previous segment is unlinked: a
        process of an earlier start that is somehow still alive writes into pages nobody
        reads any more."""
        row0, nrows = self.games[game]
        self._starts[game] += 1
        name = f"{self.name}-{game}-{self._starts[game]}"
        size = layout.HEADER_SIZE + nrows * self.row_size
        shm = posix_ipc.SharedMemory(name, posix_ipc.O_CREX, mode=0o600, size=size)
        try:
            head = mmap.mmap(shm.fd, layout.HEADER_SIZE)
            _mmap(self._addr + layout.HEADER_SIZE + row0 * self.row_size, nrows * self.row_size,
                  mmap.PROT_READ | mmap.PROT_WRITE, mmap.MAP_SHARED | _MAP_FIXED, shm.fd, layout.HEADER_SIZE)
        except BaseException:
            shm.close_fd()
            shm.unlink()
            raise
        shm.close_fd()
        self._fill_header(np.ndarray((), layout.HEADER_DTYPE, buffer=head), row0, nrows)
        self._drop(game)
        self._segments[game] = (name, head)
        return self.segment(game)

    def _fill_header(self, h: np.ndarray, row0: int, nrows: int) -> None:
        h["version"] = layout.VERSION
        h["header_size"] = layout.HEADER_SIZE
        h["layout_hash"] = self.layout.hash
        h["row_size"] = self.row_size
        h["n_rows"] = nrows
        h["row0"] = row0
        h["e_max"], h["f_ent"], h["g_glob"], h["n_heads"], h["head_max"] = self.layout.shape
        h["state"] = layout.STATE_RUN
        h["run_id"] = self.run_id
        h["magic"] = layout.MAGIC  # last: a reader that sees the magic sees the rest

    def header_intact(self, game: int) -> bool:
        """Whether game's header is as the supervisor wrote it (magic, layout, row count)
        and not set to stop: an exit 0 behind a header the game forged is no recycle."""
        seg = self._segments[game]
        if seg is None:
            return False
        h = np.ndarray((), layout.HEADER_DTYPE, buffer=seg[1])
        return bool(h["magic"] == layout.MAGIC and h["layout_hash"] == self.layout.hash
                    and h["row_size"] == self.row_size and h["state"] == layout.STATE_RUN)

    def _drop(self, game: int) -> None:
        seg = self._segments[game]
        if seg is None:
            return
        self._segments[game] = None
        unlink_segment(seg[0])
        try:
            seg[1].close()
        except BufferError:
            pass  # a header view is still exported: the mapping goes with it

    def column(self, field: str) -> np.ndarray:
        """A strided view of one field over every row."""
        return self.rows[field]

    def reset_rows(self, start: int, stop: int) -> None:
        """Zero rows [start, stop) in place."""
        self.rows[start:stop] = np.zeros((), self.layout.row_dtype)

    def request_stop(self) -> None:
        """Ask every game to exit at its next wait (W3S_STATE_STOP in each game's header)."""
        self.header["state"] = layout.STATE_STOP
        for seg in self._segments:
            if seg is not None and not seg[1].closed:
                np.ndarray((), layout.HEADER_DTYPE, buffer=seg[1])["state"] = layout.STATE_STOP

    def close(self) -> None:
        """Drop the views and the segments' headers. Views handed out keep the table's
        mapping alive until they are gone, so close() never invalidates live arrays."""
        self.header = self.rows = None  # type: ignore[assignment]
        self._buf = None  # type: ignore[assignment]
        for seg in self._segments:
            if seg is not None:
                try:
                    seg[1].close()
                except BufferError:
                    pass

    def unlink(self) -> None:
        """Remove every game segment's name; idempotent."""
        for seg in self._segments:
            if seg is not None:
                unlink_segment(seg[0])


def unlink_segment(name: str) -> bool:
    """Unlink a segment by name; False when it was already gone."""
    try:
        posix_ipc.unlink_shared_memory(name)
        return True
    except posix_ipc.ExistentialError:
        return False


def list_segments(prefix: str = SHM_PREFIX) -> list[str]:
    """Names ('/w3a-...') of the segments in /dev/shm that start with prefix."""
    base = prefix.lstrip("/")
    try:
        return sorted("/" + n for n in os.listdir("/dev/shm") if n.startswith(base))
    except FileNotFoundError:
        return []
