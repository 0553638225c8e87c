"""A resume's clean-up of the run's logs: what a killed run wrote beyond its last
checkpoint is moved aside, so that nothing after a resume is counted twice
(docs/logs.md, "Resume")."""

from __future__ import annotations

import json
import os
from pathlib import Path

LOGS = ("learner.jsonl", "episodes.jsonl", "inference.jsonl")  # the logs a checkpoint's counters cover


def cut_logs(run_dir: Path, ckpt: dict | None, version: int) -> dict[str, int]:
    """Move each log's lines beyond what the checkpoint counted (a killed run's dead
    tail) to <log>.cut; returns the lines cut per log. Without a checkpoint, every
    line is beyond it (a run killed before its first checkpoint starts from zero).
    A checkpoint without log sizes (written before they were recorded) cuts only
    learner.jsonl, by update number."""
    sizes = (ckpt or {}).get("counters", {}).get("logs") if ckpt is not None else dict.fromkeys(LOGS, 0)
    out = {}
    for name in LOGS:
        path = run_dir / name
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            out[name] = 0
            continue
        if sizes is not None:
            keep = int(sizes.get(name, len(data)))
        elif name == "learner.jsonl":
            keep = _offset_after_updates(data, version)
        else:
            keep = len(data)
        keep = min(keep, len(data))
        # a torn last line before the cut point (a kill mid-write) stays a torn line
        tail = data[keep:]
        if tail:
            with open(path.with_name(name + ".cut"), "ab") as f:
                f.write(tail)
            os.truncate(path, keep)
        out[name] = tail.count(b"\n") + (1 if tail and not tail.endswith(b"\n") else 0)
    return out


def _offset_after_updates(data: bytes, version: int) -> int:
    """The byte offset of learner.jsonl's first `update` line numbered above `version`
    (the end when there is none): for checkpoints that did not record the logs' sizes."""
    pos = 0
    for line in data.splitlines(keepends=True):
        try:
            rec = json.loads(line)
        except ValueError:
            rec = None
        if isinstance(rec, dict) and rec.get("event") == "update" and int(rec.get("update") or 0) > version:
            return pos
        pos += len(line)
    return len(data)
