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

Every file written here (checkpoints, best.pt, league snapshots) carries a digest: the
file is MAGIC (8 bytes), the SHA-256 of the rest (32 bytes), then torch.save's zip. A
torch zip alone does not check itself (4 KiB of random bytes inside one loaded without
a word, the learner failed seconds later blaming its loss, and the last save wrote the
corrupt weights back as a sound file). The digest covers every byte after the header,
and a flip in the header breaks the magic or the digest, so any change to the file is
refused at load. torch.load of the whole file fails (no zip at its start): an
old reader refuses a new file, it cannot misread it. A file without the header (written
before digests, or by another tool) is refused unless the user trusts such files
(`--trust-undigested`: then loaded with a warning line on stderr, and a resumed run
records a `checkpoint_undigested` event); it is checked like every file for weights that
are not finite. Weights with NaN or infinity are refused at load.

Every checkpoint carries its run's identity (`run_id`, a file of the run folder made
with its first checkpoint): a resume refuses a checkpoint of another run or another
game copied into the folder, and `eval` of a run folder names it (`foreign`).

Errors are typed, with the file and the cause:
- CheckpointWriteError: a write that failed (disk full ENOSPC, EFBIG, read-only EROFS,
  EACCES, a folder that is a file, ...). The temporary file is removed and the file it
  would have replaced is untouched, byte for byte; `latest` still names the previous
  checkpoint.
- CheckpointLoadError: a resume that cannot load everything (`latest` names a file that
  is missing, unreadable or not a checkpoint; a league snapshot it names is missing or
  corrupt; weights that do not fit the recipe's network; a digest that does not match;
  a weight that is NaN or infinite). load_latest() never falls back to an older
  checkpoint behind the user's back: the run stops before it writes anything, and the
  message says which file and why. Asked (checkpoint.fallback = true), it takes the
  newest checkpoint that passes, naming every one it refused (resume.py).
"""

from __future__ import annotations

import hashlib
import io
import re
import secrets
import time
from pathlib import Path
from typing import Any, BinaryIO

import torch

from w3async import files
from w3async.files import describe  # noqa: F401 (part of this module's API: league, training)
from w3async.observe.logs import console
from w3async.run_folder import RunFolder
from w3async.runtime.answerer import RunFailure

FORMAT = 1
MAGIC = b"W3CKPT\x00\x01"  # not a zip's "PK\x03\x04": torch.load of a digested file fails, never misreads
DIGEST_LEN = 32  # SHA-256
HEADER_LEN = len(MAGIC) + DIGEST_LEN
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
    """The serialiser (a seam: the tests make it fail halfway): MAGIC, the digest, the
    zip. Serialised in memory, then written: torch.save's zip writer turns a failed write
    (ENOSPC, EFBIG) into a RuntimeError ("unexpected pos") that hides the cause; f.write
    raises the OSError."""
    buf = io.BytesIO()
    torch.save(obj, buf)
    payload = buf.getbuffer()
    f.write(MAGIC + hashlib.sha256(payload).digest())
    f.write(payload)


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
    ckdir = RunFolder(run_dir).checkpoints
    try:
        ckdir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise CheckpointWriteError(ckdir, describe(e), e.errno) from e
    name = f"ckpt-{int(learner['version']):08d}.pt"
    payload = {"format": FORMAT, "learner": learner, "counters": dict(counters), "league": league,
               "recipe": recipe, "saved_at": time.time(), "run_id": run_id(run_dir, make=True)}
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

    ckdir = RunFolder(run_dir).checkpoints
    try:
        ckdir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise CheckpointWriteError(ckdir, describe(e), e.errno) from e
    payload = {"format": FORMAT, "learner": learner, "counters": dict(counters), "league": league,
               "recipe": recipe, "saved_at": time.time(), "best": best, "run_id": run_id(run_dir, make=True)}
    atomic_save(payload, ckdir / BEST_PT)
    return ckdir / BEST_PT


def load_checkpoint(path: Path | str) -> dict:
    """One checkpoint file (a ckpt-*.pt or best.pt), its `path` key added, and `digested`
    (False: a file without a digest, loaded because the user trusts such files);
    CheckpointLoadError (the file and why) when it is missing, unreadable or not a
    checkpoint."""
    ckpt = _load(Path(path))
    ckpt["path"] = str(path)
    ckpt["digested"] = Path(path).open("rb").read(len(MAGIC)) == MAGIC
    return ckpt


RUN_ID = "run_id"  # a run folder's identity, made with its first checkpoint: every checkpoint carries it


def run_id(run_dir: Path | str, make: bool = False) -> str | None:
    """The run folder's identity (its run_id file), made now with `make` where it has none
    (a run's first checkpoint); None for a folder without one (a run of before identities)."""
    path = Path(run_dir) / RUN_ID
    try:
        return path.read_text().strip() or None
    except FileNotFoundError:
        if not make:
            return None
    except OSError as e:
        raise CheckpointWriteError(path, describe(e), e.errno) from e
    made = secrets.token_hex(8)
    atomic_write(path, lambda f: f.write(made.encode() + b"\n"))
    return made


def foreign(ckpt: dict, run_dir: Path | str, game: str | None = None) -> str | None:
    """Why a checkpoint is not its run folder's (another run's file copied in: its run id,
    or a checkpoint of another game), else None. A checkpoint or a folder from before
    identities passes."""
    mine, theirs = run_id(run_dir), ckpt.get("run_id")
    recipe = ckpt.get("recipe") if isinstance(ckpt.get("recipe"), dict) else {}
    if mine and theirs and mine != theirs:
        return (f"a checkpoint of another run (run id {theirs}, recipe {recipe.get('name')!r}), not of "
                f"{run_dir} (run id {mine}): it was copied in from elsewhere")
    if game and recipe.get("game") and recipe.get("game") != game:
        return f"a checkpoint of the game {recipe.get('game')!r}, not of this recipe's {game!r}"
    return None


# Files without a digest are refused unless the user trusts them (`--trust-undigested` of
# `w3async run` and `eval`): nothing vouches for their bytes, and a run that loaded one
# would write its weights back under a valid digest.
_trust = {"undigested": False}


def trust_undigested(on: bool = True) -> None:
    """Load files without a digest (with a warning) instead of refusing them."""
    _trust["undigested"] = on


def read_file(path: Path | str) -> Any:
    """torch.load(weights_only=True) of one file (a checkpoint, a league snapshot) after
    its digest is checked, or CheckpointLoadError naming it: the OSError of opening it
    (missing, a folder, no permission); "its digest does not match"; "not a readable
    checkpoint" with torch's first line; "a weight ... is not finite". The file is read
    here, not by torch: torch raises OSError EINVAL for a zip cut short, which read as
    "Invalid argument" for a checkpoint that is only truncated."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise CheckpointLoadError(path, describe(e), e.errno) from e
    if len(data) < HEADER_LEN and MAGIC.startswith(data[: len(MAGIC)]):  # empty, or cut inside the header
        raise CheckpointLoadError(path, f"truncated: {len(data)} bytes, less than its {HEADER_LEN}-byte header")
    if data[: len(MAGIC)] == MAGIC:
        payload = memoryview(data)[HEADER_LEN:]
        if hashlib.sha256(payload).digest() != data[len(MAGIC) : HEADER_LEN]:
            raise CheckpointLoadError(path, f"truncated or corrupt: its digest does not match ({len(data):,} bytes; "
                                            f"the SHA-256 of bytes {HEADER_LEN}.. is kept in bytes {len(MAGIC)}.."
                                            f"{HEADER_LEN - 1}): the file changed after it was written; refused "
                                            f"(for a resume, checkpoint.fallback = true takes an older checkpoint "
                                            f"that passes)")
    else:
        payload = memoryview(data)
    try:
        obj = torch.load(io.BytesIO(payload), map_location="cpu", weights_only=True)
    except Exception as e:  # noqa: BLE001 (torch raises many kinds for a corrupt or truncated file)
        first = " ".join(re.sub(r"\x1b\[[0-9;]*m", "", str(e)).split("\n")[0].split())[:160]  # torch's: paragraphs, colours
        raise CheckpointLoadError(path, f"not a readable checkpoint, truncated or corrupt ({type(e).__name__}: "
                                        f"{first})") from e
    if payload.nbytes == len(data):  # after the load: a file that is no checkpoint at all gets its error alone
        if not _trust["undigested"]:
            raise CheckpointLoadError(path, "has no digest (written before checkpoints carried one, or by another "
                                            "tool): nothing vouches for its bytes, refused; pass --trust-undigested "
                                            "(w3async run, w3async eval) to load it anyway")
        _warn_undigested(str(path))
    bad = first_non_finite(obj)
    if bad is not None:
        raise CheckpointLoadError(path, f"a weight is not finite ({bad}): refused, a run would fail on it later")
    return obj


_warned: set[str] = set()


def _warn_undigested(path: str) -> None:
    """One stderr line per file written before digests: loaded, but nothing vouches for its bytes."""
    if path not in _warned:
        _warned.add(path)
        console(f"w3async: warning: {path} has no digest (written before checkpoints carried one): loaded "
                f"unchecked, as --trust-undigested asks; the next checkpoint written has one")


def first_non_finite(obj: Any, where: str = "") -> str | None:
    """The first floating tensor in obj (dicts, lists, tuples walked) holding a NaN or an
    infinity, as "key.path: N NaN, M inf of SIZE", else None."""
    if isinstance(obj, torch.Tensor):
        if obj.is_floating_point() or obj.is_complex():
            fin = torch.isfinite(obj)
            if not bool(fin.all()):
                n_nan = int(torch.isnan(obj).sum())
                return f"{where or 'tensor'}: {n_nan} NaN, {int((~fin).sum()) - n_nan} inf of {obj.numel()}"
        return None
    if isinstance(obj, dict):
        items = obj.items()
    elif isinstance(obj, (list, tuple)):
        items = enumerate(obj)
    else:
        return None
    for k, v in items:
        bad = first_non_finite(v, f"{where}.{k}" if where else str(k))
        if bad is not None:
            return bad
    return None


def _load(path: Path) -> dict:
    ckpt = read_file(path)
    if not isinstance(ckpt, dict) or ckpt.get("format") != FORMAT:
        raise CheckpointLoadError(path, f"not a w3async checkpoint of format {FORMAT}")
    missing = [k for k in ("learner", "counters", "league") if not isinstance(ckpt.get(k), dict)]
    if missing:
        raise CheckpointLoadError(path, f"the checkpoint lacks {missing}")
    return ckpt


def checkpoint_paths(run_dir: Path) -> list[Path]:
    """The checkpoints a resume may take, first choice first: the one `latest` names
    (without a pointer: the newest ckpt-*.pt), then every other ckpt-*.pt, newest first
    (only a resume with checkpoint.fallback = true goes past the first). [] for a run
    with none. CheckpointLoadError for a pointer or folder that cannot be read."""
    ckdir = RunFolder(run_dir).checkpoints
    try:
        if not ckdir.exists():
            return []
        if not ckdir.is_dir():
            raise CheckpointLoadError(ckdir, "not a folder")
        found = sorted(ckdir.glob("ckpt-*.pt"), reverse=True)
        pointer = ckdir / POINTER
        if pointer.exists():
            try:
                name = pointer.read_text().strip()
            except (OSError, UnicodeDecodeError) as e:
                raise CheckpointLoadError(pointer, describe(e)) from e
            if not name or "/" in name or name.startswith("."):
                raise CheckpointLoadError(pointer, f"names no checkpoint file ({name!r})")
            return [ckdir / name] + [p for p in found if p.name != name]
        return found
    except OSError as e:
        raise CheckpointLoadError(ckdir, describe(e), e.errno) from e


def load_latest(run_dir: Path) -> dict | None:
    """The checkpoint `latest` names (without a pointer: the newest ckpt-*.pt); None
    for a run with no checkpoint. The result has a `path` key added. Raises
    CheckpointLoadError (the file and the cause) when that checkpoint does not load:
    never an older one in its place (resume.restore does that when asked)."""
    paths = checkpoint_paths(run_dir)
    if not paths:
        return None
    return load_checkpoint(paths[0])
