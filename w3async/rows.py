"""The shared table of rows: the one place that allocates and lays out shared memory.

The supervisor creates the segment (posix_ipc, so that no multiprocessing resource
tracker unlinks it behind our back), writes the header, and everyone else gets numpy
views of it: `Table.rows` is a structured array over every row, `Table.columns` the
per-field views the hot path uses.
"""

from __future__ import annotations

import mmap
import os
import secrets

import numpy as np
import posix_ipc

from . import layout

SHM_PREFIX = "/w3a-"


def segment_prefix() -> str:
    """SHM_PREFIX, or $W3ASYNC_SHM_PREFIX (which must start with it): the tests tag their
    segments with their pid so that a leak check never touches another process's."""
    p = os.environ.get("W3ASYNC_SHM_PREFIX", SHM_PREFIX)
    if not p.startswith(SHM_PREFIX) or "/" in p[1:]:
        raise ValueError(f"W3ASYNC_SHM_PREFIX={p!r} must start with {SHM_PREFIX!r} and hold no other '/'")
    return p


def segment_name(run_tag: str) -> str:
    """A segment name for a run: the prefix lets a later run find what a killed one left."""
    return f"{segment_prefix()}{run_tag}-{secrets.token_hex(4)}"


class Table:
    """A mapped table of `n_rows` rows (layout.ROW_DTYPE) after a header page."""

    def __init__(self, name: str, n_rows: int, *, create: bool = True, run_id: int = 0):
        if not name.startswith("/") or "/" in name[1:]:
            raise ValueError(f"shared-memory name {name!r} must look like '/w3a-...' (one leading slash)")
        if n_rows <= 0:
            raise ValueError(f"a table needs at least one row, got n_rows={n_rows}")
        self.name = name
        self.n_rows = n_rows
        self.size = layout.HEADER_SIZE + n_rows * layout.ROW_SIZE
        self._owner = create
        flags = posix_ipc.O_CREX if create else 0
        shm = posix_ipc.SharedMemory(name, flags, mode=0o600, size=self.size if create else 0)
        try:
            if shm.size < self.size:
                raise ValueError(f"segment {name} is {shm.size} bytes, {n_rows} rows need {self.size}")
            self._mmap = mmap.mmap(shm.fd, self.size)
        except BaseException:
            shm.close_fd()
            if create:
                shm.unlink()
            raise
        shm.close_fd()
        self.header = np.ndarray((), layout.HEADER_DTYPE, buffer=self._mmap, offset=0)
        self.rows = np.ndarray((n_rows,), layout.ROW_DTYPE, buffer=self._mmap, offset=layout.HEADER_SIZE)
        if create:
            h = self.header
            h["version"] = layout.VERSION
            h["header_size"] = layout.HEADER_SIZE
            h["layout_hash"] = layout.LAYOUT_HASH
            h["row_size"] = layout.ROW_SIZE
            h["n_rows"] = n_rows
            h["e_max"], h["f_ent"], h["g_glob"] = layout.E_MAX, layout.F_ENT, layout.G_GLOB
            h["n_heads"], h["head_max"] = layout.N_HEADS, layout.HEAD_MAX
            h["state"] = layout.STATE_RUN
            h["run_id"] = run_id
            h["magic"] = layout.MAGIC  # last: a reader that sees the magic sees the rest

    @property
    def path(self) -> str:
        """The segment as a file (/dev/shm/...): what a Windows game maps through Z:."""
        return "/dev/shm/" + self.name[1:]

    def column(self, field: str) -> np.ndarray:
        """A strided view of one field over every row."""
        return self.rows[field]

    def reset_rows(self, start: int, stop: int) -> None:
        """Zero rows [start, stop): done before a game (re)starts on them, so no answer
        or sequence number of its predecessor survives."""
        self.rows[start:stop] = np.zeros((), layout.ROW_DTYPE)

    def request_stop(self) -> None:
        """Ask every game to exit at its next wait (W3S_STATE_STOP)."""
        self.header["state"] = layout.STATE_STOP

    def close(self) -> None:
        """Drop the views and unmap. Views handed out keep the mapping alive until they
        are gone (numpy holds a reference), so close() never invalidates live arrays."""
        self.header = self.rows = None  # type: ignore[assignment]
        try:
            self._mmap.close()
        except BufferError:
            pass  # views still exported: the mapping goes with the last of them

    def unlink(self) -> None:
        """Remove the segment's name; idempotent."""
        unlink_segment(self.name)


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
