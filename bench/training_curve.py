"""The learning curve of a run: evaluation win rate against each level over time.

Reads runs/<run>/episodes.jsonl (evaluation episodes only: fixed seeds, never trained
on) and prints a markdown table of the win rate against each level over the last
--window episodes at every --every minutes, each with its decisive share (wins before
the time limit, w3async/outcomes.py: a log without `end` reads as decisive) and the mean
return of the last --window ended episodes (truncated ones too: a game scored by
points, as Snake is); with --svg
it also draws the curves as a small SVG (no plotting library needed), the decisive
share dashed.

    python bench/training_curve.py runs/fgself-main --svg docs/experiments/figures/fgself-curve.svg

After the table, the learning checks of a run (`checks`): per level the win rate over the
last 100 evaluation games; for easy the minute the last 50 first reached 85% and the
lowest last-50 rate after it; the share of self-play games (current policy or a league
snapshot as the opponent) that ended in a draw over the run's last 10 minutes.
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import datetime
from pathlib import Path

COLOURS = {"ai:easy": "#1f77b4", "ai:normal": "#d62728", "ai:hard": "#2ca02c"}


def ts(x: dict) -> float:
    return datetime.fromisoformat(x["ts"].replace("Z", "+00:00")).timestamp()


def load(run: Path) -> tuple[float, dict[str, list[tuple[float, float, float]]]]:
    """(start time, {level: [(minutes, 1 win / 0 otherwise, 1 decisive win / 0 otherwise)]})
    for the evaluation episodes."""
    start = None
    for line in (run / "events.jsonl").read_text().splitlines():
        e = json.loads(line)
        if e["event"] == "run_start":
            start = ts(e)
            break
    out: dict[str, list[tuple[float, float]]] = {}
    for line in (run / "episodes.jsonl").read_text().splitlines():
        e = json.loads(line)
        if e.get("event") == "episode" and e.get("eval") and e.get("result") != "truncated":
            win = 1.0 if e["result"] == "win" else 0.0
            out.setdefault(e["opponent"], []).append(((ts(e) - start) / 60, win,
                                                     win if e.get("end", "decisive") == "decisive" else 0.0))
    return start, out


def eval_returns(run: Path, start: float) -> dict[str, list[tuple[float, float]]]:
    """{level: [(minutes, return)]} of every ended evaluation episode, truncated ones too:
    the figure of a game scored by points (Snake's return is its score - 1)."""
    out: dict[str, list[tuple[float, float]]] = {}
    for line in (run / "episodes.jsonl").read_text().splitlines():
        e = json.loads(line)
        if e.get("event") == "episode" and e.get("eval") and isinstance(e.get("return"), (int, float)):
            out.setdefault(e["opponent"], []).append(((ts(e) - start) / 60, float(e["return"])))
    return out


def relabel_draws(episodes: list[dict]) -> list[dict]:
    """Two sides of one game's lane that both lost at the same step drew (a draw scored
    as a loss for each, W3D_DRAW_REWARD = -1): "draw" for both, as the tally writes it
    since 2026-12-01 (EpisodeTally.outcomes); runs logged before read the same here."""
    last: dict[tuple, dict] = {}
    for e in episodes:
        if e.get("event") != "episode" or e.get("eval"):
            continue
        key = (e["slot"], e["lane"], e["steps"])
        other = last.pop(key, None)
        if other is not None and other["side"] != e["side"]:
            if other["result"] == e["result"] == "loss":
                other["result"] = e["result"] = "draw"
        else:
            last[key] = e
    return episodes


def selfplay_results(run: Path, start: float) -> list[tuple[float, str]]:
    """(minutes, result) of the self-play episodes: opponent self or league:<version>."""
    out = []
    for e in relabel_draws([json.loads(line) for line in (run / "episodes.jsonl").read_text().splitlines()]):
        if e.get("event") == "episode" and not e.get("eval") and (e.get("opponent") == "self"
                                                                  or str(e.get("opponent", "")).startswith("league:")):
            out.append(((ts(e) - start) / 60, e["result"]))
    return out


def checks(eps: dict[str, list[tuple[float, float]]], selfplay: list[tuple[float, str]], t_max: float) -> dict:
    """The learning checks (see the module docstring)."""
    out: dict = {"last_100": {lv: curve(pts, 100, t_max) for lv, pts in sorted(eps.items())},
                 "last_100_decisive": {lv: curve(pts, 100, t_max, 2) for lv, pts in sorted(eps.items())}}
    easy = eps.get("ai:easy", [])
    reached = lowest = lowest_at = last_under_75 = None
    for i in range(len(easy)):
        window = [p[1] for p in easy[max(0, i - 49): i + 1]]
        if len(window) < 50:
            continue
        rate = sum(window) / 50
        if reached is None and rate >= 0.85:
            reached = easy[i][0]
        elif reached is not None:
            if lowest is None or rate < lowest:
                lowest, lowest_at = rate, easy[i][0]
            if rate < 0.75:
                last_under_75 = easy[i][0]
    out["easy_first_85"] = reached
    out["easy_lowest_after"] = lowest
    out["easy_lowest_at"] = lowest_at
    out["easy_last_under_75"] = last_under_75
    late = [r for m, r in selfplay if m >= t_max - 10]
    out["selfplay_draws_last_10_min"] = (sum(r == "draw" for r in late) / len(late) if late else None, len(late))
    return out


def curve(points: list[tuple[float, float, float]], window: int, t: float, k: int = 1) -> tuple[float | None, int]:
    """The win rate (k 1; k 2: the decisive rate) over the last `window` episodes finished by minute t."""
    done = [p[k] for p in points if p[0] <= t][-window:]
    return (sum(done) / len(done) if done else None), len(done)


def svg(series: dict[str, list[tuple[float, float]]], t_max: float, path: Path, title: str,
        dashed: dict[str, list[tuple[float, float]]] | None = None) -> None:
    w, h, pad = 640, 300, 46
    def x(t): return pad + (w - 2 * pad) * t / max(t_max, 1e-9)
    def y(v): return h - pad - (h - 2 * pad) * v
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="11">',
             f'<rect width="{w}" height="{h}" fill="white"/>',
             f'<text x="{pad}" y="18" font-size="13">{title}</text>']
    for v in (0, 0.25, 0.5, 0.75, 1.0):
        parts.append(f'<line x1="{pad}" y1="{y(v):.1f}" x2="{w - pad}" y2="{y(v):.1f}" stroke="#ddd"/>')
        parts.append(f'<text x="{pad - 6}" y="{y(v) + 4:.1f}" text-anchor="end">{v:.0%}</text>')
    step = 10 if t_max > 30 else 5
    for m in range(0, int(t_max) + 1, step):
        parts.append(f'<text x="{x(m):.1f}" y="{h - pad + 16}" text-anchor="middle">{m} min</text>')
    for goal, level in ((0.8, "ai:easy"), (0.5, "ai:normal")):
        parts.append(f'<line x1="{pad}" y1="{y(goal):.1f}" x2="{w - pad}" y2="{y(goal):.1f}" '
                     f'stroke="{COLOURS[level]}" stroke-dasharray="4 4" stroke-opacity="0.5"/>')
    for i, (level, pts) in enumerate(sorted(series.items())):
        if pts:
            d = " ".join(f"{x(t):.1f},{y(v):.1f}" for t, v in pts)
            parts.append(f'<polyline fill="none" stroke="{COLOURS.get(level, "#555")}" stroke-width="2" points="{d}"/>')
        if dashed and dashed.get(level):
            d = " ".join(f"{x(t):.1f},{y(v):.1f}" for t, v in dashed[level])
            parts.append(f'<polyline fill="none" stroke="{COLOURS.get(level, "#555")}" stroke-width="1.5" '
                         f'stroke-dasharray="5 3" points="{d}"/>')
        parts.append(f'<text x="{w - pad - 140 + 70 * i}" y="{pad - 10}" fill="{COLOURS.get(level, "#555")}">{level}</text>')
    parts.append("</svg>")
    path.write_text("\n".join(parts) + "\n")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("run", type=Path)
    ap.add_argument("--window", type=int, default=50, help="episodes the win rate is over")
    ap.add_argument("--every", type=float, default=5.0, help="minutes between table rows")
    ap.add_argument("--svg", type=Path, help="also draw the curve into this SVG file")
    a = ap.parse_args()
    start, eps = load(a.run)
    if not eps:
        print(f"{a.run}: no evaluation episodes", file=sys.stderr)
        return 2
    levels = sorted(eps)
    rets = eval_returns(a.run, start)
    t_max = max(p[0] for pts in eps.values() for p in pts)
    print("| minutes | " + " | ".join(f"vs {lv} (last {a.window}): win rate, decisive (games); mean return (episodes)"
                                     for lv in levels) + " |")
    print("| ---: | " + " | ".join("---:" for _ in levels) + " |")
    t = a.every
    while t <= t_max + 1e-9 or t - a.every < t_max:
        cells = []
        for lv in levels:
            rate, n = curve(eps[lv], a.window, t)
            dec, _ = curve(eps[lv], a.window, t, 2)
            done = [r for m, r in rets.get(lv, []) if m <= t][-a.window:]
            cells.append(("-" if rate is None else f"{rate:.0%}, {dec:.0%} ({n})")
                         + (f"; {sum(done) / len(done):.2f} ({len(done)})" if done else ""))
        print(f"| {min(t, t_max):.0f} | " + " | ".join(cells) + " |")
        if t >= t_max:
            break
        t = min(t + a.every, t_max)
    c = checks(eps, selfplay_results(a.run, start), t_max)
    pct = lambda x: "-" if x is None else f"{x:.0%}"  # noqa: E731
    print("\nchecks: " + "; ".join(f"{lv} last 100 {pct(r)} ({n}), decisive {pct(c['last_100_decisive'][lv][0])}"
                                  for lv, (r, n) in c["last_100"].items()))
    first = c["easy_first_85"]
    if "ai:easy" in eps:  # the learning checks: the duel's
        print(f"easy: last 50 first at 85% at minute {'-' if first is None else round(first, 1)}, "
              f"lowest after {pct(c['easy_lowest_after'])}"
              + (f" at minute {c['easy_lowest_at']:.1f}" if c["easy_lowest_at"] is not None else "")
              + (f", last under 75% at minute {c['easy_last_under_75']:.1f}" if c["easy_last_under_75"] is not None
                 else "")
              + f"; self-play draws over the last 10 minutes "
              f"{pct(c['selfplay_draws_last_10_min'][0])} of {c['selfplay_draws_last_10_min'][1]}")
    if a.svg:
        series, dashed = ({lv: [(p[0], curve(eps[lv], a.window, p[0], k)[0]) for p in eps[lv]
                                if curve(eps[lv], a.window, p[0])[1] >= 10] for lv in levels} for k in (1, 2))
        svg(series, t_max, a.svg, f"{a.run.name}: evaluation win rate (last {a.window} games; dashed: decisive)",
            dashed)
        print(f"\n(curve: {a.svg})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
