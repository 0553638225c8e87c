"""/status's figures in the Prometheus text format (docs/status.md, "/metrics")."""

from __future__ import annotations


def metrics_text(st: dict) -> str:
    """/status's figures in the Prometheus text format (docs/status.md lists them)."""
    out: list[str] = []

    def m(name: str, kind: str, help_: str, samples: list[tuple[dict, object]]) -> None:
        out.append(f"# HELP w3async_{name} {help_}")
        out.append(f"# TYPE w3async_{name} {kind}")
        for labels, v in samples:
            if v is None:
                continue
            lab = ",".join(f'{k}="{_esc(str(x))}"' for k, x in labels.items())
            out.append(f"w3async_{name}{{{lab}}} {float(v):g}" if lab else f"w3async_{name} {float(v):g}")

    g, i, le, steps = st["games"], st["inference"], st["learner"], st["steps"]
    m("up", "gauge", "1 while a supervisor runs the run", [({}, int(st["run"]["live"]))])
    m("uptime_seconds", "gauge", "seconds since the run started", [({}, st["run"]["uptime_s"])])
    m("agent_steps_total", "counter", "rows answered", [({}, steps["agent_steps"])])
    m("agent_steps_per_second", "gauge", "agent steps per second over the last sample", [({}, steps["per_s"])])
    m("games", "gauge", "game slots by state",
      [({"state": k}, g[k]) for k in ("running", "starting", "restarting", "failed", "stopped")])
    m("game_restarts_total", "counter", "game restarts by cause",
      [({"cause": c}, n) for c, n in sorted(g["restarts_by_cause"].items())])
    m("bad_rows_total", "counter", "rows that failed the checks", [({}, g["bad_rows"])])
    m("inference_rounds_total", "counter", "inference rounds", [({}, i["rounds"])])
    m("inference_rows_per_round", "gauge", "rows per round (run average)", [({}, i["rows_per_round"])])
    m("inference_latency_ms", "gauge", "round latency over the last second",
      [({"stat": "mean"}, i["latency_ms_mean"]), ({"stat": "p95"}, i["latency_ms_p95"]),
       ({"stat": "max"}, i["latency_ms_max"])])
    m("inference_compute_ms", "gauge", "round compute time (mean, last second)", [({}, i["compute_ms_mean"])])
    m("inference_compute_share", "gauge", "share of wall time spent computing rounds", [({}, i["compute_share"])])
    m("learner_updates_total", "counter", "PPO updates", [({}, le["updates"])])
    m("learner_update_seconds", "gauge", "the last update's time", [({}, le["update_s"])])
    m("learner_wait_seconds", "gauge", "the last update's wait for data", [({}, le["wait_s"])])
    m("learner_staleness", "gauge", "policy versions between acting and learning", [({}, le["staleness"])])
    m("learner_loss", "gauge", "the last update's losses",
      [({"kind": "policy"}, le["policy_loss"]), ({"kind": "value"}, le["value_loss"])])
    m("learner_entropy", "gauge", "the last update's policy entropy", [({}, le["entropy"])])
    m("learner_approx_kl", "gauge", "the last update's approximate KL", [({}, le["approx_kl"])])
    m("league_snapshots", "gauge", "league snapshots on disk", [({}, st["league"]["snapshots"])])
    ev = st["evaluation"]
    m("eval_games_total", "counter", "evaluation games by built-in AI level",
      [({"level": k}, v["games"]) for k, v in ev.items()])
    m("eval_wins_total", "counter", "evaluation wins by level", [({"level": k}, v["wins"]) for k, v in ev.items()])
    m("eval_win_rate", "gauge", "evaluation score (wins + draws/2) / games by level",
      [({"level": k, "window": w}, v[f]) for k, v in ev.items()
       for w, f in (("all", "win_rate"), ("recent", "recent_win_rate"))])
    m("episodes_total", "counter", "finished episodes", [({}, st["episodes"]["total"])])
    ck = st["checkpoint"]
    m("checkpoint_age_seconds", "gauge", "seconds since the latest checkpoint", [({}, ck["age_s"] if ck else None)])
    return "\n".join(out) + "\n"


def _esc(s: str) -> str:
    return s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
