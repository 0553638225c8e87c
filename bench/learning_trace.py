"""What a training run's learning looked like over time, for diagnosing a collapse:
per time bin, the learner's entropy, KL, clip fraction and explained
variance (learner.jsonl), and per opponent the episodes' results, draws and lengths
(episodes.jsonl: self-play, the built-in AI levels, evaluation apart).

    python bench/learning_trace.py runs/fgself-... [--every 2]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from datetime import datetime
from pathlib import Path

from training_curve import relabel_draws


def _ts(x: dict) -> float:
    return datetime.fromisoformat(x["ts"].replace("Z", "+00:00")).timestamp()


def _lines(path: Path) -> list[dict]:
    out = []
    for line in path.read_text().splitlines() if path.exists() else []:
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            pass  # a torn last line of a run still going
    return out


def trace(run: Path, every: float) -> str:
    updates = [u for u in _lines(run / "learner.jsonl") if u.get("event") == "update"]
    episodes = [e for e in relabel_draws(_lines(run / "episodes.jsonl")) if e.get("event") == "episode"]
    if not updates:
        return f"{run}: no learner updates"
    t0 = min(_ts(updates[0]), _ts(episodes[0]) if episodes else _ts(updates[0]))

    def bin_of(x: dict) -> int:
        return int((_ts(x) - t0) / 60 / every)

    def kind(e: dict) -> str:  # every league snapshot as one opponent
        return ("eval " if e["eval"] else "") + e["opponent"].split(":")[0] if e["opponent"].startswith("league:") \
            else ("eval " if e["eval"] else "") + e["opponent"]

    kinds = sorted({kind(e) for e in episodes})
    head = ["minutes", "updates", "entropy", "approx_kl", "clip_frac", "expl_var"]
    head += [f"{k}: win/draw/loss, steps" for k in kinds]
    rows = ["| " + " | ".join(head) + " |", "|" + " ---: |" * len(head)]
    for b in range(max(bin_of(x) for x in updates + episodes) + 1):
        us = [u for u in updates if bin_of(u) == b]
        mean = lambda k: f"{statistics.fmean(u[k] for u in us):.3f}" if us else "-"  # noqa: E731
        cells = [f"{(b + 1) * every:g}", str(len(us)), mean("entropy"), mean("approx_kl"), mean("clip_frac"),
                 mean("explained_var")]
        for k in kinds:
            es = [e for e in episodes if bin_of(e) == b and kind(e) == k]
            if not es:
                cells.append("-")
                continue
            n = len(es)
            share = {r: sum(e["result"] == r for e in es) / n for r in ("win", "draw", "loss")}
            cells.append(f"{share['win']:.0%}/{share['draw']:.0%}/{share['loss']:.0%} ({n}), "
                         f"{statistics.median(e['steps'] for e in es):.0f}")
        rows.append("| " + " | ".join(cells) + " |")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run", type=Path)
    ap.add_argument("--every", type=float, default=2.0, help="minutes a bin")
    a = ap.parse_args(argv)
    print(trace(a.run, a.every))
    return 0


if __name__ == "__main__":
    sys.exit(main())
