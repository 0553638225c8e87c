"""`python -m w3async status runs/<run>`: a run's summary from its files, live or finished.

    from w3async.observe.status_cli import main
    sys.exit(main("runs/fgself-20261130-0400"))

main(run_dir) -> int prints the progress line and a few lines of detail on stdout
and returns 0; 2 (with the reason on stderr) when the folder is not a run folder. For a
live run whose status server wrote `status.url`, the figures are the server's own
(/status, /games); otherwise, or when the server does not answer within 2 s, they are
read from the run's logs (docs/logs.md) the way the server reads them (status.RunView
without a source). It never changes the run.
"""

from __future__ import annotations

import json
import sys
import urllib.request
from pathlib import Path

from w3async.observe.progress import progress_line
from w3async.observe.run_view import RunView
from w3async.run_folder import RunFolder


def summary(st: dict, games: list[dict]) -> list[str]:
    """The lines main() prints, from a /status dict and /games list."""
    run, inf, le = st["run"], st["inference"], st["learner"]
    state = "live" if run["live"] else ("stopped: " + run["error"] if run.get("error") else "ended")
    lines = [progress_line(st),
             f"run      {run['name']} ({state}), recipe {run.get('recipe')}, started {run.get('started')}"
             + (f" (resumed at {run['resumed_steps']:,} agent steps)" if run.get("resumed_steps") else "")
             + (f", ended {run['ended']}" if run.get("ended") else "")]
    if inf["rounds"]:
        lines.append(f"rounds   {inf['rounds']:,}, {inf['rows_per_round']} rows a round"
                     + (f", latency {inf['latency_ms_mean']} ms (p95 {inf['latency_ms_p95']})"
                        if inf.get("latency_ms_mean") is not None else ""))
    if le["updates"]:
        lines.append(f"learner  {le['updates']} updates, last {le['update_s']} s (wait {le['wait_s']} s), "
                     f"policy loss {le['policy_loss']}, value loss {le['value_loss']}, entropy {le['entropy']}, "
                     f"kl {le['approx_kl']}, staleness {le['staleness']}")
    for lvl, e in st["evaluation"].items():
        lines.append(f"eval     vs {lvl}: {e['wins']}-{e['draws']}-{e['losses']} (w-d-l; {e['decisive_wins']} wins "
                     f"decisive, {e['time_limit_wins']} at the time limit) in {e['games']} games, win rate "
                     f"{e['win_rate']} (decisive {e['decisive_rate']}), last {e['recent_games']}: "
                     f"{e['recent_win_rate']} ({e['recent_decisive_rate']})"
                     + (f"; mean return {e['mean_return']} (recent {e['recent_mean_return']})"
                        if e.get("mean_return") is not None else ""))
    ep = st["episodes"]
    if ep["total"]:
        sp = ep["train"]
        lines.append(f"episodes {ep['total']:,} ({ep['eval']:,} eval), training win rate {sp['win_rate']}; "
                     f"league {st['league']['snapshots']} snapshots")
    if st["checkpoint"]:
        ck = st["checkpoint"]
        lines.append(f"ckpt     {ck['name']} saved {ck['saved_at']} ({ck['age_s']} s ago)")
    b = st.get("best")
    if b and b.get("by") == "return":  # a game scored by points
        lv = ", ".join(f"{k} {e['mean_return']}" for k, e in b["levels"].items())
        lines.append(f"best     best.pt of update {b['updates']}: mean return {b['score']} over the last "
                     f"{b['window']} episodes a level ({lv})")
    elif b:
        lv = ", ".join(f"{k} {e['win_rate']} [{e['lo']}, {e['hi']}]" for k, e in b["levels"].items())
        lines.append(f"best     best.pt of update {b['updates']}: score {b['score']} over the last {b['window']} "
                     f"games a level ({lv}; 95% Wilson)")
    bad = [g for g in games if g["state"] in ("failed", "restarting") or g["restarts"]]
    for g in bad[:10]:
        causes = ", ".join(f"{c} {n}" for c, n in g["causes"].items())
        lines.append(f"game     slot {g['slot']} ({g['runtime']}): {g['state']}, {g['restarts']} restarts ({causes})")
    if len(bad) > 10:
        lines.append(f"game     ... and {len(bad) - 10} more slots with restarts")
    return lines


def main(run_dir: str | Path) -> int:
    run_dir = Path(run_dir)
    if not RunFolder(run_dir).events.is_file():  # a folder in its place was a traceback
        print(f"w3async status: {run_dir} is not a run folder (no events.jsonl file): give runs/<run>", file=sys.stderr)
        return 2
    view = RunView(run_dir)
    live = _from_server(run_dir) if view.live() else None
    if live is not None:
        st, games = live
    else:
        try:
            view.refresh()
        except OSError as e:  # a log that is a folder or cannot be read: say which, no traceback
            print(f"w3async status: {run_dir}: cannot read {e.filename}: {e.strerror or e}", file=sys.stderr)
            return 2
        st, games = view.status(), view.games()
    for line in summary(st, games):
        print(line)
    return 0


def _from_server(run_dir: Path) -> tuple[dict, list[dict]] | None:
    """The live server's /status and /games, or None (no status.url, no answer)."""
    try:
        url = RunFolder(run_dir).status_url.read_text().strip()
        with urllib.request.urlopen(url + "status", timeout=2) as r:
            st = json.load(r)
        with urllib.request.urlopen(url + "games", timeout=2) as r:
            games = json.load(r)["games"]
    except (OSError, ValueError, KeyError):
        return None
    return st, games


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]) if len(sys.argv) == 2 else 2)
