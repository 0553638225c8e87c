"""`python -m w3async run RECIPE [--run NAME] [--set key=value ...]`, and
`python -m w3async status runs/<run>` (a live or a finished run's summary), and
`python -m w3async eval CHECKPOINT [--games N] [--levels easy,normal,hard] [--seed S]
[--parallel P]` (a checkpoint against each evaluation level: learn/evaluate.py).

Bad input (a broken recipe or `--set`, a missing binary, a device or a folder this
machine lacks, sizes beyond its limits: recipes.py and preflight.py, all checked
before anything is created) ends with one clear message on stderr, naming the file,
the key and the value, and exit status 2; a run that fails (every game slot failed)
with exit status 1; no traceback in either case.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import sys
import time
from pathlib import Path

from w3async.observe.logs import console
from w3async.recipes import REPO_ROOT, RecipeError, load_recipe, resolve_recipe_path


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="w3async", description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run a recipe")
    run.add_argument("recipe", help="a recipe name (recipes/NAME.toml) or a path")
    run.add_argument("--run", default="", help="run folder name under --runs-dir (default: RECIPE-DATE-TIME)")
    run.add_argument("--runs-dir", default=str(REPO_ROOT / "runs"), help="where run folders live")
    run.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                     help="override a recipe value, e.g. --set stop.seconds=30 (repeatable)")
    st = sub.add_parser("status", help="summarise a live or finished run from its folder")
    st.add_argument("run_dir", help="the run folder, runs/<run>")
    from w3async.learn.evaluate import add_arguments  # noqa: PLC0415 (no torch until it runs)

    add_arguments(sub.add_parser("eval", help="play a checkpoint against each evaluation level"))
    return p


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


def _run(args) -> int:
    from w3async.runtime.preflight import preflight  # noqa: PLC0415 (fast --help)
    from w3async.runtime.supervisor import RunError, Supervisor  # noqa: PLC0415

    path = resolve_recipe_path(args.recipe)
    try:
        recipe = load_recipe(path, args.set)
    except RecipeError as e:
        console(f"w3async: error: {e}")
        return 2
    name = args.run or f"{recipe.name}-{time.strftime('%Y%m%d-%H%M%S')}"
    name = name.rstrip("/") or name  # "r1/" (a shell's completion) is r1; "/" stays, and is refused
    # The run folder is one name under --runs-dir: `--run ../x` or `--run /abs` would make or
    # resume a folder elsewhere (an existing one, e.g. ../recipes, gets the run's files).
    if "\0" in name or "\0" in args.runs_dir or "/" in name or name in ("", ".", ".."):
        return _error(path, [f"--run {name!r}, --runs-dir {args.runs_dir!r}: the run folder needs a name "
                             f"(not '', '.' or '..'), no '/' (it is made in --runs-dir: set that for "
                             f"another place) and no NUL"])
    runs_dir = Path(args.runs_dir)
    run_dir = runs_dir / name
    # Everything against the machine before anything is created: the run folder is made
    # by the supervisor's set-up, after this.
    problems = preflight(recipe, run_dir, runs_dir)
    if problems:
        return _error(path, problems)
    try:
        import uvloop  # noqa: PLC0415

        runner = uvloop.run
    except ImportError:
        runner = asyncio.run
    link = None
    if recipe.cluster is not None:  # game hosts through Ray: the one place that imports the cluster side
        if importlib.util.find_spec("ray") is None:
            return _error(path, ["[cluster] needs Ray, the package's cluster extra: pip install -e '.[cluster]' "
                                 "(make run installs it for a recipe with [cluster])"])
        from w3async.cluster.link import ClusterLink as link  # noqa: PLC0415, N813
    sup = Supervisor(recipe, run_dir, cluster=link)
    try:
        stats = runner(sup.run())
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
    console(f"w3async: run {run_dir} ended: {stats['agent_steps']:,} agent steps in {stats['seconds']:.1f} s, "
            f"{stats['rows_per_round']:.1f} rows a round, {sup.summary_games()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
