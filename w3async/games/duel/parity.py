"""Replay parity: does a change leave the duel simulation identical? The duel's parity
tool (its games registry entry names this module); run it as

    python -m w3async.replay_parity REPLAY... [--env KEY=a,b ...] [--runtime native,wine] [--native-exe P]
                                    [--steps N] [--timeout S]

Each replay is played back once per variant (every combination of the --env values
and the runtimes), all variants at the same time, one `duel --play-replay` process
each. Every variant's dump (the state after every step) is compared with the recording
(hashes always, every unit's fields when the recording has states) and with the first
variant, unit by unit and field by field. The report is a table (replay, steps,
variants, verdict) and, for a divergence, the first step and the fields that differ.

Exit status: 0 all identical; 1 a divergence; 2 a replay that fails to load, a variant
that crashes, hangs past --timeout or stops early, or bad options (a --steps or --timeout
that is not a positive number, a malformed --env, a game that is not a program, a --keep
that is not a folder): one line naming the option and the value, nothing run.

Trap (found in a Warcraft III harness under Wine): a variant's environment must really reach the game. Each variant's
values are set last, over the caller's environment, and the table prints them.
"""

from __future__ import annotations

import argparse
import itertools
import math
import os
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, ContextManager

from w3async.games.duel.replay import FieldDiff, Replay, ReplayError, diff_step, read_replay

REPO = Path(__file__).resolve().parents[3]
NATIVE_EXE = REPO / "build" / "native" / "duel"
WIN_EXE = REPO / "build" / "win64" / "duel.exe"

EXIT_OK, EXIT_DIVERGED, EXIT_BROKEN = 0, 1, 2


@dataclass(frozen=True)
class Variant:
    runtime: str  # "native" or "wine"
    env: tuple[tuple[str, str], ...]

    @property
    def name(self) -> str:
        return " ".join([self.runtime] + [f"{k}={v}" for k, v in self.env])


@dataclass
class Divergence:
    against: str  # "recording" or the reference variant's name
    variant: str
    step: int
    diffs: list[FieldDiff]


@dataclass
class Result:
    replay: str
    steps: int = 0
    variants: list[str] = field(default_factory=list)
    divergences: list[Divergence] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    @property
    def verdict(self) -> str:
        if self.errors:
            return "broken"
        return "diverged" if self.divergences else "identical"


def parse_env(specs: list[str]) -> list[list[tuple[str, str]]]:
    """['W3D_CUTS=0,7', 'A=x'] -> [[('W3D_CUTS','0'), ('W3D_CUTS','7')], [('A','x')]]."""
    axes = []
    for spec in specs:
        key, sep, values = spec.partition("=")
        if not sep or not key or "\0" in spec:
            raise ValueError(f"--env {spec!r}: expected KEY=a,b,...")
        axes.append([(key, v) for v in values.split(",")])
    return axes


def make_variants(runtimes: list[str], env_axes: list[list[tuple[str, str]]]) -> list[Variant]:
    return [Variant(rt, tuple(combo)) for rt in runtimes for combo in itertools.product(*env_axes)]


class _Run:
    """One variant's playback process, its dump and what it printed."""

    def __init__(self, variant: Variant, dump: Path, proc: subprocess.Popen):
        self.variant, self.dump, self.proc = variant, dump, proc
        self.last_step = 0
        self.lines: list[str] = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        for raw in self.proc.stdout:
            line = raw.decode(errors="replace").rstrip()
            self.lines.append(line)
            parts = line.split()
            if len(parts) >= 2 and parts[0] in ("progress", "done") and parts[1].isdigit():
                self.last_step = int(parts[1])


def _windows_path(path: Path) -> str:
    return "Z:" + str(path.resolve()).replace("/", "\\")


def play_variants(replay: Path, variants: list[Variant], steps: int | None, timeout_s: float, workdir: Path,
                  total: int, log=print, wine_prefix=None, exes: dict | None = None) -> tuple[dict[Variant, Path], list[str]]:
    """Starts every variant at once, waits (printing progress), returns the dumps of
    those that finished and the errors of those that did not. exes: the game per
    runtime (default NATIVE_EXE and WIN_EXE)."""
    exes = exes or {"native": NATIVE_EXE, "wine": WIN_EXE}
    runs: list[_Run] = []
    errors: list[str] = []
    for k, v in enumerate(variants):
        dump = workdir / f"{replay.stem}.v{k}.w3dr"
        args = ["--play-replay", None, "--dump", None] + (["--steps", str(steps)] if steps else [])
        extra = dict(v.env)
        if v.runtime == "native":
            args[1], args[3] = str(replay.resolve()), str(dump)
            cmd, env = [str(exes["native"])] + args, {**os.environ, **extra}
        else:
            args[1], args[3] = _windows_path(replay), _windows_path(dump)
            cmd, env = wine_prefix.command(str(exes["wine"]), args), wine_prefix.env(extra)
        try:
            proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                    start_new_session=True)
        except OSError as e:  # the game went since main() checked it, a limit on processes: this variant is broken
            errors.append(f"{v.name}: cannot start {cmd[0]}: {e.strerror or e}")
            continue
        runs.append(_Run(v, dump, proc))
    deadline = time.monotonic() + timeout_s
    last_report = 0.0
    while any(r.proc.poll() is None for r in runs):
        now = time.monotonic()
        if now > deadline:
            for r in runs:
                if r.proc.poll() is None:
                    os.killpg(r.proc.pid, 9)
                    r.proc.wait()
                    errors.append(f"{r.variant.name}: hung: no end after {timeout_s:.0f} s (at step {r.last_step})")
            break
        if now - last_report >= 2.0:
            last_report = now
            states = ", ".join(f"[{r.variant.name}] {r.last_step}/{total}" for r in runs)
            log(f"  {replay.name}: {states}")
        time.sleep(0.05)
    dumps = {}
    for r in runs:
        r.reader.join(timeout=5)
        rc = r.proc.returncode
        if any(e.startswith(r.variant.name + ":") for e in errors):
            continue
        if rc != 0:
            tail = " | ".join(r.lines[-3:])
            errors.append(f"{r.variant.name}: exited {rc} (crash or error): {tail}")
        elif not r.dump.exists():
            errors.append(f"{r.variant.name}: no dump written at {r.dump}")
        else:
            dumps[r.variant] = r.dump
    return dumps, errors


def compare(recording: Replay, dumps: dict[Variant, Replay], steps: int) -> list[Divergence]:
    """First diverging step per variant, against the recording and the first variant."""
    out: list[Divergence] = []
    names = list(dumps)
    ref = dumps[names[0]] if names else None
    for v in names:
        d = dumps[v]
        for against, other in (("recording", recording), (names[0].name, ref)):
            if other is d:
                continue
            for i in range(steps):
                diffs = diff_step(other.steps[i], d.steps[i])
                if diffs:
                    out.append(Divergence(against, v.name, i, diffs))
                    break
    return out


def check_replay(path: Path, variants: list[Variant], steps: int | None, timeout_s: float, workdir: Path,
                 log=print, wine_prefix=None, exes: dict | None = None) -> Result:
    res = Result(str(path), variants=[v.name for v in variants])
    try:
        rec = read_replay(path)
    except (ReplayError, OSError) as e:
        res.errors.append(f"cannot load: {e}")
        return res
    n = len(rec.steps) if steps is None else min(steps, len(rec.steps))
    res.steps = n
    dumps, errors = play_variants(path, variants, n, timeout_s, workdir, n, log, wine_prefix, exes)
    res.errors.extend(errors)
    loaded = {}
    for v, p in dumps.items():
        try:
            loaded[v] = read_replay(p)
        except ReplayError as e:
            res.errors.append(f"{v.name}: its dump is unreadable: {e}")
            continue
        if len(loaded[v].steps) < n:
            res.errors.append(f"{v.name}: stopped after {len(loaded[v].steps)} of {n} steps")
            del loaded[v]
    res.divergences = compare(rec, loaded, n) if loaded else []
    return res


def report(results: list[Result], out=None) -> None:
    out = out or sys.stdout
    rows = [("replay", "steps", "variants", "verdict")] + [
        (Path(r.replay).name, str(r.steps), str(len(r.variants)), r.verdict) for r in results]
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    for row in rows:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths)), file=out)
    for r in results:
        for e in r.errors:
            print(f"{Path(r.replay).name}: {e}", file=out)
        for d in r.divergences:
            print(f"{Path(r.replay).name}: [{d.variant}] differs from [{d.against}] first at step {d.step}:", file=out)
            for f in d.diffs:
                print(f"    {f.what} {f.field}: {f.a} vs {f.b}", file=out)


def _positive(kind):
    """An argparse type: a finite number > 0 (a --timeout of nan never ends, a --steps of
    0 or -5 compared nothing and said "identical")."""
    def parse(text: str):
        try:
            x = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        if not (math.isfinite(x) and x > 0):
            raise argparse.ArgumentTypeError(f"{text!r}: must be a finite number > 0")
        return x
    parse.__name__ = kind.__name__
    return parse


def _not_a_program(exe: Path) -> str | None:
    if not exe.exists():
        return "is missing: run `make build`"
    if not exe.is_file() or not os.access(exe, os.X_OK):
        return "is not a program (a folder, or a file without execute permission)"
    return None


def main(argv: list[str] | None = None, acquire_wine_prefix: Callable[[], ContextManager] | None = None) -> int:
    """The command line. acquire_wine_prefix: a context manager factory giving a Wine
    prefix (.command, .env) for --runtime wine; w3async.replay_parity passes the
    runtime's (this package does not import the runtime)."""
    ap = argparse.ArgumentParser(prog="python -m w3async.replay_parity", description=__doc__.split("\n\n")[0])
    ap.add_argument("replays", nargs="+", type=Path)
    ap.add_argument("--env", action="append", default=[], help="KEY=a,b: one variant per value (repeatable)")
    ap.add_argument("--runtime", default="native", help="native, wine or native,wine")
    ap.add_argument("--steps", type=_positive(int), default=None, help="compare at most this many steps")
    ap.add_argument("--timeout", type=_positive(float), default=300.0,
                    help="seconds per replay before a variant counts as hung")
    ap.add_argument("--keep", type=Path, default=None, help="keep the dumps in this folder")
    ap.add_argument("--native-exe", type=Path, default=None, help=f"the native game (default {NATIVE_EXE})")
    ap.add_argument("--wine-exe", type=Path, default=None, help=f"the Windows game (default {WIN_EXE})")
    a = ap.parse_args(argv)
    exes = {"native": (a.native_exe or NATIVE_EXE).resolve(), "wine": (a.wine_exe or WIN_EXE).resolve()}
    runtimes = [r.strip() for r in a.runtime.split(",") if r.strip()]
    bad = [r for r in runtimes if r not in ("native", "wine")]
    if bad or not runtimes:
        ap.error(f"--runtime {a.runtime}: each must be native or wine")
    try:
        variants = make_variants(runtimes, parse_env(a.env))
    except ValueError as e:
        ap.error(str(e))
    for rt, exe in exes.items():
        why = _not_a_program(exe) if rt in runtimes else None
        if why:
            print(f"replay_parity: --{rt}-exe {exe} {why}", file=sys.stderr)
            return EXIT_BROKEN
    if a.keep is not None:
        try:
            if a.keep.exists() and not a.keep.is_dir():
                raise NotADirectoryError(0, "it is a file, not a folder")
            a.keep.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            print(f"replay_parity: --keep {a.keep}: cannot keep the dumps there: {e.strerror or e}", file=sys.stderr)
            return EXIT_BROKEN
    print(f"replay_parity: {len(a.replays)} replay(s) x {len(variants)} variant(s): "
          + "; ".join(v.name for v in variants), flush=True)
    results = []
    with ExitStack() as stack:
        prefix = None
        if "wine" in runtimes:
            if acquire_wine_prefix is None:
                print("replay_parity: --runtime wine needs a Wine prefix: run `python -m w3async.replay_parity`",
                      file=sys.stderr)
                return EXIT_BROKEN
            try:
                prefix = stack.enter_context(acquire_wine_prefix())
            except (RuntimeError, OSError) as e:
                print(f"replay_parity: no Wine prefix for --runtime wine: {e}", file=sys.stderr)
                return EXIT_BROKEN
        workdir = a.keep or Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="w3a-parity-")))
        for path in a.replays:
            print(f"replay_parity: {path} ...", flush=True)
            results.append(check_replay(path, variants, a.steps, a.timeout, workdir,
                                        log=lambda s: print(s, flush=True), wine_prefix=prefix, exes=exes))
    report(results)
    if any(r.errors for r in results):
        return EXIT_BROKEN
    return EXIT_DIVERGED if any(r.divergences for r in results) else EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
