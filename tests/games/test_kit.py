"""The kit for a user's own game (examples/mygame, docs/games.md "The kit"): copied to a
folder outside the repository, built with the lines its source documents, and run from
its recipe there, from another working folder. The recipe's relative paths are from its
own folder; the game's episodes are tallied against its bot; the Windows build runs
under Wine from the same recipe."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

from tests.conftest import REPO

KIT = REPO / "examples" / "mygame"


def build_line(compiler: str) -> str:
    """The documented build line of mygame.c that starts with `compiler`."""
    lines = [ln.strip(" */") for ln in (KIT / "mygame.c").read_text().splitlines()[:8]]
    found = [ln for ln in lines if ln.startswith(compiler + " ")]
    assert len(found) == 1, lines
    return found[0]


@pytest.mark.parametrize("runtime", ["native", pytest.param("wine", marks=pytest.mark.wine)])
def test_the_kit_builds_outside_the_repository_and_runs_from_its_recipe(tmp_path, runtime, request):
    if runtime == "wine":
        request.getfixturevalue("wine")
    where = tmp_path / "elsewhere" / "mygame"
    shutil.copytree(KIT, where)
    line = build_line("cc" if runtime == "native" else "x86_64-w64-mingw32-gcc")
    subprocess.run(["bash", "-c", line], cwd=where, env={"W3ASYNC": str(REPO), "PATH": "/usr/bin:/bin"},
                   check=True, timeout=120)
    exe = where / ("mygame" if runtime == "native" else "mygame.exe")
    assert exe.is_file()
    runs = tmp_path / "runs"
    sets = ["stop.seconds=6", "supervisor.policy=random", "supervisor.progress_s=0"]
    if runtime == "wine":
        sets += ['games.binary="mygame.exe"', 'games.runtime="wine"', "supervisor.start_timeout_s=120",
                 "stop.seconds=20"]
    args = [sys.executable, "-m", "w3async", "run", str(where / "mygame.toml"), "--runs-dir", str(runs), "--run", "r"]
    for s in sets:
        args += ["--set", s]
    r = subprocess.run(args, cwd=tmp_path, capture_output=True, text=True, timeout=300)  # not the recipe's folder
    assert r.returncode == 0, r.stderr[-3000:]
    recipe = json.loads((runs / "r" / "recipe.json").read_text())
    assert {g["binary"] for g in recipe["games"]} == {str(exe)}  # from the recipe's folder, kept absolute
    eps = [json.loads(x) for x in (runs / "r" / "episodes.jsonl").read_text().splitlines()]
    eps = [e for e in eps if e.get("event") == "episode"]
    assert {e["opponent"] for e in eps} == {"bot"} and {e["eval"] for e in eps} == {True, False}, eps[:3]
    assert all(e["result"] in ("win", "loss", "draw") and 17 <= e["steps"] <= 20 for e in eps), eps[:3]  # 20 cells
    # the race's reward is its result: the return of a race is +1, -1 or 0
    assert all(e["return"] == {"win": 1.0, "loss": -1.0, "draw": 0.0}[e["result"]] for e in eps)
