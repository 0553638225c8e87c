"""Atomic checkpoints in runs/<run>/checkpoints/, and a `latest` pointer.

    save_checkpoint(run_dir, learner=learner.state_dict(), counters={...},
                    league=league.state_dict(), recipe=resolved_recipe_dict)
    ckpt = load_latest(run_dir)          # None for a fresh run
    learner.load_state_dict(ckpt["learner"]); league.load_state_dict(ckpt["league"]); ...

Every file is written the same way (atomic_save): a temporary file in the same folder,
flushed and fsync'ed, renamed over its name, then the folder fsync'ed so that the
rename itself survives a crash. The `latest` pointer (a one-line text file naming the
checkpoint) is written the same way after the checkpoint, so a crash or an error at any
point leaves `latest` naming a complete checkpoint: the previous one or the new one.
load_latest() also falls back to the newest checkpoint that loads if the pointer is
missing or names a file that does not load (a disk error, a hand edit).

A checkpoint is a dict of tensors and plain Python values (loaded with
torch.load(weights_only=True): nothing in it runs code):
    format: 1, learner: Learner.state_dict(), counters: dict, league: League.state_dict(),
    recipe: the resolved recipe as a dict, saved_at: unix time.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any, BinaryIO

import torch

FORMAT = 1
CKPT_DIR = "checkpoints"
POINTER = "latest"


def _dump(obj: Any, f: BinaryIO) -> None:
    """The serialiser (a seam: the tests make it fail halfway)."""
    torch.save(obj, f)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: Path, write) -> None:
    """Call write(f) on a temporary file next to `path`, fsync it, rename it to `path`,
    fsync the folder. On any error the temporary file is removed, `path` is untouched
    (the old file, or none) and the error propagates."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with open(tmp, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _fsync_dir(path.parent)


def atomic_save(obj: Any, path: Path) -> None:
    """torch.save(obj) to `path` atomically (see atomic_write)."""
    atomic_write(path, lambda f: _dump(obj, f))


def save_checkpoint(
    run_dir: Path, *, learner: dict, counters: dict, league: dict, recipe: dict, keep: int = 3,
) -> Path:
    """Write checkpoint ckpt-<updates>.pt (updates = learner["version"]), then point
    `latest` at it, then delete all but the newest `keep` checkpoints."""
    ckdir = Path(run_dir) / CKPT_DIR
    ckdir.mkdir(parents=True, exist_ok=True)
    name = f"ckpt-{int(learner['version']):08d}.pt"
    payload = {"format": FORMAT, "learner": learner, "counters": dict(counters), "league": league,
               "recipe": recipe, "saved_at": time.time()}
    atomic_save(payload, ckdir / name)
    atomic_write(ckdir / POINTER, lambda f: f.write(name.encode() + b"\n"))
    for old in sorted(ckdir.glob("ckpt-*.pt"))[:-keep]:
        if old.name != name:
            old.unlink(missing_ok=True)
    return ckdir / name


def _load(path: Path) -> dict:
    ckpt = torch.load(path, map_location="cpu", weights_only=True)
    if not isinstance(ckpt, dict) or ckpt.get("format") != FORMAT:
        raise ValueError(f"{path}: not a w3async checkpoint of format {FORMAT}")
    return ckpt


def load_latest(run_dir: Path) -> dict | None:
    """The checkpoint `latest` names (or the newest that loads); None if there is none.
    The result has a `path` key added."""
    ckdir = Path(run_dir) / CKPT_DIR
    if not ckdir.is_dir():
        return None
    candidates = []
    pointer = ckdir / POINTER
    if pointer.exists():
        candidates.append(ckdir / pointer.read_text().strip())
    candidates += sorted(ckdir.glob("ckpt-*.pt"), reverse=True)
    errors = []
    for path in candidates:
        try:
            ckpt = _load(path)
        except Exception as e:  # noqa: BLE001 (try the next one; all errors are reported below)
            errors.append(f"{path.name}: {e}")
            continue
        ckpt["path"] = str(path)
        return ckpt
    if errors:
        raise RuntimeError(f"{ckdir}: no checkpoint loads: " + "; ".join(errors))
    return None
