"""Atomic checkpoints in runs/<run>/checkpoints/, and a `latest` pointer.

    save_checkpoint(run_dir, learner=learner.state_dict(), counters={...},
                    league=league.state_dict(), recipe=resolved_recipe_dict)
    ckpt = load_latest(run_dir)          # None for a fresh run
    learner.load_state_dict(ckpt["learner"]); league.load_state_dict(ckpt["league"]); ...

Every file is written the same way (atomic_save, over w3async.files.atomic_write): a
temporary file in the same folder, flushed and fsync'ed, renamed over its name, then the
folder fsync'ed so that the rename itself survives a crash. The `latest` pointer (a
one-line text file naming the checkpoint) is written the same way after the checkpoint, so a crash or an error at any
point leaves `latest` naming a complete checkpoint: the previous one or the new one.
Without a pointer (a crash between the first checkpoint's rename and the pointer's),
load_latest() takes the newest ckpt-*.pt.

A checkpoint is a dict of tensors and plain Python values (loaded with
torch.load(weights_only=True): nothing in it runs code):
    format: 1, learner: Learner.state_dict(), counters: dict, league: League.state_dict(),
    recipe: the resolved recipe as a dict, saved_at: unix time.

Errors are typed, with the file and the cause (issue 9, items 7 and 9):
- CheckpointWriteError: a write that failed (disk full ENOSPC, EFBIG, read-only EROFS,
  EACCES, a folder that is a file, ...). The temporary file is removed and the file it
  would have replaced is untouched, byte for byte; `latest` still names the previous
  checkpoint.
- CheckpointLoadError: a resume that cannot load everything (`latest` names a file that
  is missing, unreadable or not a checkpoint; a league snapshot it names is missing or
  corrupt; weights that do not fit the recipe's network). load_latest() never falls
  back to an older checkpoint behind the user's back: the run stops before it writes
  anything, and the message says which file and why.
"""

from __future__ import annotations

import io
import re
import time
from pathlib import Path
from typing import Any, BinaryIO

import torch

from w3async import files
from w3async.files import describe  # noqa: F401 (part of this module's API: league, training)
from w3async.runtime.answerer import RunFailure

FORMAT = 1
CKPT_DIR = "checkpoints"
POINTER = "latest"
BEST_PT = "best.pt"  # the best policy so far by evaluation (best.py keeps the rule)


class CheckpointError(RunFailure):
    """A checkpoint file that cannot be written or read: `path` (the file) and `cause`
    (what went wrong, e.g. "No space left on device [ENOSPC]")."""

    doing = "checkpoint file"

    def __init__(self, path: Path | str, cause: str, errno: int | None = None):
        self.path, self.cause, self.errno = str(path), cause, errno
        super().__init__(f"{self.doing} {self.path}: {cause}")


class CheckpointWriteError(CheckpointError):
    doing = "cannot write"


class CheckpointLoadError(CheckpointError):
    doing = "cannot resume from"


def _dump(obj: Any, f: BinaryIO) -> None:
    """The serialiser (a seam: the tests make it fail halfway). Serialised in memory,
    then written: torch.save's zip writer turns a failed write (ENOSPC, EFBIG) into a
    RuntimeError ("unexpected pos") that hides the cause; f.write raises the OSError."""
    buf = io.BytesIO()
    torch.save(obj, buf)
    f.write(buf.getbuffer())


def atomic_write(path: Path, write) -> None:
    """w3async.files.atomic_write (temporary file, fsync, rename, folder fsync; on any
    error the temporary file is removed and `path` is untouched), its OSError as a
    CheckpointWriteError naming `path`; anything else propagates as it is."""
    try:
        files.atomic_write(path, write)
    except files.AtomicWriteError as e:
        raise CheckpointWriteError(e.path, e.cause, e.errno) from e.__cause__


def atomic_save(obj: Any, path: Path) -> None:
    """torch.save(obj) to `path` atomically (see atomic_write)."""
    atomic_write(path, lambda f: _dump(obj, f))


def save_checkpoint(
    run_dir: Path, *, learner: dict, counters: dict, league: dict, recipe: dict, keep: int = 3,
) -> Path:
    """Write checkpoint ckpt-<updates>.pt (updates = learner["version"]), then point
    `latest` at it, then delete all but the newest `keep` checkpoints."""
    ckdir = Path(run_dir) / CKPT_DIR
    try:
        ckdir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise CheckpointWriteError(ckdir, describe(e), e.errno) from e
    name = f"ckpt-{int(learner['version']):08d}.pt"
    payload = {"format": FORMAT, "learner": learner, "counters": dict(counters), "league": league,
               "recipe": recipe, "saved_at": time.time()}
    atomic_save(payload, ckdir / name)
    atomic_write(ckdir / POINTER, lambda f: f.write(name.encode() + b"\n"))
    for old in sorted(ckdir.glob("ckpt-*.pt"))[:-keep]:
        if old.name != name:
            # the new checkpoint is complete and pointed at: an old file left is harmless
            files.discard(old, best_effort=True)
    return ckdir / name


def save_best(run_dir: Path, *, learner: dict, counters: dict, league: dict, recipe: dict, best: dict) -> Path:
    """Write checkpoints/best.pt (best.py: the best policy so far by evaluation), a
    checkpoint with a `best` record, atomically like every checkpoint. `latest` is not
    touched: a resume goes on from the last checkpoint."""

    ckdir = Path(run_dir) / CKPT_DIR
    try:
        ckdir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise CheckpointWriteError(ckdir, describe(e), e.errno) from e
    payload = {"format": FORMAT, "learner": learner, "counters": dict(counters), "league": league,
               "recipe": recipe, "saved_at": time.time(), "best": best}
    atomic_save(payload, ckdir / BEST_PT)
    return ckdir / BEST_PT


def load_checkpoint(path: Path | str) -> dict:
    """One checkpoint file (a ckpt-*.pt or best.pt), its `path` key added; CheckpointLoadError
    (the file and why) when it is missing, unreadable or not a checkpoint."""
    ckpt = _load(Path(path))
    ckpt["path"] = str(path)
    return ckpt


def read_file(path: Path | str) -> Any:
    """torch.load(weights_only=True) of one file (a checkpoint, a league snapshot), or
    CheckpointLoadError naming it: the OSError of opening it (missing, a folder, no
    permission), else "not a readable checkpoint" with torch's first line. The file is
    opened here, not by torch: torch raises OSError EINVAL for a zip cut short, which
    read as "Invalid argument" for a checkpoint that is only truncated."""
    try:
        f = open(path, "rb")
    except OSError as e:
        raise CheckpointLoadError(path, describe(e), e.errno) from e
    with f:
        try:
            return torch.load(f, map_location="cpu", weights_only=True)
        except Exception as e:  # noqa: BLE001 (torch raises many kinds for a corrupt or truncated file)
            first = " ".join(re.sub(r"\x1b\[[0-9;]*m", "", str(e)).split("\n")[0].split())[:160]  # torch's: paragraphs, colours
            raise CheckpointLoadError(path, f"not a readable checkpoint, truncated or corrupt ({type(e).__name__}: "
                                            f"{first})") from e


def _load(path: Path) -> dict:
    ckpt = read_file(path)
    if not isinstance(ckpt, dict) or ckpt.get("format") != FORMAT:
        raise CheckpointLoadError(path, f"not a w3async checkpoint of format {FORMAT}")
    missing = [k for k in ("learner", "counters", "league") if not isinstance(ckpt.get(k), dict)]
    if missing:
        raise CheckpointLoadError(path, f"the checkpoint lacks {missing}")
    return ckpt


def load_latest(run_dir: Path) -> dict | None:
    """The checkpoint `latest` names (without a pointer: the newest ckpt-*.pt); None
    for a run with no checkpoint. The result has a `path` key added. Raises
    CheckpointLoadError (the file and the cause) when that checkpoint does not load:
    never an older one in its place."""
    ckdir = Path(run_dir) / CKPT_DIR
    try:
        if not ckdir.exists():
            return None
        if not ckdir.is_dir():
            raise CheckpointLoadError(ckdir, "not a folder")
        pointer = ckdir / POINTER
        if pointer.exists():
            try:
                name = pointer.read_text().strip()
            except (OSError, UnicodeDecodeError) as e:
                raise CheckpointLoadError(pointer, describe(e)) from e
            if not name or "/" in name or name.startswith("."):
                raise CheckpointLoadError(pointer, f"names no checkpoint file ({name!r})")
            path = ckdir / name
        else:
            found = sorted(ckdir.glob("ckpt-*.pt"))
            if not found:
                return None
            path = found[-1]
    except OSError as e:
        raise CheckpointLoadError(ckdir, describe(e), e.errno) from e
    ckpt = _load(path)
    ckpt["path"] = str(path)
    return ckpt
