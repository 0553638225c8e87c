"""A run's status: the /status and /games bodies (docs/status.md), from the run's files
and, when live, snapshots of its counters.

`StatusSource` is what a live run offers (the supervisor, through `SupervisorSource`);
`take_snapshot` turns it into plain dicts on the run's loop, once a sample. `RunView`
builds the one schema from those snapshots and the run folder's logs (run_files.py,
into a series.py RunSeries): the status server's thread owns one while it serves
(status.py, status_server.py), and `status_cli.py` builds one from a run's files alone,
live or finished.
"""

from __future__ import annotations

import collections
import json
import math
import os
import time
from dataclasses import asdict, dataclass, field, fields
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable, Protocol, runtime_checkable

from w3async import games
from w3async.procstat import alive
from w3async.observe.run_files import RunFiles
from w3async.observe.series import RunSeries
from w3async.run_folder import RunFolder
from w3async.observe.video import VIDEO_NAME, VIDEO_DIR

SCHEMA = 1  # of /status, /games and /series (docs/status.md)


@runtime_checkable
class StatusSource(Protocol):
    """What the server asks the live run for (the supervisor implements it, or wraps
    itself in SupervisorSource). Both calls run on the loop and must not block."""

    run_dir: Path
    """The run folder: its logs feed the series (docs/logs.md)."""

    def stats(self) -> dict:
        """Counters, as Supervisor.stats() returns them: agent_steps, rounds,
        rows_per_round, seconds, cpu_s, bad_rows, restarts {cause: n},
        games {index: {pid, state, restarts, causes}}."""

    def games(self) -> list[dict]:
        """One dict per game slot with GAME_KEYS (docs/status.md, "/games")."""


@dataclass(frozen=True)
class GameView:
    """One game slot as /games shows it (docs/status.md): a slot of this process
    (Slot.view), a game host's (its report, cluster/link.py) or one read back from the
    run's files when no supervisor runs."""

    slot: int
    runtime: str | None
    role: str | None
    lanes: int | None
    sides: int | None
    pid: int | None = None
    state: str = "lost"
    restarts: int = 0
    causes: dict = field(default_factory=dict)
    steps: int | None = None  # its rows' sequence numbers summed (None: not known)
    last_step_age_s: float | None = None
    host: str = ""  # the game host it runs on ("": this machine)
    cpu: float | None = None  # cores its processes used over the last accounting sample (None: not sampled)
    rss_mb: float | None = None  # their resident memory, MiB
    cpu_ms_per_step: float | None = None  # their CPU ms per agent step of it over that sample (None: no step)

    def as_dict(self) -> dict:
        return asdict(self)


def game_view(slot: int, group, **state) -> GameView:
    """A slot's GameView: its group's fields (a recipes.GameGroup), then its state."""
    return GameView(slot=slot, runtime=group.runtime, role=getattr(group, "role", None), lanes=group.lanes,
                    sides=group.sides, **state)


GAME_KEYS = tuple(f.name for f in fields(GameView))


class SupervisorSource:
    """StatusSource over a live run (reads its slots; changes nothing): its folder, the
    supervisor's stats(), its slots, its cluster link (or None) and the accounting's
    latest sample (a callable; None: no sample). Made by the run's watch (runtime/watching.py)."""

    def __init__(self, run_dir: Path, stats: Callable[[], dict], slots: list, cluster, accounting: Callable):
        self.run_dir = Path(run_dir)
        self.stats, self._slots, self._cluster, self._accounting = stats, slots, cluster, accounting

    def games(self) -> list[dict]:
        now = time.monotonic()
        views = [s.view(now) for s in self._slots] + (self._cluster.games_view() if self._cluster else [])
        acct = (self._accounting() or {}).get("games", {})
        out = [v.as_dict() for v in views]
        for g in out:
            fig = acct.get(g["slot"]) if not g["host"] else None
            if fig:
                g.update(cpu=fig["cpu"], rss_mb=round(fig["rss_mb"], 1), cpu_ms_per_step=fig.get("ms_per_step"))
        return out


def take_snapshot(source: StatusSource, now: float | None = None) -> dict:
    """The live counters as plain dicts the server thread may keep: called on the loop
    that owns the source (the supervisor's), once a sample."""
    get = getattr(source, "latest_replay_path", None)
    return dict(t=time.time() if now is None else now, stats=source.stats(),
                games=[dict(g, causes=dict(g.get("causes") or {})) for g in source.games()],
                replay=get() if get else None)


def _f(x, nd: int = 3):
    """A finite float rounded, or None (JSON has no NaN)."""
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return round(v, nd) if math.isfinite(v) else None


def _iso(t: float | None) -> str | None:
    return datetime.fromtimestamp(t, timezone.utc).isoformat().replace("+00:00", "Z") if t else None


def _best(ck: Path) -> dict | None:
    """checkpoints/best.json (learn/best.py: the record of best.pt), as /status's `best`;
    None when there is none or it does not read."""
    try:
        rec = json.loads((ck / "best.json").read_text())
        st = os.stat(ck / "best.pt")
    except (OSError, ValueError):
        return None
    if not isinstance(rec, dict):
        return None
    levels = rec.get("levels") if isinstance(rec.get("levels"), dict) else {}
    return dict(path=str(ck / "best.pt"), updates=rec.get("updates"), agent_steps=rec.get("agent_steps"),
                score=_f(rec.get("score"), 4), games=rec.get("games"), wins=rec.get("wins"), lo=_f(rec.get("lo"), 4),
                hi=_f(rec.get("hi"), 4), window=rec.get("window"), by=rec.get("by") or "outcome",
                levels={k: {f: v.get(f) for f in ("games", "wins", "decisive_wins", "time_limit_wins", "losses",
                                                  "draws", "win_rate", "decisive_rate", "score", "lo", "hi",
                                                  "mean_return")}
                        for k, v in levels.items() if isinstance(v, dict)},
                saved_at=_iso(st.st_mtime), age_s=_f(time.time() - st.st_mtime, 1), bytes=st.st_size)


def list_videos(run_dir: Path, most: int = 20) -> list[dict]:
    """The newest evaluation videos (observe/video.py) in videos/, newest first, as /status's
    `videos`: {name, url (served at /videos/NAME), bytes, saved_at}."""
    try:
        with os.scandir(Path(run_dir) / VIDEO_DIR) as it:
            found = [(e.name, e.stat()) for e in it if VIDEO_NAME.fullmatch(e.name) and e.is_file(follow_symlinks=False)]
    except OSError:
        return []
    found.sort(key=lambda x: x[0], reverse=True)  # eval-<agent steps, 12 digits>.mp4: by name is by time
    return [dict(name=n, url=f"/videos/{n}", bytes=st.st_size, saved_at=_iso(st.st_mtime)) for n, st in found[:most]]


def _accounting(sample: dict | None) -> dict | None:
    """/status's `accounting`: the last sample's totals by kind, the supervisor's threads
    by role and each Wine prefix's sync (None: accounting off, or no sample yet)."""
    if not sample:
        return None
    return dict(sampled_at=_iso(sample["t"]), interval_s=sample["interval_s"], sample_ms=sample["sample_ms"],
                kinds=sample["kinds"], threads=sample["threads"], prefixes=sample["prefixes"],
                games={str(k): dict(cpu=v["cpu"], rss_mb=round(v["rss_mb"], 1), ms_per_step=v.get("ms_per_step"))
                       for k, v in sample["games"].items()})


def run_levels(run_dir: Path) -> tuple[str, ...] | None:
    """The evaluation levels of the run's game, from its recipe.json: the game's as the
    registry knows it, or, for a game the recipe declared ([spec]) that this process has
    not, the spec's levels (before: `w3async status` of a finished run of a declared game
    showed no evaluation); then the labels of its `role = "eval"` groups that are no
    level (the kit's "bot": evaluated, but declared no level); None where recipe.json
    does not say: every registered game's."""
    try:
        rec = json.loads(RunFolder(run_dir).recipe.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(rec, dict):
        return None
    try:
        game = games.get(rec.get("game"))
        levels = list(game.eval_levels)
        groups = rec.get("games") if isinstance(rec.get("games"), list) else []
        for g in groups:
            if isinstance(g, dict) and g.get("role") == "eval" and isinstance(g.get("env"), dict):
                label = game.opponent_of(g["env"])
                if label not in levels:
                    levels.append(label)
        return tuple(levels) or None
    except (games.UnknownGame, TypeError, AttributeError):
        pass
    spec = rec.get("spec")
    levels = spec.get("levels") if isinstance(spec, dict) else None
    return tuple(str(k) for k in levels) if isinstance(levels, dict) and levels else None


class RunView:
    """A run's status from its files and, when live, snapshots of its StatusSource
    (`feed()`, or `sample()` on the source's own loop). One thread uses a view."""

    FOLDER_SCAN_S = 1.0  # checkpoints/ and league/ are listed at most this often

    def __init__(self, run_dir: Path, source: StatusSource | None = None, live: bool | None = None):
        self.run_dir = Path(run_dir)
        self.source = source
        self.live_source = source is not None if live is None else live  # counters come from snapshots
        self._snap: dict | None = None
        self.series = RunSeries(levels=run_levels(self.run_dir))
        self.files = RunFiles(self.run_dir, self.series, live_sampler=self.live_source)
        self.started_wall = time.time()
        self._rates = collections.deque(maxlen=61)  # (t, agent_steps, rounds), one a sample
        self._steps_per_s: float | None = None
        self._rounds_per_s: float | None = None
        self._scan_at = -1e9
        self._folder: dict = dict(checkpoint=None, best=None, snapshots=0, latest_snapshot=None, videos=[])
        self._replays: tuple[tuple, str | None] = ((), None)  # the replay folders' mtimes, their newest file
        self._replay_dirs: dict[str, tuple[str, ...]] | None = None  # the run's game's, once recipe.json names it
        self._recipe_games: list[dict] | None = None

    # ---- feeding --------------------------------------------------------------------

    def refresh(self) -> None:
        """Read what the logs gained; list checkpoints/ and league/ (at most 1/s)."""
        self.files.poll()
        now = time.monotonic()
        if now - self._scan_at >= self.FOLDER_SCAN_S:
            self._scan_at = now
            self._folder = self._scan_folder()

    def sample(self, now: float | None = None) -> None:
        """Live, on the source's loop: one sample of its counters (= feed(take_snapshot()))."""
        if self.source is not None:
            self.feed(take_snapshot(self.source, now))

    def feed(self, snap: dict) -> None:
        """One snapshot of the live counters (take_snapshot's dict; kept, never changed)."""
        now, st = snap["t"], snap["stats"]
        self._snap = snap
        self._rates.append((now, int(st.get("agent_steps", 0)), int(st.get("rounds", 0))))
        if len(self._rates) >= 2:
            (t1, s1, r1), (t2, s2, r2) = self._rates[-2], self._rates[-1]
            dt = max(t2 - t1, 1e-6)
            self._steps_per_s, self._rounds_per_s = (s2 - s1) / dt, (r2 - r1) / dt
            kinds = (st.get("accounting") or {}).get("kinds") or {}
            by_kind = {f"{fig}:{k}": v[fig] for k, v in kinds.items() for fig in ("cpu", "rss_mb")}
            self.series.add_sample(now, steps_per_s=self._steps_per_s,
                                   restarts=sum(g.get("restarts") or 0 for g in snap["games"]), **by_kind)
        elif self.series.t0 is None:
            self.series.t0 = now

    def _scan_folder(self) -> dict:
        out = dict(checkpoint=None, best=None, snapshots=0, latest_snapshot=None, videos=list_videos(self.run_dir))
        ck = RunFolder(self.run_dir).checkpoints
        out["best"] = _best(ck)
        try:
            name = (ck / "latest").read_text().strip()
            st = os.stat(ck / name)
            out["checkpoint"] = dict(name=name, path=str(ck / name), saved_at=_iso(st.st_mtime),
                                     age_s=_f(time.time() - st.st_mtime, 1), bytes=st.st_size)
        except (OSError, ValueError):
            pass
        try:
            snaps = sorted(p for p in os.listdir(RunFolder(self.run_dir).league) if p.startswith("snap-") and p.endswith(".pt"))
        except OSError:
            snaps = []
        out["snapshots"] = len(snaps)
        if snaps:
            try:
                out["latest_snapshot"] = int(snaps[-1][5:-3])
            except ValueError:
                pass
        self._scan_replays()
        return out

    def _replay_folders(self) -> dict[str, tuple[str, ...]]:
        """{folder in the run: replay file suffixes} of the run's game (recipe.json's
        `game`, from the games registry), or of every registered game when the run's
        game is not known (yet)."""
        if self._replay_dirs is not None:
            return self._replay_dirs
        try:
            found, known = [games.get(json.loads(RunFolder(self.run_dir).recipe.read_text()).get("game"))], True
        except (OSError, ValueError, AttributeError, games.UnknownGame):
            found, known = games.all_games(), False
        out: dict[str, tuple[str, ...]] = {}
        for g in found:
            if g.replay_dir:
                out[g.replay_dir] = tuple(dict.fromkeys(out.get(g.replay_dir, ()) + tuple(g.replay_suffixes)))
        if known:
            self._replay_dirs = out
        return out

    def _scan_replays(self) -> None:
        """The newest finished replay in the game's replay folder (where the eval games
        record), listed again only when the folder changed: a long run's thousands of
        replays are not listed every second."""
        folders = self._replay_folders()
        mtimes = []
        for d in folders:
            try:
                mtimes.append((d, os.stat(self.run_dir / d).st_mtime))
            except OSError:
                pass
        if not mtimes or tuple(mtimes) == self._replays[0]:
            return
        best, best_t = None, -1.0
        for d, _ in mtimes:
            suffixes = folders[d]
            try:
                with os.scandir(self.run_dir / d) as it:
                    for e in it:
                        # not the .part being written, nor a symbolic link (it could lead out of the run folder)
                        if e.name.endswith(suffixes) and e.is_file(follow_symlinks=False):
                            t = e.stat().st_mtime
                            if t > best_t:
                                best, best_t = e.path, t
            except OSError:
                continue
        self._replays = (tuple(mtimes), best)

    # ---- reading --------------------------------------------------------------------

    def live(self) -> bool:
        """A supervisor holds the run: ours (a source) until its shutdown event, or one
        whose pid run.lock names."""
        if self.live_source:
            return self.files.shutdown is None
        try:
            pid = int(json.loads(RunFolder(self.run_dir).lock.read_text() or "{}").get("pid", 0))
        except (OSError, ValueError, TypeError):
            return False
        return pid > 0 and alive(pid)  # a zombie is not a live supervisor

    def games(self) -> list[dict]:
        if self.live_source:
            return [{k: g.get(k) for k in GAME_KEYS} for g in (self._snap or {}).get("games", [])]
        groups = self._groups()
        out = []
        for slot in sorted(self.files.games):
            g = self.files.games[slot]
            grp = groups[slot] if slot < len(groups) else {}
            out.append(GameView(slot=slot, pid=g.pid, runtime=g.runtime or grp.get("runtime"), role=grp.get("role"),
                                lanes=grp.get("lanes"), sides=grp.get("sides"), state=g.state, restarts=g.restarts,
                                causes=dict(g.causes)).as_dict())
        return out

    def _groups(self) -> list[dict]:
        """recipe.json's game groups, one entry per slot (file mode only)."""
        if self._recipe_games is None:
            try:
                r = json.loads(RunFolder(self.run_dir).recipe.read_text())
                self._recipe_games = [dict(runtime=g.get("runtime", "native"), role=g.get("role"),
                                           lanes=g.get("lanes", 1), sides=g.get("sides", 2)) for g in r.get("games", [])
                                      for _ in range(int(g.get("count", 1)))]
            except (OSError, ValueError, AttributeError):
                return []
        return self._recipe_games

    def status(self) -> dict:
        """The /status body (docs/status.md)."""
        f, s = self.files, self.series
        st = self._snap["stats"] if self.live_source and self._snap else {}
        run = f.run
        started = run.get("started") or (self.started_wall if self.live_source else s.t0)
        ended = f.shutdown["t"] if f.shutdown else None
        live = self.live()
        now = time.time()
        uptime = (now if live or not ended else ended) - started if started else None
        resumed = int(run.get("resumed_steps") or 0)  # the agent steps this start resumed from (0: a fresh run)
        games = self.games()
        states = collections.Counter(g["state"] for g in games)
        if st:
            # From the slots' own causes: the same figures /games shows, in one read.
            restarts = collections.Counter()
            for g in games:
                restarts.update(g.get("causes") or {})
            restarts = dict(restarts)
            agent_steps, rounds, bad_rows = st.get("agent_steps", 0), st.get("rounds", 0), st.get("bad_rows", 0)
            steps_per_s, rounds_per_s = self._steps_per_s, self._rounds_per_s
        else:
            restarts, bad_rows = dict(f.restarts), f.bad_rows
            sd = f.shutdown or {}
            agent_steps = max(int(sd.get("agent_steps") or 0), f.rows)
            rounds = max(int(sd.get("rounds") or 0), f.rounds)
            lr = s.last_round or {}
            if live and lr:
                steps_per_s, rounds_per_s = _f(lr.get("rows")), _f(lr.get("rounds"))
            else:  # a finished run: the average of its last start (its seconds and rounds are that start's)
                secs = sd.get("seconds") or uptime
                steps_per_s = (agent_steps - resumed) / secs if secs else None
                rounds_per_s = rounds / secs if secs else None
        per_60 = None
        if len(self._rates) >= 2:
            (t1, s1, _), (t2, s2, _) = self._rates[0], self._rates[-1]
            per_60 = (s2 - s1) / max(t2 - t1, 1e-6)
        lr = s.last_round or {}
        lat, comp = _f(lr.get("latency_ms_mean")), _f(lr.get("compute_ms_mean"))
        lu = s.last_update or {}
        ep = s.episodes
        return dict(
            schema=SCHEMA, time=_iso(now),
            run=dict(name=run.get("run") or self.run_dir.name, dir=str(self.run_dir), recipe=run.get("recipe"),
                     pid=run.get("pid"), started=_iso(started), uptime_s=_f(uptime, 1), resumed_steps=resumed,
                     live=live,
                     ended=_iso(ended) if ended else None, error=(f.shutdown or {}).get("error")),
            steps=dict(agent_steps=int(agent_steps), per_s=_f(steps_per_s, 1), per_s_60s=_f(per_60, 1)),
            games=dict(total=len(games), alive=states["running"] + states["starting"], running=states["running"],
                       starting=states["starting"], restarting=states["restarting"], failed=states["failed"],
                       stopped=states["stopped"], restarts=sum(restarts.values()), restarts_by_cause=restarts,
                       bad_rows=int(bad_rows)),
            inference=dict(rounds=int(rounds), rounds_per_s=_f(rounds_per_s, 1),
                           rows_per_round=_f((agent_steps - resumed) / rounds if rounds else None, 2),
                           latency_ms_mean=lat, latency_ms_p95=_f(lr.get("latency_ms_p95")),
                           latency_ms_max=_f(lr.get("latency_ms_max")), compute_ms_mean=comp,
                           compute_share=_f(rounds_per_s * comp / 1000.0 if rounds_per_s and comp else None, 4),
                           buckets=lr.get("buckets") or {}, learner_phase=lr.get("learner_phase")),
            learner=dict(updates=s.updates, update=lu.get("update"), update_s=_f(lu.get("update_s")),
                         wait_s=_f(lu.get("wait_s")), staleness=_f(lu.get("staleness")),
                         policy_loss=_f(lu.get("policy_loss"), 5), value_loss=_f(lu.get("value_loss"), 5),
                         entropy=_f(lu.get("entropy"), 5), approx_kl=_f(lu.get("approx_kl"), 6),
                         lr=_f(lu.get("lr"), 8), steps=lu.get("steps")),
            league=dict(snapshots=self._folder["snapshots"], latest_snapshot=self._folder["latest_snapshot"],
                        opponents=dict(s.opponents)),
            evaluation=s.evaluation(),
            episodes=dict(total=len(ep), eval=sum(t.games for t in s.levels.values()),
                          train=s.train.as_dict(), last_eval_replay=self.latest_replay()),
            checkpoint=self._folder["checkpoint"],
            best=self._folder["best"],
            videos=self._folder["videos"],
            hosts=st.get("hosts") or [],
            accounting=_accounting(st.get("accounting")),
        )

    def latest_replay(self) -> str | None:
        """The replay to show: the source's `latest_replay_path()` when it has one (in
        the last snapshot), else the newest finished file in the game's replay folder. The
        server serves it only where it resolves inside the run folder."""
        p = (self._snap or {}).get("replay") or self._replays[1]
        if not p:
            return None
        p = Path(p)
        return str(p if p.is_absolute() else self.run_dir / p)
