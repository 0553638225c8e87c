"""`python -m w3async run RECIPE [--run NAME] [--set key=value ...]`, and
`python -m w3async status runs/<run>` (a live or a finished run's summary), and
`python -m w3async eval CHECKPOINT [--games N] [--levels easy,normal,hard] [--seed S]
[--parallel P] [--greedy] [--against CHECKPOINT_B]` (a checkpoint against each evaluation
level, or against another checkpoint: learn/evaluate.py).

Bad input (a broken recipe or `--set`, a missing binary, a device or a folder this
machine lacks, sizes beyond its limits: recipes/load.py and preflight.py, all checked
before anything is created) ends with one clear message on stderr, naming the file,
the key and the value, and exit status 2; a run that fails (every game slot failed)
with exit status 1; no traceback in either case.

Signals: SIGINT and SIGTERM, in any order and at any spacing, end the run with its
shutdown record and exit 0. `python -m w3async run` holds handlers for both from this
module's first lines (before its imports) to its exit: a signal before the supervisor's
handlers are installed stops the run as soon as it is set up; one after the shutdown is
ignored. Only the interpreter's own start, before this module runs, has the defaults. (With the default handlers
back during the event loop's teardown, SIGINT, SIGTERM, SIGINT 30 ms apart exited 1 with
a KeyboardInterrupt in the runner's close and "Cannot close a running event loop".)
"""

from __future__ import annotations

import signal
import sys

_SIGNALS = (signal.SIGINT, signal.SIGTERM)
_early: list[int] = []  # signals heard before the supervisor's own handlers


def _note_signal(sig: int, frame) -> None:
    """The handler outside the supervisor's: remember, never raise (a KeyboardInterrupt
    from anywhere is a traceback)."""
    _early.append(sig)


if __name__ == "__main__" and sys.argv[1:2] == ["run"]:
    # First, before the imports below (seconds on a loaded machine: a SIGTERM then killed
    # the process with no shutdown record), so that `run` holds both signals to its exit.
    for _sig in _SIGNALS:
        signal.signal(_sig, _note_signal)

import argparse  # noqa: E402 (after the handlers: see above)
import asyncio  # noqa: E402
import importlib.util  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable, Coroutine  # noqa: E402
from pathlib import Path  # noqa: E402

from w3async.observe.logs import console  # noqa: E402
from w3async.recipes import REPO_ROOT, RecipeError, load_recipe, resolve_recipe_path  # noqa: E402


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="w3async", description=HELP)
    sub = p.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run a recipe")
    run.add_argument("recipe", help="a recipe name (recipes/NAME.toml) or a path")
    run.add_argument("--run", default=None, help="run folder name under --runs-dir (default: RECIPE-DATE-TIME)")
    run.add_argument("--runs-dir", default=str(REPO_ROOT / "runs"), help="where run folders live")
    run.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                     help="override a recipe value, e.g. --set stop.seconds=30 (repeatable)")
    run.add_argument("--trust-undigested", action="store_true",
                     help="resume from a checkpoint without a digest (written before checkpoints carried one)")
    st = sub.add_parser("status", help="summarise a live or finished run from its folder")
    st.add_argument("run_dir", help="the run folder, runs/<run>")
    from w3async.learn.evaluate import add_arguments  # noqa: PLC0415 (no torch until it runs)

    add_arguments(sub.add_parser("eval", help="play a checkpoint against each evaluation level"))
    return p


HELP = ("Run a recipe's games and learner (run), summarise a run from its folder (status), play a checkpoint "
        "against each evaluation level (eval). Set-up: make setup (the virtual environment and the C parts); "
        "the manual: README.md and docs/.")


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "run":
        return _run(args)
    if args.command == "status":
        from w3async.observe.status_cli import main as status_main  # noqa: PLC0415

        return status_main(args.run_dir)
    if args.command == "eval":
        from w3async.learn.evaluate import run_eval  # noqa: PLC0415

        return run_eval(args, console)
    return 2


def _error(path: str, problems: list[str]) -> int:
    console(f"w3async: error: recipe {path}:\n  " + "\n  ".join(problems))
    return 2


def _run_loop(main: Coroutine, new_loop: Callable[[], asyncio.AbstractEventLoop]):
    """asyncio.run, with the signals ours to its end: the loop's teardown (tasks
    cancelled, async generators and the default executor shut down) runs with the
    supervisor's handlers still in place (keep_signals); loop.close() then sets the
    default handlers again, so SIGINT and SIGTERM are blocked in this thread across it
    and ignored after it (a signal pending then is discarded)."""
    loop = new_loop()
    asyncio.set_event_loop(loop)
    try:
        return loop.run_until_complete(main)
    finally:
        try:
            tasks = asyncio.all_tasks(loop)
            for t in tasks:
                t.cancel()
            loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.run_until_complete(loop.shutdown_default_executor())
        finally:
            signal.pthread_sigmask(signal.SIG_BLOCK, _SIGNALS)
            asyncio.set_event_loop(None)
            loop.close()
            for sig in _SIGNALS:
                signal.signal(sig, signal.SIG_IGN)
            signal.pthread_sigmask(signal.SIG_UNBLOCK, _SIGNALS)


def _run(args) -> int:
    for sig in _SIGNALS:  # from here to the exit: no default handler (see the module's docstring)
        signal.signal(sig, _note_signal)
    from w3async.runtime.preflight import preflight  # noqa: PLC0415 (fast --help)
    from w3async import compose  # noqa: PLC0415 (fast --help)
    from w3async import eventloop  # noqa: PLC0415
    from w3async.runtime.supervisor import RunError  # noqa: PLC0415

    path = resolve_recipe_path(args.recipe)
    if args.trust_undigested:
        from w3async.learn.checkpoint import trust_undigested  # noqa: PLC0415 (torch: only when asked)
        trust_undigested()
    try:
        recipe = load_recipe(path, args.set)
    except RecipeError as e:
        console(f"w3async: error: {e}")
        return 2
    name = f"{recipe.name}-{time.strftime('%Y%m%d-%H%M%S')}" if args.run is None else args.run
    name = name.rstrip("/") or name  # "r1/" (a shell's completion) is r1; "/" stays, and is refused
    # The run folder is one name under --runs-dir: `--run ../x` or `--run /abs` would make or
    # resume a folder elsewhere (an existing one, e.g. ../recipes, gets the run's files).
    if "\0" in args.runs_dir or "/" in name or name in ("", ".", "..") or not name.isprintable():
        return _error(path, [f"--run {name!r}, --runs-dir {args.runs_dir!r}: the run folder needs a name "
                             f"(not '', '.' or '..'), no '/' (it is made in --runs-dir: set that for "
                             f"another place), no newline or other control character, and no NUL"])
    runs_dir = Path(args.runs_dir)
    run_dir = runs_dir / name
    # Everything against the machine before anything is created: the run folder is made
    # by the supervisor's set-up, after this.
    problems = preflight(recipe, run_dir, runs_dir)
    if problems:
        return _error(path, problems)
    new_loop = eventloop.new_loop
    if recipe.cluster is not None and importlib.util.find_spec("ray") is None:  # game hosts through Ray
        return _error(path, ["[cluster] needs Ray, the package's cluster extra: pip install -e '.[cluster]' "
                             "(make run installs it for a recipe with [cluster])"])
    sup = compose.supervisor(recipe, run_dir, keep_signals=True)  # its answerer and cluster link chosen there

    async def main() -> dict:
        await sup.setup()  # the supervisor's handlers from here; RunError when set-up fails
        console(f"w3async: {recipe.game}'s {sup.table.layout.describe()}")
        if _early:  # a signal during the checks or the set-up: a run that stops at once
            sup.request_stop()
        return await sup.run()

    try:
        stats = _run_loop(main(), new_loop)
    except RunError as e:
        if sup.setup_failed:
            console(f"w3async: error: run {run_dir} could not start: {e}")
            return 2
        console(f"w3async: run {run_dir} stopped: {e}")
        return 1
    except KeyboardInterrupt:
        return 130
    except (OSError, ValueError, ImportError) as e:
        # What the checks above cannot foresee (a folder changed since, a limit hit while
        # setting up): one line, no traceback. Before any game started it is bad input.
        started = any(s.proc is not None for s in sup.slots)
        msg = f"{e.strerror}: {e.filename}" if isinstance(e, OSError) and e.strerror and e.filename else str(e)
        if not started:
            console(f"w3async: error: run {run_dir} could not start: {type(e).__name__}: {msg}")
            return 2
        console(f"w3async: run {run_dir} stopped: {type(e).__name__}: {msg}")
        return 1
    since = stats["agent_steps"] - stats.get("resumed_steps", 0)
    steps = (f"{stats['agent_steps']:,} agent steps, {since:,} of them since the resume, in"
             if stats.get("resumed_steps") else f"{since:,} agent steps in")
    console(f"w3async: run {run_dir} ended: {steps} {stats['seconds']:.1f} s, {stats['rows_per_round']:.1f} rows "
            f"a round, {sup.summary_games()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
