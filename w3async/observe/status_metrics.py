"""/status's figures in the Prometheus text format (docs/status.md, "/metrics").

`prometheus_client` writes the text: `StatusCollector` turns one /status snapshot into
metric families, and `metrics_text` renders them through a registry of its own (never
the process-wide default registry, which would also carry the process's own metrics
and whatever else imported prometheus_client). Format 0.0.4, what every Prometheus reads.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import CollectorRegistry, CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4, generate_latest

CONTENT_TYPE = CONTENT_TYPE_PLAIN_0_0_4  # 'text/plain; version=0.0.4; charset=utf-8'


class StatusCollector:
    """A prometheus_client collector over one /status dict (the snapshot, never the run).

    A counter's family is named without `_total` (prometheus_client's rule); its sample
    keeps it: `w3async_agent_steps_total`. A figure that is null has no sample."""

    def __init__(self, st: dict) -> None:
        self.st = st

    def collect(self) -> Iterator[Metric]:
        st = self.st
        g, i, le, steps = st["games"], st["inference"], st["learner"], st["steps"]
        ev, ck = st["evaluation"], st["checkpoint"]
        yield _m("up", "gauge", "1 while a supervisor runs the run", [({}, int(st["run"]["live"]))])
        yield _m("uptime_seconds", "gauge", "seconds since the run started", [({}, st["run"]["uptime_s"])])
        yield _m("agent_steps_total", "counter", "rows answered", [({}, steps["agent_steps"])])
        yield _m("agent_steps_per_second", "gauge", "agent steps per second over the last sample",
                 [({}, steps["per_s"])])
        yield _m("games", "gauge", "game slots by state",
                 [({"state": k}, g[k]) for k in ("running", "starting", "restarting", "failed", "stopped")])
        yield _m("game_restarts_total", "counter", "game restarts by cause",
                 [({"cause": c}, n) for c, n in sorted(g["restarts_by_cause"].items())])
        yield _m("bad_rows_total", "counter", "rows that failed the checks", [({}, g["bad_rows"])])
        yield _m("inference_rounds_total", "counter", "inference rounds", [({}, i["rounds"])])
        yield _m("inference_rows_per_round", "gauge", "rows per round (run average)", [({}, i["rows_per_round"])])
        yield _m("inference_latency_ms", "gauge", "round latency over the last second",
                 [({"stat": "mean"}, i["latency_ms_mean"]), ({"stat": "p95"}, i["latency_ms_p95"]),
                  ({"stat": "max"}, i["latency_ms_max"])])
        yield _m("inference_compute_ms", "gauge", "round compute time (mean, last second)",
                 [({}, i["compute_ms_mean"])])
        yield _m("inference_compute_share", "gauge", "share of wall time spent computing rounds",
                 [({}, i["compute_share"])])
        yield _m("learner_updates_total", "counter", "PPO updates", [({}, le["updates"])])
        yield _m("learner_update_seconds", "gauge", "the last update's time", [({}, le["update_s"])])
        yield _m("learner_wait_seconds", "gauge", "the last update's wait for data", [({}, le["wait_s"])])
        yield _m("learner_staleness", "gauge", "policy versions between acting and learning",
                 [({}, le["staleness"])])
        yield _m("learner_loss", "gauge", "the last update's losses",
                 [({"kind": "policy"}, le["policy_loss"]), ({"kind": "value"}, le["value_loss"])])
        yield _m("learner_entropy", "gauge", "the last update's policy entropy", [({}, le["entropy"])])
        yield _m("learner_approx_kl", "gauge", "the last update's approximate KL", [({}, le["approx_kl"])])
        yield _m("league_snapshots", "gauge", "league snapshots on disk", [({}, st["league"]["snapshots"])])
        yield _m("eval_games_total", "counter", "evaluation games by opponent level",
                 [({"level": k}, v["games"]) for k, v in ev.items()])
        yield _m("eval_wins_total", "counter", "evaluation wins by level and kind (decisive, at the time limit)",
                 [({"level": k, "kind": kind}, v.get(f)) for k, v in ev.items()
                  for kind, f in (("decisive", "decisive_wins"), ("time_limit", "time_limit_wins"))])
        yield _m("eval_win_rate", "gauge", "evaluation wins (of either kind) / games by level",
                 [({"level": k, "window": w}, v[f]) for k, v in ev.items()
                  for w, f in (("all", "win_rate"), ("recent", "recent_win_rate"))])
        yield _m("eval_decisive_rate", "gauge", "evaluation decisive wins (before the time limit) / games by level",
                 [({"level": k, "window": w}, v.get(f)) for k, v in ev.items()
                  for w, f in (("all", "decisive_rate"), ("recent", "recent_decisive_rate"))])
        yield _m("eval_mean_return", "gauge", "the mean return of evaluation episodes by level (a game scored by "
                 "points, not wins)", [({"level": k, "window": w}, v.get(f)) for k, v in ev.items()
                                       for w, f in (("all", "mean_return"), ("recent", "recent_mean_return"))])
        yield _m("episodes_total", "counter", "finished episodes", [({}, st["episodes"]["total"])])
        yield _m("checkpoint_age_seconds", "gauge", "seconds since the latest checkpoint",
                 [({}, ck["age_s"] if ck else None)])
        best = st.get("best")
        yield _m("best_score", "gauge", "best.pt's score: mean over levels of each level's window score (a decisive win 1, at the time limit 0.5)",
                 [({}, best["score"] if best else None)])
        yield _m("best_update", "gauge", "the update best.pt was taken at", [({}, best["updates"] if best else None)])
        acct = st.get("accounting") or {}  # the last /proc sample (observe/accounting.py); none: no samples
        kinds = sorted((acct.get("kinds") or {}).items())
        per_game = (acct.get("games") or {}).items()
        yield _m("cpu_cores", "gauge", "cores used over the last accounting sample, by kind of process",
                 [({"kind": k, "mode": m}, v[f"cpu_{m}"]) for k, v in kinds for m in ("user", "sys")])
        yield _m("memory_rss_bytes", "gauge", "resident memory by kind of process",
                 [({"kind": k}, v["rss_mb"] * 2**20) for k, v in kinds])
        yield _m("processes", "gauge", "processes by kind", [({"kind": k}, v["procs"]) for k, v in kinds])
        yield _m("game_cpu_cores", "gauge", "cores a game's processes used over the last sample",
                 [({"slot": k}, v["cpu"]) for k, v in per_game])
        yield _m("game_memory_rss_bytes", "gauge", "a game's processes' resident memory",
                 [({"slot": k}, v["rss_mb"] * 2**20) for k, v in per_game])
        yield _m("thread_cpu_cores", "gauge", "cores the supervisor's threads used, by role",
                 [({"role": k}, v) for k, v in (acct.get("threads") or {}).items()])


def _m(name: str, kind: str, help_: str, samples: list[tuple[dict, object]]) -> Metric:
    """One family `w3async_<name>`; the label names are the first sample's (all share them)."""
    labels = list(samples[0][0]) if samples else []
    cls = CounterMetricFamily if kind == "counter" else GaugeMetricFamily
    fam = cls(f"w3async_{name}", help_, labels=labels)
    for lab, v in samples:
        if v is not None:
            fam.add_metric([str(lab[k]) for k in labels], float(v))
    return fam


def metrics_text(st: dict) -> str:
    """/status's figures in the Prometheus text format 0.0.4 (docs/status.md lists them)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(StatusCollector(st))
    return generate_latest(registry).decode()
