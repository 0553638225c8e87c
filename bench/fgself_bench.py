"""End-to-end `fgself` line (`make bench`): the whole loop with the learner, at two
update pauses side by side.

For each `learner.update_pause_ms` (default 0 and 8) it runs the fgself recipe for
--seconds and reads the run's own logs: agent steps/s, the learner's update time and
its wait for data, staleness in updates, and round latency while the learner is idle
against while it updates (each round is tagged with the learner's phase when it came
back). Rounds and learner get one torch thread each; OMP_WAIT_POLICY=PASSIVE.

With --before REV it also runs the same recipe from a git worktree of REV (the
package's Python from there; the C build shared when REV's C sources are the tree's)
and interleaves the two, before then after, --repeat times: a change's agent steps/s,
update time and updates a second, measured side by side in one run. --before-set
KEY=VALUE does the same for a change of the recipe: the "before" side is the tree's
code and recipe with those settings. By default (`make bench`, the fgself recipe) it is
the recipe's round period before it was raised (2 ms, against the committed 12 ms:
larger rounds leave the learner the CPU that small ones took; docs/performance.md).
--from CKPT starts every run from a checkpoint of a trained run.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent


def lines(path: Path, event: str) -> list[dict]:
    return [x for x in map(json.loads, path.read_text().splitlines()) if x["event"] == event] if path.exists() else []


# The recipe's round period before it was raised, the default "before" side.
BEFORE_ITEM_6 = ["supervisor.round_period_ms=2"]


def resume_from(ckpt: Path, run_dir: Path) -> None:
    """run_dir resumes from ckpt (a ckpt-*.pt of another run): the checkpoint copied, the
    league's snapshots hard-linked (a run replaces its snapshot files, never writes into
    them), so that the bench measures a trained policy's games (more units, longer
    fights: a fresh policy's are cheaper to step and to learn from)."""
    (run_dir / "checkpoints").mkdir(parents=True)
    shutil.copy(ckpt, run_dir / "checkpoints" / ckpt.name)
    (run_dir / "league").mkdir()
    for f in (ckpt.parent.parent / "league").iterdir():
        os.link(f, run_dir / "league" / f.name)


def run(pause_ms: float, seconds: float, recipe: str, extra: list[str], tree: Path = REPO,
        start: Path | None = None) -> dict:
    """One run of the recipe with the package from `tree` (its own Python, its build),
    from the checkpoint `start` where given."""
    work = Path(tempfile.mkdtemp(prefix="w3a-fgbench-"))
    try:
        if start is not None:
            resume_from(start, work / "b")
        cmd = [sys.executable, "-m", "w3async", "run", recipe, "--runs-dir", str(work), "--run", "b",
               "--set", f"learner.update_pause_ms={pause_ms}", "--set", f"stop.seconds={seconds}",
               "--set", "supervisor.progress_s=0", *extra]
        subprocess.run(cmd, cwd=tree, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                       env={**os.environ, "PYTHONPATH": str(tree)})
        d = work / "b"
        rounds = lines(d / "inference.jsonl", "rounds")[5:]  # past the start
        ups = lines(d / "learner.jsonl", "update")[2:]
        end = lines(d / "events.jsonl", "shutdown")[-1]
        idle = [r["latency_ms_idle"] for r in rounds if r.get("latency_ms_idle") is not None]
        upd = [r["latency_ms_update"] for r in rounds if r.get("latency_ms_update") is not None]
        rows = sum(r["rows"] for r in rounds)
        return dict(
            steps_s=rows / max(len(rounds), 1),
            update_s=float(np.median([u["update_s"] for u in ups])) if ups else float("nan"),
            wait_s=float(np.median([u["wait_s"] for u in ups])) if ups else float("nan"),
            staleness=float(np.mean([u["staleness"] for u in ups])) if ups else float("nan"),
            lat_idle=float(np.median(idle)) if idle else float("nan"),
            lat_update=float(np.median(upd)) if upd else float("nan"),
            updates=len(ups) + 2, agent_steps=end["agent_steps"], updates_s=(len(ups) + 2) / end["seconds"],
            rows_round=rows / max(sum(r["rounds"] for r in rounds), 1),
            gathered=float(np.mean([r["gathered_per_waiting"] for r in rounds if "gathered_per_waiting" in r] or [np.nan])),
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)


def worktree(rev: str) -> Path:
    """A detached worktree of rev whose build/ is the tree's: refused when rev's C
    sources differ from the tree's (the games would not be rev's)."""
    c_parts = ["shim", "games", "setup.py"]
    diff = subprocess.run(["git", "diff", "--stat", rev, "--", *c_parts], cwd=REPO, capture_output=True, text=True)
    if diff.returncode:
        sys.exit(f"fgself_bench: --before {rev}: {diff.stderr.strip()}")
    if diff.stdout.strip():
        sys.exit(f"fgself_bench: --before {rev}: its C parts differ from the tree's; build it in a worktree "
                 f"of its own and run this bench there:\n{diff.stdout}")
    path = Path(tempfile.mkdtemp(prefix="w3a-fgbench-before-"))
    subprocess.run(["git", "worktree", "add", "--detach", "-f", str(path), rev], cwd=REPO, check=True,
                   capture_output=True)
    (path / "build").symlink_to(REPO / "build")
    for ext in (REPO / "w3async" / "sync").glob("_rows*.so"):  # the C gather, built in place
        shutil.copy(ext, path / "w3async" / "sync" / ext.name)
    return path


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=float, default=90)
    ap.add_argument("--pauses", default="0,8")
    ap.add_argument("--recipe", default="fgself")
    ap.add_argument("--set", action="append", default=[])
    ap.add_argument("--before", metavar="REV", help="also run REV's package, interleaved with the tree's")
    ap.add_argument("--before-set", action="append", metavar="KEY=VALUE",
                    help="the 'before' side is the tree with these recipe settings (default for "
                         f"fgself: {' '.join(BEFORE_ITEM_6)}; 'none': the tree alone)")
    ap.add_argument("--from", dest="start", metavar="CKPT", type=Path,
                    help="each run resumes from this checkpoint of a run (runs/R/checkpoints/ckpt-*.pt)")
    ap.add_argument("--repeat", type=int, default=1, help="pairs of runs per pause (with --before or --before-set)")
    a = ap.parse_args()
    if a.start is not None and not (a.start.is_file() and (a.start.parent.parent / "league").is_dir()):
        ap.error(f"--from {a.start}: not a checkpoint file of a run (runs/R/checkpoints/ckpt-*.pt beside runs/R/league)")
    extra = [x for s in a.set for x in ("--set", s)]
    recipe = str((REPO / "recipes" / f"{a.recipe}.toml") if not a.recipe.endswith(".toml") else Path(a.recipe).resolve())
    before = worktree(a.before) if a.before else None
    default = BEFORE_ITEM_6 if a.recipe == "fgself" else []
    before_set = [] if a.before or a.before_set == ["none"] else (a.before_set or default)
    if before is not None:
        sides = [(f"{a.before}", before, extra), ("tree", REPO, extra)] * a.repeat
    elif before_set:
        print("before: the tree with " + " ".join(before_set))
        sides = [("before", REPO, extra + [x for s in before_set for x in ("--set", s)]),
                 ("tree", REPO, extra)] * a.repeat
    else:
        sides = [("tree", REPO, extra)]
    print(f"fgself end to end, {a.seconds:.0f} s a run (medians over the run's seconds and updates)")
    hdr = (f"{'code':>10} {'pause ms':>8} {'steps/s':>8} {'update s':>9} {'updates/s':>9} {'wait s':>7} "
           f"{'staleness':>9} {'round ms idle':>14} {'round ms update':>16} {'ratio':>6} {'updates':>8} "
           f"{'rows/round':>10} {'gathered/waiting':>16}")
    print(hdr)
    print("-" * len(hdr))
    results: dict[tuple[float, str], list[dict]] = {}
    try:
        for p in [float(x) for x in a.pauses.split(",")]:
            for name, tree, sets in sides:
                r = run(p, a.seconds, recipe, sets, tree, a.start)
                results.setdefault((p, name), []).append(r)
                print(f"{name:>10} {p:>8.0f} {r['steps_s']:>8.0f} {r['update_s']:>9.2f} {r['updates_s']:>9.2f} "
                      f"{r['wait_s']:>7.2f} {r['staleness']:>9.2f} {r['lat_idle']:>14.2f} {r['lat_update']:>16.2f} "
                      f"{r['lat_update'] / r['lat_idle']:>5.1f}x {r['updates']:>8} {r['rows_round']:>10.1f} "
                      f"{r['gathered']:>16.2f}", flush=True)
    finally:
        if before is not None:
            subprocess.run(["git", "worktree", "remove", "--force", str(before)], cwd=REPO, capture_output=True)
    names = list(dict.fromkeys(name for name, _, _ in sides))
    if len(names) == 2:  # after against before, medians of the pairs
        print(f"\n{names[1]} against {names[0]} (medians of {a.repeat} run(s) each):")
        for p in [float(x) for x in a.pauses.split(",")]:
            b, t = ({k: float(np.median([r[k] for r in results[(p, n)]])) for k in ("steps_s", "update_s", "updates_s")}
                    for n in names)
            print(f"  pause {p:.0f} ms: agent steps/s {b['steps_s']:.0f} -> {t['steps_s']:.0f} "
                  f"({t['steps_s'] / b['steps_s']:.2f}x), update s {b['update_s']:.2f} -> {t['update_s']:.2f}, "
                  f"updates/s {b['updates_s']:.2f} -> {t['updates_s']:.2f} ({t['updates_s'] / b['updates_s']:.2f}x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
