"""Every count of a recipe is at least 0 where a negative means nothing
(the class: every int field of every section, the learning sections included), and a
recipe path that is not a regular file (a FIFO, a folder, a device) is refused at once."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import typing
from pathlib import Path

import pytest

from w3async.recipes.checks import _base_type
from w3async.recipes import GameGroup, InjectSection, Recipe, RecipeError, load_recipe
from w3async.recipes.load import _learning_sections

REPO = Path(__file__).resolve().parents[2]

# The int keys where a negative value means something: a nice level raises a game's priority.
NEGATIVE_MEANS = {"games.nice": "a nice level below 0 (raised priority; needs CAP_SYS_NICE)"}


def _int_keys() -> list[tuple[str, str]]:
    """(section, key) for every int field: top level (''), games, games.inject, every
    [section] of Recipe and every learning section."""
    sections: dict[str, type] = {"": Recipe, "games": GameGroup, "games.inject": InjectSection}
    hints = typing.get_type_hints(Recipe)
    for f in dataclasses.fields(Recipe):
        tp = typing.get_args(hints[f.name]) or (hints[f.name],)
        for t in tp:
            if dataclasses.is_dataclass(t) and f.name != "games":
                sections[f.name] = t
    sections.update(_learning_sections())
    out = []
    for name, cls in sections.items():
        for f in dataclasses.fields(cls):
            if f.init and _base_type(typing.get_type_hints(cls)[f.name]) is int:
                out.append((name, f.name))
    return out


INT_KEYS = _int_keys()


def _recipe_text(section: str, key: str, value: int) -> str:
    if section == "":
        return f"{key} = {value}\n"
    if section == "games":
        return f"[[games]]\n{key} = {value}\n"
    if section == "games.inject":
        return f'[[games]]\nruntime = "wine"\nbinary = "x.exe"\n[games.inject]\nadapter = "a.dll"\n{key} = {value}\n'
    extra = 'address = "auto"\n' if section == "cluster" else ""
    return f"[{section}]\n{extra}{key} = {value}\n"


def test_the_class_covers_the_sections():
    keys = {f"{s}.{k}" if s else k for s, k in INT_KEYS}
    assert {"supervisor.restart_budget", "games.count", "learner.update_epochs", "league.snapshot_every",
            "trajectories.seq_len", "network.n_layers", "stop.steps", "cluster.host_restarts"} <= keys, keys


@pytest.mark.parametrize("section,key", INT_KEYS, ids=[f"{s}.{k}" if s else k for s, k in INT_KEYS])
def test_a_negative_count_is_refused_naming_the_file_key_and_value(tmp_path, section, key):
    """Every int key set to -1: one problem naming the file, the key and the value; only
    the keys where a negative means something (NEGATIVE_MEANS) take it."""
    dotted = f"{section}.{key}" if section else key
    path = tmp_path / "r.toml"
    path.write_text(_recipe_text(section, key, -1))
    try:
        load_recipe(path)
        problems = []
    except RecipeError as e:
        assert str(e).startswith(f"recipe {path}:")
        problems = [p for p in e.problems if key in p and "-1" in p]
    if dotted in NEGATIVE_MEANS:
        assert problems == [], problems
    else:
        assert len(problems) == 1, (dotted, problems)


@pytest.mark.parametrize("kind", ["fifo", "folder", "device", "symlink_to_fifo"])
def test_a_recipe_path_that_is_not_a_regular_file_is_refused_at_once(tmp_path, kind):
    """A FIFO (which hung with no message: open() waits for a writer), a folder, a
    device, a link to a FIFO: one line naming the path and what it is, exit 2, before
    anything is made; run in a child with a deadline, so that a hang fails the test."""
    path = tmp_path / "r.toml"
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "folder":
        path.mkdir()
    elif kind == "device":
        path = Path("/dev/null")
    else:
        os.mkfifo(tmp_path / "f")
        path.symlink_to(tmp_path / "f")
    runs = tmp_path / "runs"
    p = subprocess.run([sys.executable, "-m", "w3async", "run", str(path), "--runs-dir", str(runs)], cwd=REPO,
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 2, (p.returncode, p.stderr)
    what = "is a folder, not a recipe file" if kind == "folder" else "not a regular file"
    assert p.stderr == f"w3async: error: recipe {path}:\n  {p.stderr.splitlines()[-1].strip()}\n", p.stderr
    assert what in p.stderr, p.stderr
    assert "Traceback" not in p.stderr
    assert not runs.exists()
