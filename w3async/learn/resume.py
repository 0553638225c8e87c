"""A resume of the training answerer (docs/logs.md, "Resume"): the latest checkpoint
loaded into the learner, the league and the counters, or the run refused
(`restore`); what a killed run wrote beyond that checkpoint moved aside, so that
nothing after a resume is counted twice (`cut_logs`); and the `resume` records
(`log_resume`)."""

from __future__ import annotations

import json
import os
from pathlib import Path

from w3async.learn.checkpoint import CheckpointLoadError, checkpoint_paths, describe, foreign, load_checkpoint
from w3async.observe.logs import console
from w3async.observe.logs import JsonLog

LOGS = ("learner.jsonl", "episodes.jsonl", "inference.jsonl")  # the logs a checkpoint's counters cover


def restore(run_dir: Path, learner, league, counters, tally, fallback: bool = False,
            game: str | None = None) -> dict | None:
    """Load the latest checkpoint (None when there is none) into the learner, the league,
    the run's counters (runtime.answerer.Counters) and the episode tally, or raise
    CheckpointLoadError naming the file and the cause. With `fallback` (the recipe's
    checkpoint.fallback), a checkpoint that does not load is passed over for the next
    older one that does; the result's `refused` lists each passed over (path, cause), and
    the error, when none loads, names them all. A file that failed is never loaded in
    part: the next candidate's load replaces everything the failed one set. A checkpoint
    of another run or of another game than `game` (checkpoint.foreign) is refused like a
    corrupt one."""
    refused: list[dict] = []
    for path in checkpoint_paths(run_dir):
        try:
            ckpt = _restore_one(path, learner, league, counters, tally, run_dir, game)
        except CheckpointLoadError as e:
            if not fallback:
                raise
            refused.append(dict(path=e.path, cause=e.cause))
            console(f"w3async: warning: checkpoint {path} refused ({e.path}: {e.cause}); trying an older one "
                    f"(checkpoint.fallback = true)")
            continue
        ckpt["refused"] = refused
        return ckpt
    if refused:
        first = refused[0]
        raise CheckpointLoadError(first["path"], f"{first['cause']}; and no older checkpoint loads either ("
                                  + "; ".join(f"{r['path']}: {r['cause']}" for r in refused[1:]) + ")")
    return None


def _restore_one(path: Path, learner, league, counters, tally, run_dir: Path, game: str | None) -> dict:
    """One checkpoint file into the learner, league, counters and tally (restore)."""
    ckpt = load_checkpoint(path)
    why = foreign(ckpt, run_dir, game)
    if why:
        raise CheckpointLoadError(path, f"{why}; refused")
    try:
        learner.load_state_dict(ckpt["learner"])
    except Exception as e:  # noqa: BLE001 (shapes of another network, a truncated state)
        # torch lists every mismatched tensor, a paragraph of them: its heading and the first
        lines = [" ".join(x.split()) for x in str(e).splitlines() if x.strip()]
        more = f" (and {len(lines) - 2} more)" if len(lines) > 2 else ""
        raise CheckpointLoadError(path, "its learner state does not load into this recipe's network "
                                        f"({type(e).__name__}: {' '.join(lines[:2])[:300]}{more})") from e
    try:
        league.load_state_dict(ckpt["league"])
    except CheckpointLoadError as e:
        raise CheckpointLoadError(e.path, f"{e.cause} (named by the checkpoint {path})", e.errno) from e
    c = ckpt["counters"]
    try:
        counters.agent_steps = counters.resumed_steps = int(c.get("agent_steps", 0))
        tally.count = int(c.get("episodes", 0))
        tally.totals.clear()  # an earlier candidate's totals must not add to this one's
        for level, counts in c.get("eval_totals", {}).items():
            tally.totals[level].update(counts)
    except (TypeError, ValueError, AttributeError) as e:
        raise CheckpointLoadError(path, f"its counters are malformed ({describe(e)})") from e
    return ckpt


def log_resume(logs: dict[str, JsonLog], events: JsonLog, rec: dict, resumed: bool, snapshots: int,
               cut: dict[str, int]) -> None:
    """A `resume` record in each log (and events.jsonl): the checkpoint's counters (rec),
    which every line after it continues from, and the lines cut; without a checkpoint
    (resumed False), a `logs_cut` warning in events.jsonl."""
    for name, log in logs.items():
        log.info("resume", **rec, cut_lines=cut.get(name, 0))
    if resumed:
        events.info("resume", **rec, snapshots=snapshots, cut_lines=cut)
    else:
        events.warning("logs_cut", reason="no checkpoint: the run starts from zero", cut_lines=cut)


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
