"""Files written whole or not at all, and files removed whether or not they are there.

The one place for both (w3async/sync keeps its own `unlink(missing_ok=True)`: it imports
nothing else of the package).

    atomic_write(path, lambda f: f.write(data))   # or atomic_write_text(path, "...")
    discard(path)                                 # True if removed, False if it was not there

atomic_write: a temporary file next to `path` (same folder, so the rename cannot cross
file systems), written, flushed and fsync'ed, renamed over `path`, then the folder
fsync'ed so that the rename itself survives a crash. On any error the temporary file is
removed and `path` is untouched (the old file, or none). An OSError (ENOSPC, EFBIG,
EROFS, EACCES, ENOTDIR, ...) becomes an `AtomicWriteError` naming `path` and the cause;
anything else propagates as it is. (SIGXFSZ: a process over RLIMIT_FSIZE is killed by
it unless it ignores it; then the write fails with EFBIG, like a full disk.)
"""

from __future__ import annotations

import errno as _errno
import os
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO


class AtomicWriteError(OSError):
    """A file that could not be written: `path`, `cause` ("No space left on device
    [ENOSPC]") and `errno`. An OSError, so callers that catch OSError still do."""

    def __init__(self, path: Path | str, cause: str, errno: int | None = None):
        super().__init__(errno, cause, str(path))
        self.path, self.cause = str(path), cause

    def __str__(self) -> str:
        return f"cannot write {self.path}: {self.cause}"


def describe(e: BaseException) -> str:
    """An error as a cause: "File too large [EFBIG]" for an OSError, else its repr."""
    if isinstance(e, OSError) and e.errno:
        return f"{os.strerror(e.errno)} [{_errno.errorcode.get(e.errno, e.errno)}]"
    return repr(e)


def fsync_dir(path: Path | str) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: Path | str, write: Callable[[BinaryIO], object]) -> None:
    """Call write(f) on a temporary file next to `path`, fsync it, rename it to `path`,
    fsync the folder; all or nothing (the module's docstring)."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        try:
            with open(tmp, "wb") as f:
                write(f)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException:
            discard(tmp, best_effort=True)  # the folder itself may be gone or unwritable: nothing was made there
            raise
        fsync_dir(path.parent)
    except OSError as e:
        raise AtomicWriteError(path, describe(e), e.errno) from e


def atomic_write_text(path: Path | str, text: str) -> None:
    """atomic_write of `text` in UTF-8."""
    data = text.encode()
    atomic_write(path, lambda f: f.write(data))


def discard(path: Path | str, *, best_effort: bool = False) -> bool:
    """Remove the file `path`: True if it was removed, False if it was not there. Any
    other OSError propagates, unless best_effort (a clean-up whose failure leaves only a
    harmless file behind), when it is False as well."""
    try:
        os.unlink(path)
        return True
    except FileNotFoundError:
        return False
    except OSError:
        if best_effort:
            return False
        raise
