"""The one-line console progress report, from a /status dict (docs/status.md).

    console(progress_line(server.view.status()))   # every supervisor.progress_s

    fgself |   312.4 s | 1,204,480 steps | 3,912 steps/s | eval easy 71% (40) normal 35% (40) hard – |
      update 1.84 s wait 0.12 s (#52) | 16/16 games up | 3 restarts (crash 2, hang 1)

(one line; wrapped here). Figures that the run does not have yet are left out, so a
null-game run reads "null | 12.0 s | 240,000 steps | 20,011 steps/s | 8/8 games up | 0 restarts".
After a resume the seconds are the resumed start's and say so ("312.4 s since resume"),
the steps are the whole run's.
"""

from __future__ import annotations


def _pct(x) -> str:
    return "–" if x is None else f"{100 * x:.0f}%"


def progress_line(st: dict) -> str:
    run, steps, g = st["run"], st["steps"], st["games"]
    parts = [run.get("recipe") or run.get("name") or "w3async"]
    up = run.get("uptime_s")
    since = " since resume" if run.get("resumed_steps") else ""  # the seconds are this start's, the steps the run's
    parts.append(f"{up:7.1f} s{since}" if up is not None else "–")
    parts.append(f"{steps['agent_steps']:,} steps")
    rate = steps.get("per_s")
    parts.append(f"{rate:,.0f} steps/s" if rate is not None else "– steps/s")
    ev = st.get("evaluation") or {}
    if ev:
        parts.append("eval " + " ".join(_level(lvl, e) for lvl, e in ev.items()))
    le = st.get("learner") or {}
    if le.get("updates"):
        parts.append(f"update {le['update_s']:.2f} s wait {le['wait_s'] or 0:.2f} s (#{le.get('update') or le['updates']})")
    parts.append(f"{g['alive']}/{g['total']} games up" + (f", {g['failed']} failed" if g.get("failed") else ""))
    causes = g.get("restarts_by_cause") or {}
    detail = ", ".join(f"{c} {n}" for c, n in sorted(causes.items(), key=lambda kv: -kv[1]))
    parts.append(f"{g['restarts']} restarts" + (f" ({detail})" if detail else ""))
    return " | ".join(parts)


def _level(lvl: str, e: dict) -> str:
    """A level's words: "easy 71% (40)" with its recent mean return where there is one;
    a level without results (a game scored by points) "solo return 8.3 (120)"."""
    name, ret = lvl.split(":", 1)[-1], e.get("recent_mean_return")
    if e.get("games") == 0 and ret is not None:
        return f"{name} return {ret:.1f} ({e.get('episodes', 0)})"
    return f"{name} {_pct(e.get('recent_win_rate'))} ({e['games']}" + (f", return {ret:.1f})" if ret is not None else ")")

