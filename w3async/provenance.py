"""What made a run: the package's version and, when it runs from a git checkout, the
commit (else "unknown"), with `dirty` when tracked files differ from it. Written to
recipe.json (its `w3async` key) and to events.jsonl's `run_start`."""

from __future__ import annotations

import functools
import subprocess
from pathlib import Path

from w3async import __version__

REPO = Path(__file__).resolve().parent.parent


@functools.cache
def provenance() -> dict:
    """{version, commit, dirty}: commit "unknown" and dirty None outside a git checkout
    (an installed wheel, git missing or too slow)."""
    out = dict(version=__version__, commit="unknown", dirty=None)
    if not (REPO / ".git").exists():  # a worktree's .git is a file: exists() covers both
        return out
    try:
        head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True,
                              timeout=5)
        if head.returncode == 0 and head.stdout.strip():
            out["commit"] = head.stdout.strip()
            diff = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=no"],
                                  capture_output=True, text=True, timeout=5)
            out["dirty"] = bool(diff.stdout.strip()) if diff.returncode == 0 else None
    except (OSError, subprocess.TimeoutExpired):
        pass
    return out
