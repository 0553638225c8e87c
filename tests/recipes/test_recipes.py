"""Bad input is one clear message: at load (recipes/load.py) or before
anything is created (preflight.py), naming the file, the key and the value; from the
command line exit status 2, no traceback, no run folder, no shared-memory segment."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import typing
from pathlib import Path

import pytest

from w3async.sync import layout
from w3async.runtime import preflight
from w3async.recipes import MAX_ROWS, YEAR_S, GameGroup, RecipeError, load_recipe, recipe_from_dict
from w3async.recipes.checks import _base_type
from w3async.recipes.load import _SECTIONS, _learning_sections
from w3async.sync.table import list_segments

from tests.conftest import SHM_PREFIX

REPO = Path(__file__).resolve().parents[2]
NULL = str(REPO / "recipes" / "null.toml")


def _problems(overrides: list[str], path: str = NULL) -> list[str]:
    with pytest.raises(RecipeError) as e:
        load_recipe(path, overrides)
    assert e.value.path == path
    return e.value.problems


def _float_keys() -> list[str]:
    """Every float key of every section, found from the dataclasses (not listed by hand)."""
    sections = {**_SECTIONS, **_learning_sections(), "games": GameGroup}
    keys = []
    for name, cls in sections.items():
        hints = typing.get_type_hints(cls)
        keys += [f"{name}.{f.name}" for f in dataclasses.fields(cls) if _base_type(hints[f.name]) is float]
    return keys


# ---- at load ---------------------------------------------------------------------------


def test_every_float_key_rejects_nan_and_infinities():
    keys = _float_keys()
    # The walk found the keys the issue names, and the learning side's.
    for k in ("stop.seconds", "stop.minutes", "supervisor.hang_timeout_s", "supervisor.round_period_ms",
              "supervisor.backoff_s", "learner.lr", "learner.vf_clip", "league.latest_share"):
        assert k in keys, keys
    for key in keys:
        for v in ("nan", "inf", "-inf"):
            cluster = ["cluster.local_nodes=1"] if key.startswith("cluster.") else []  # a whole [cluster]
            problems = _problems([*cluster, f"{key}={v}"])
            shown = key.replace("games.", "games[0].")
            assert problems == [f"{shown} = {float(v)!r}: must be a finite number"], (key, v, problems)


def test_non_finite_in_the_file_names_the_file_and_key(tmp_path):
    rec = tmp_path / "r.toml"
    rec.write_text('name = "x"\n[supervisor]\nhang_timeout_s = nan\nbackoff_s = inf\n[stop]\nseconds = -inf\n')
    problems = _problems([], str(rec))
    assert problems == ["supervisor.hang_timeout_s = nan: must be a finite number",
                        "supervisor.backoff_s = inf: must be a finite number",
                        "stop.seconds = -inf: must be a finite number"]


def test_durations_and_round_period_have_upper_bounds():
    p = _problems(["stop.seconds=1e12", "supervisor.hang_timeout_s=4e7", "stop.minutes=1e9",
                   "supervisor.round_period_ms=60001"])
    assert f"stop.seconds = 1000000000000.0: must be at most {YEAR_S} (a year)" in p
    assert f"supervisor.hang_timeout_s = 40000000.0: must be at most {YEAR_S} (a year)" in p
    assert f"stop.minutes = 1000000000.0: must be at most {YEAR_S // 60} (a year)" in p
    assert any(x.startswith("supervisor.round_period_ms = 60001.0: must be in 0..") for x in p), p
    assert len(p) == 4
    r = load_recipe(NULL, ["stop.minutes=600", "supervisor.round_period_ms=2.5", "supervisor.hang_timeout_s=3600"])
    assert r.stop.minutes == 600 and r.supervisor.round_period_ms == 2.5


def test_a_file_size_cap_at_or_below_the_log_cut_is_refused():
    """A log reaching game_file_mb ends its game: the cap must be above the cut."""
    p = _problems(["supervisor.game_log_mb=8", "supervisor.game_file_mb=8"])
    assert len(p) == 1 and p[0].startswith("[supervisor]") and "game_file_mb=8 must be more than game_log_mb=8" in p[0], p
    assert load_recipe(NULL, ["supervisor.game_log_mb=8"]).supervisor.file_cap_mb == 16
    assert load_recipe(NULL, ["supervisor.game_file_mb=100"]).supervisor.file_cap_mb == 100


def test_rows_beyond_the_table_format_are_rejected_at_load():
    p = _problems([f"games.lanes={2**31}"])
    assert len(p) == 1 and p[0].startswith(f"games: {8 * 2 * 2**31} rows (games[0]: count = 8, lanes = {2**31}")
    assert str(MAX_ROWS) in p[0]


@pytest.mark.parametrize("text,expected", [
    ("games.count.x=1", "--set 'games.count.x=1': games.count is a value, not a section"),
    ("games.0.count.x=1", "--set 'games.0.count.x=1': games.0.count is a value, not a section"),
    ("games.0=1", "--set 'games.0=1': games.0 is a group: set games.0.KEY"),
    ("games=5", "--set 'games=5': games is the list of [[games]] groups"),
    ("games.7.count=1", "--set 'games.7.count=1': the recipe has 1 game group(s)"),
    ("games.colour=1", "--set 'games.colour=1': unknown key 'games.colour'"),
    ("games.env.A.B=1", "--set 'games.env.A.B=1': games.env.A is a value, not a section"),
    ("nosuch.key=1", "--set 'nosuch.key=1': unknown key 'nosuch.key'"),
    ("supervisor=3", "--set 'supervisor=3': supervisor is a section: set supervisor.KEY"),
    ("supervisor.nosuch=3", "--set 'supervisor.nosuch=3': unknown key 'supervisor.nosuch' (known in supervisor:"),
    ("stop.seconds.x=1", "--set 'stop.seconds.x=1': stop.seconds is a value, not a section"),
    ("name.x=1", "--set 'name.x=1': name is a value, not a section"),
    ("=3", "--set '=3': the key '' has an empty part"),
    ("a..b=1", "--set 'a..b=1': the key 'a..b' has an empty part"),
    ("stop.=1", "--set 'stop.=1': the key 'stop.' has an empty part"),
    ("stop.seconds", "--set 'stop.seconds': expected section.key=value"),
])
def test_malformed_set_paths(text, expected):
    p = _problems([text])
    assert len(p) == 1 and p[0].startswith(expected), p


def test_every_bad_set_is_reported_at_once_and_good_ones_apply():
    p = _problems(["games.count.x=1", "stop.seconds=5", "games=5", "supervisor.backoff_s=nan", "nosuch.key=1"])
    assert [x.split(":")[0] for x in p] == ["--set 'games.count.x=1'", "--set 'games=5'", "--set 'nosuch.key=1'",
                                            "supervisor.backoff_s = nan"]
    r = load_recipe(NULL, ["games.0.env.W3N_X=7", "games.count=3", "games.env.W3N_Y=a=b"])
    assert r.games[0].count == 3 and r.games[0].env["W3N_X"] == "7" and r.games[0].env["W3N_Y"] == "a=b"


def test_set_reaches_every_key_of_nested_sections():
    r = load_recipe(NULL, ["games.inject.step_ms=20", "games.0.inject.draw=false",
                           "games.inject.addresses.HP='exe+0x10'", 'games.inject.draw_calls=["A", "B"]',
                           "games.inject.args=['-seed', '{seed}']"])
    inj = r.games[0].inject
    assert (inj.step_ms, inj.draw, inj.addresses, inj.draw_calls, inj.args) == \
        (20, False, {"HP": "exe+0x10"}, ["A", "B"], ["-seed", "{seed}"])
    p = _problems(["games.inject.nope=1", "games.0.inject.addresses.A.B=1", "games.inject.step_ms.x=1",
                   "games.inject.step_ms=0"])
    from dataclasses import fields

    from w3async.recipes.sections import InjectSection

    known = ", ".join(sorted(f.name for f in fields(InjectSection)))
    assert p[:3] == [f"--set 'games.inject.nope=1': unknown key 'games.inject.nope' (known in games.inject: {known})",
                     "--set 'games.0.inject.addresses.A.B=1': games.0.inject.addresses.A is a value, not a section",
                     "--set 'games.inject.step_ms.x=1': games.inject.step_ms is a value, not a section"]
    assert p[3].startswith("games[0].inject.step_ms = 0: must be in 1..") and len(p) == 4, p


def test_env_names_and_values(tmp_path):
    rec = tmp_path / "env.toml"
    rec.write_text('[[games]]\nenv = { "A=B" = "1", "" = "x", "N\\u0000M" = "y", K = "a\\u0000b", '
                   'L = [1, 2], T = { x = 1 }, F = nan, OK = 3 }\n')
    p = _problems([], str(rec))
    assert p == [
        "games[0].env key 'A=B' (= '1'): an environment name must be non-empty, without '=' or NUL",
        "games[0].env key '' (= 'x'): an environment name must be non-empty, without '=' or NUL",
        "games[0].env key 'N\\x00M' (= 'y'): an environment name must be non-empty, without '=' or NUL",
        "games[0].env.K = 'a\\x00b': contains a NUL character",
        "games[0].env.L = [1, 2]: must be a string or a number, not list",
        "games[0].env.T = {'x': 1}: must be a string or a number, not dict",
        "games[0].env.F = nan: must be a finite number (or a string)",
    ]
    p = _problems(["games.env.X=a\0b", "games.env=5"])
    assert p == ["games[0].env = 5: expected dict, got int"]  # env=5 replaced the table the first set made
    p = _problems(["games.env.X=a\0b"])
    assert p == ["games[0].env.X = 'a\\x00b': contains a NUL character"]


def test_strings_names_seeds_and_device_syntax():
    p = _problems(["games.binary=a\0b", "name=../up", "inference.seed=-1", "inference.device=tpu",
                   "inference.device=cuda:x"])
    assert sorted(p) == sorted([
        "games[0].binary = 'a\\x00b': contains a NUL character",
        "name = '../up': must be a plain name (it starts the run folder's name): not empty, no '/', "
        "no newline or other control character",
        "inference.seed = -1: must be >= 0",
        "inference.device = 'cuda:x': must be 'cpu', 'cuda' or 'cuda:N'"])
    # the last --set wins: one device problem
    for ok in ("cpu", "cuda", "cuda:1"):
        assert load_recipe(NULL, [f"inference.device={ok}"]).inference.device == ok


def test_recipe_files_that_cannot_be_read(tmp_path):
    assert _problems([], str(tmp_path)) == ["is a folder, not a recipe file"]
    assert _problems([], str(tmp_path / "nope.toml")) == ["no such file"]
    bad = tmp_path / "latin1.toml"
    bad.write_bytes(b'name = "caf\xe9"\n')
    assert _problems([], str(bad)) == ["not UTF-8 text: byte 0xe9 at offset 11"]
    junk = tmp_path / "junk.toml"
    junk.write_text("this is [not toml\n")
    (p,) = _problems([], str(junk))
    assert p.startswith("not valid TOML: ")


@pytest.mark.parametrize("value,why", [
    ('"/"', "the file system's root or a system folder"),
    ('"/usr/"', "the file system's root or a system folder"),
    ('"{run_dir}/.."', "'..' leaves the run folder"),
    ('"{run_dir}"', "must name a folder inside the run folder"),
    ('"rel/replays"', "must be an absolute path or start with {run_dir}/"),
    ('"/srv/a/../b"', "must not contain '..'"),
])
def test_a_writable_folder_that_would_open_the_sandbox_is_refused(value, why):
    """A game may write only folders of its own: never /, a system folder, the run folder
    (its checkpoints) or a path that leaves it; a relative folder, which the sandbox cannot
    bind, is refused at load instead of failing the slot inside bwrap."""
    (p,) = _problems([f"games.writable=[{value}]"])
    assert p.startswith("games[0].writable[0] = ") and why in p, p


def test_an_env_value_that_leaves_the_run_folder_is_refused():
    (p,) = _problems(['games.env.W3D_RECORD_DIR="{run_dir}/../../.."'])
    assert p.startswith("games[0].env.W3D_RECORD_DIR = ") and "'..' leaves the run folder" in p, p
    assert load_recipe(NULL, ['games.env.W3D_RECORD_DIR="{run_dir}/replays"']).games[0].env


def test_deeply_nested_toml_is_a_problem_not_a_traceback(tmp_path):
    deep = tmp_path / "deep.toml"
    deep.write_text('name = "x"\nv = ' + "[" * 3000 + "]" * 3000 + "\n")
    assert _problems([], str(deep)) == ["nests arrays or tables too deeply to be a recipe (hundreds of levels)"]
    (p,) = _problems(["stop.seconds=" + "[" * 3000 + "]" * 3000])
    assert "nests arrays or tables too deeply" in p, p


@pytest.mark.parametrize("name", ["", "a\nb", "tab\there", "."])
def test_a_run_name_that_is_no_plain_name_is_refused_before_anything_is_made(tmp_path, name):
    r = subprocess.run([sys.executable, "-m", "w3async", "run", NULL, "--run", name, "--runs-dir", str(tmp_path / "runs")],
                       capture_output=True, text=True, cwd=REPO, timeout=120)
    assert r.returncode == 2 and "the run folder needs a name" in r.stderr, r.stderr
    assert not (tmp_path / "runs").exists()


# ---- against the machine (preflight.py) --------------------------------------------------


def test_binaries_missing_folder_not_executable_not_a_program(tmp_path):
    (tmp_path / "dir").mkdir()
    noexec = tmp_path / "noexec"
    noexec.write_bytes(b"\x7fELF....")
    noexec.chmod(0o644)
    text = tmp_path / "text"
    text.write_text("just words\n")
    text.chmod(0o755)
    script = tmp_path / "script"
    script.write_text("#!/bin/sh\nexit 0\n")
    script.chmod(0o755)
    notexe = tmp_path / "game.exe"
    notexe.write_text("not a PE file\n")
    groups = ",\n".join(f'{{ binary = "{b}", runtime = "{rt}" }}' for b, rt in [
        (tmp_path / "missing", "native"), (tmp_path / "dir", "native"), (noexec, "native"), (text, "native"),
        (script, "native"), (notexe, "wine"), (script, "wine")])
    rec = tmp_path / "r.toml"
    rec.write_text(f"games = [\n{groups}\n]\n")
    p = preflight.check_binaries(load_recipe(rec))
    assert p == [
        f"games[0].binary = '{tmp_path}/missing': {tmp_path}/missing does not exist (run `make build`, or fix the path)",
        f"games[1].binary = '{tmp_path}/dir': {tmp_path}/dir is a folder, not a game binary",
        f"games[2].binary = '{noexec}': {noexec} is not executable (chmod +x)",
        f"games[3].binary = '{text}': {text} is not a Linux executable (no ELF header, no #! line)",
        f"games[5].binary = '{notexe}': {notexe} is not a Windows executable (no MZ header)",
        f"games[6].binary = '{script}': {script} is not a Windows .exe (runtime = \"wine\")",
    ]


def test_device_the_machine_lacks():
    import torch

    n = torch.cuda.device_count() if torch.cuda.is_available() else 0
    dev = f"cuda:{n}"  # one past the last device: absent on every machine
    (p,) = preflight.check_device(load_recipe(NULL, [f"inference.device={dev}"]))
    assert p.startswith(f"inference.device = '{dev}': ")
    assert ("sees no CUDA device" in p) if n == 0 else (f"has {n} CUDA device(s)" in p)
    assert preflight.check_device(load_recipe(NULL)) == []


def test_folders_unwritable_a_file_in_the_way_and_a_read_only_run_folder(tmp_path):
    r = load_recipe(NULL)
    # /sys refuses writes even to root (permissions do not: root bypasses them).
    assert preflight.check_folders(r, Path("/sys/w3async-runs/x"), Path("/sys/w3async-runs")) == [
        "--runs-dir '/sys/w3async-runs': cannot write in /sys (Permission denied)"]
    f = tmp_path / "afile"
    f.write_text("")
    assert preflight.check_folders(r, f / "runs" / "x", f / "runs") == [
        f"--runs-dir '{f}/runs': {f} is a file, not a folder"]
    runs = tmp_path / "runs"
    runs.mkdir()
    (runs / "ro").symlink_to("/sys/kernel")  # an existing run folder that cannot be written
    assert preflight.check_folders(r, runs / "ro", runs) == [
        f"run folder '{runs}/ro': cannot write in {runs}/ro (Permission denied)"]
    (runs / "file").write_text("")
    assert preflight.check_folders(r, runs / "file", runs) == [f"run folder '{runs}/file': {runs}/file is a file, not a folder"]
    # a good one: nothing reported, nothing left behind by the probe
    assert preflight.check_folders(r, runs / "new", runs) == []
    assert sorted(os.listdir(runs)) == ["file", "ro"]
    r = load_recipe(NULL, ["runtime.cache_dir=/sys/w3async-cache"])
    assert preflight.check_folders(r, runs / "new", runs) == [
        "runtime.cache_dir = '/sys/w3async-cache': /sys/w3async-cache/wine: cannot write in /sys (Permission denied)"]


def test_table_beyond_dev_shm_and_games_beyond_the_machine():
    vfs = os.statvfs("/dev/shm")
    free = vfs.f_bavail * vfs.f_frsize
    lanes = free // (2 * layout.ROW_SIZE) + 1  # one game of two sides: just over the free space
    r = load_recipe(NULL, ["games.count=1", f"games.lanes={lanes}"])
    p = preflight.check_resources(r)
    assert any(x.startswith("games: the table needs ") and f"{2 * lanes:,} rows of {layout.ROW_SIZE:,} bytes" in x
               and f"games[0]: count = 1, lanes = {lanes}, sides = 2" in x and "/dev/shm has" in x for x in p), p
    limit, why = preflight.game_limit()
    r = load_recipe(NULL, [f"games.count={limit + 1}", "games.lanes=1", "games.sides=1"])
    p = preflight.check_resources(r)
    assert [x for x in p if "game processes" in x] == [
        f"games: {limit + 1:,} game processes (games[0].count = {limit + 1}) are more than this machine takes: "
        f"{limit:,} ({why}); lower games.count, or raise games.lanes instead"]
    assert preflight.check_resources(load_recipe(NULL)) == []


def test_a_good_recipe_passes_every_machine_check(tmp_path, null_native):
    r = load_recipe(NULL)
    assert preflight.check_binaries(r) + preflight.check_device(r) + preflight.check_resources(r) == []
    assert preflight.check_folders(r, tmp_path / "runs" / "x", tmp_path / "runs") == []
    assert os.listdir(tmp_path) == []


# ---- the command line: exit 2, one message, no traceback, nothing created ----------------


def _cli_bad(tmp_path: Path, args: list[str], runs: Path | None = None) -> str:
    runs = runs or tmp_path / "runs"
    before = set(os.listdir(runs)) if runs.exists() else None
    segs = set(list_segments(SHM_PREFIX))
    r = subprocess.run([sys.executable, "-m", "w3async", "run", *args, "--runs-dir", str(runs)],
                       capture_output=True, text=True, cwd=REPO, timeout=120)
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert "Traceback" not in r.stderr, r.stderr
    assert r.stderr.count("w3async: error:") == 1, r.stderr
    assert (set(os.listdir(runs)) if runs.exists() else None) == before, "a run folder was created"
    assert set(list_segments(SHM_PREFIX)) == segs, "a shared-memory segment was created"
    return r.stderr


@pytest.mark.parametrize("sets,needles", [
    (["stop.seconds=nan", "supervisor.hang_timeout_s=inf", "supervisor.round_period_ms=-inf",
      "supervisor.backoff_s=nan"],
     ["stop.seconds = nan: must be a finite number", "supervisor.hang_timeout_s = inf: must be a finite number",
      "supervisor.round_period_ms = -inf: must be a finite number", "supervisor.backoff_s = nan: must be a finite"]),
    ([f"games.lanes={2**31}"], [f"lanes = {2**31}", f"the table holds at most {MAX_ROWS}"]),
    (["games.lanes=10000000"], ["games: the table needs", "/dev/shm has", "lanes = 10000000"]),
    (["games.count=1000000", "games.lanes=1"], ["games: 1,000,000 game processes (games[0].count = 1000000)",
                                                 "are more than this machine takes"]),
    (["games.count.x=1", "games.0=1", "games=5", "nosuch.key=1", "=3", "a..b=1", "noequals"],
     ["--set 'games.count.x=1'", "--set 'games.0=1'", "--set 'games=5'", "--set 'nosuch.key=1'", "--set '=3'",
      "--set 'a..b=1'", "--set 'noequals'"]),
    (["games.binary=."],  # from the recipe's folder, recipes/ (a --set value too)
     [f"games[0].binary = '{REPO}/recipes': {REPO}/recipes is a folder, not a game binary"]),
    (["inference.device=cuda:64"], ["inference.device = 'cuda:64': "]),
    (["runtime.cache_dir=/sys/w3async-cache"], ["runtime.cache_dir = '/sys/w3async-cache'", "cannot write in /sys"]),
])
def test_cli_bad_values_exit_2_with_one_message_and_nothing_created(tmp_path, sets, needles):
    args = ["null"]
    for s in sets:
        args += ["--set", s]
    err = _cli_bad(tmp_path, args)
    assert f"w3async: error: recipe {NULL}:" in err, err
    for n in needles:
        assert n in err, (n, err)


def test_cli_bad_files_and_folders_exit_2_with_nothing_created(tmp_path):
    err = _cli_bad(tmp_path, [str(tmp_path)])
    assert f"recipe {tmp_path}:\n  is a folder, not a recipe file" in err
    bad = tmp_path / "latin1.toml"
    bad.write_bytes(b'name = "caf\xe9"\n')
    assert f"recipe {bad}:\n  not UTF-8 text: byte 0xe9 at offset 11" in _cli_bad(tmp_path, [str(bad)])
    junk = tmp_path / "junk.toml"
    junk.write_text("[not toml\n")
    assert f"recipe {junk}:\n  not valid TOML: " in _cli_bad(tmp_path, [str(junk)])
    assert "no such file" in _cli_bad(tmp_path, [str(tmp_path / "nope.toml")])
    err = _cli_bad(tmp_path, ["null"], runs=Path("/sys/w3async-runs"))
    assert "--runs-dir '/sys/w3async-runs': cannot write in /sys (Permission denied)" in err
    f = tmp_path / "afile"
    f.write_text("")
    assert f"--runs-dir '{f}/runs': {f} is a file, not a folder" in _cli_bad(tmp_path, ["null"], runs=f / "runs")
    runs = tmp_path / "runs"
    runs.mkdir()
    (runs / "ro").symlink_to("/sys/kernel")
    err = _cli_bad(tmp_path, ["null", "--run", "ro"], runs=runs)
    assert f"run folder '{runs}/ro': cannot write in {runs}/ro (Permission denied)" in err
    assert "the run folder needs a name (not '', '.' or '..')" in _cli_bad(tmp_path, ["null", "--run", ".."], runs=runs)


def test_cli_resumed_run_folder_with_a_folder_where_a_log_goes(tmp_path):
    runs = tmp_path / "runs"
    (runs / "r1" / "events.jsonl").mkdir(parents=True)
    (runs / "r1" / "games").write_text("")
    err = _cli_bad(tmp_path, ["null", "--run", "r1"], runs=runs)
    assert f"run folder '{runs}/r1': {runs}/r1/events.jsonl is a folder, where the run keeps a file" in err
    assert f"run folder '{runs}/r1': {runs}/r1/games is a file, where the run keeps a folder" in err
    assert sorted(os.listdir(runs / "r1")) == ["events.jsonl", "games"]  # no run.lock, no recipe.json


def test_cli_a_run_folder_is_resumed_only_by_a_recipe_of_its_game(tmp_path):
    """A resume appends to the run's logs and replaces its recipe.json: a recipe of another
    game (a --run typed wrong), or one that does not train for a training run's folder, is
    refused, both recipes named, and the folder is left byte for byte."""
    runs = tmp_path / "runs"
    r = subprocess.run([sys.executable, "-m", "w3async", "run", "null", "--run", "r1", "--runs-dir", str(runs),
                        "--set", "stop.seconds=1"], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert r.returncode == 0, r.stderr
    run = runs / "r1"

    def files() -> dict:
        return {p.relative_to(run): p.read_bytes() for p in run.rglob("*") if p.is_file()}

    before = files()
    err = _cli_bad(tmp_path, ["duelai", "--run", "r1"], runs=runs)
    assert (f"run folder '{run}' holds a run of game 'null', made by recipe 'null' (its recipe.json); "
            f"recipe 'duelai' runs game 'duel'") in err, err
    assert files() == before
    (run / "checkpoints").mkdir(exist_ok=True)
    (run / "checkpoints" / "ckpt-00000001.pt").write_bytes(b"")  # what a training run leaves
    before = files()
    err = _cli_bad(tmp_path, ["null", "--run", "r1"], runs=runs)
    assert f"run folder '{run}' holds a training run's checkpoints, made by recipe 'null'" in err, err
    assert "recipe 'null' answers with policy 'check', not a network that trains" in err, err
    assert files() == before


@pytest.mark.parametrize("name", ["../outside", "{tmp}/outside", "sub/r1"])
def test_cli_a_run_name_that_leaves_the_runs_folder(tmp_path, name):
    """--run is one folder name under --runs-dir: `../x` or an absolute path would make (or
    resume, writing its files into) a folder elsewhere, here an existing one of the user's."""
    runs = tmp_path / "runs"
    runs.mkdir()
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "notes.txt").write_text("mine")
    name = name.format(tmp=tmp_path)
    err = _cli_bad(tmp_path, ["null", "--run", name], runs=runs)
    assert f"--run {name!r}, --runs-dir '{runs}': the run folder needs a name" in err and "no '/'" in err, err
    assert os.listdir(tmp_path / "outside") == ["notes.txt"] and os.listdir(runs) == []


def test_status_address_that_cannot_be_served():
    import socket

    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen(1)
        port = held.getsockname()[1]
        (p,) = preflight.check_status(load_recipe(NULL, [f"status.port={port}"]))
        assert p.startswith(f"status.host = '127.0.0.1', status.port = {port}: port {port} on 127.0.0.1 is in use")
    (p,) = preflight.check_status(load_recipe(NULL, ["status.host=192.0.2.1"]))  # TEST-NET: no machine has it
    assert p.startswith("status.host = '192.0.2.1', status.port = 0: bind(192.0.2.1, 0) failed: ")
    assert preflight.check_status(load_recipe(NULL)) == []
    assert preflight.check_status(load_recipe(NULL, ["status.host=192.0.2.1", "status.enabled=false"])) == []


def test_too_little_free_space_for_a_run(tmp_path, monkeypatch):
    vfs = os.statvfs(tmp_path)
    free = vfs.f_bavail * vfs.f_frsize
    monkeypatch.setattr(preflight, "MIN_FREE_BYTES", free + (1 << 40))  # more than this disk has
    why = preflight.probe_folder(tmp_path / "run")
    assert why.startswith("only ") and f" free in {tmp_path}; a run needs at least " in why
    assert os.listdir(tmp_path) == []


def test_a_network_beyond_the_memory_is_refused_before_anything_is_made():
    avail = preflight._mem_available()
    d = 64
    while preflight.network_params(load_recipe(NULL, [f"network.d_model={d}"])) * 4 * 7 <= avail:
        d *= 2
    r = load_recipe(NULL, ["supervisor.policy=network", f"network.d_model={d}"])
    (p,) = preflight.check_resources(r)
    assert p.startswith("games: the run needs ") and f"network.d_model = {d}" in p and "is available" in p
    assert preflight.check_resources(load_recipe(NULL, [f"network.d_model={d}"])) == []  # no network answers


@pytest.mark.parametrize("variant", ["fgself-cluster", "fgself-injected"])
def test_the_main_jobs_variants_train_what_it_trains(variant):
    """fgself-cluster (its games on game hosts) and fgself-injected (every game injected,
    one a process) are the main job moved: the same learning sections, and the same
    lanes against each opponent, scored alike, with the same evaluation seeds."""
    repo = Path(__file__).resolve().parents[2]
    main, other = load_recipe(repo / "recipes/fgself.toml"), load_recipe(repo / f"recipes/{variant}.toml")
    for section in ("network", "learner", "trajectories", "league", "inference", "evaluation", "checkpoint", "stop"):
        assert getattr(other, section) == getattr(main, section), section

    def lanes(r) -> dict:
        out: dict = {}
        for g in r.games:
            key = (g.role, g.sides) + tuple(g.env.get(k) for k in ("W3D_SIDES", "W3D_REWARD", "W3D_DRAW_REWARD",
                                                                    "W3D_SEED", "W3D_TIME_LIMIT"))
            out[key] = out.get(key, 0) + g.count * g.lanes
        return out

    assert lanes(other) == lanes(main)


@pytest.mark.parametrize("path", sorted((Path(__file__).resolve().parents[2] / "recipes").glob("*.toml")),
                         ids=lambda p: p.stem)
def test_every_shipped_recipe_loads(path):
    """Each recipe in recipes/ loads and passes every check that needs no machine (its
    spec file, relative to the recipe, included): a recipe the README or a doc names
    cannot be broken by a change to the checks."""
    recipe = load_recipe(path)
    assert recipe.name == path.stem and recipe.games


def test_relative_paths_are_from_the_recipe_files_folder(tmp_path):
    """A recipe file's relative paths (binary, the inject paths, cache_dir; a --set value
    too) are from its folder, whatever the working folder, and held absolute (a run's
    recipe.json then means the same files); a recipe given as a table keeps them, from
    the repository root."""
    folder = tmp_path / "my game"
    folder.mkdir()
    (folder / "r.toml").write_text(
        'name = "r"\n[runtime]\ncache_dir = "cache"\n[[games]]\nbinary = "bin/game.exe"\nruntime = "wine"\n'
        '[games.inject]\nadapter = "../adapters/a.dll"\naddresses_file = "a.toml"\ncwd = "."\n'
        '[[games]]\nbinary = "/opt/abs/game"\n')
    r = load_recipe(folder / "r.toml", ["games.1.env.X=bin/not-a-path"])
    g, h = r.games
    assert g.binary == str(folder / "bin/game.exe") and r.binary_path(g) == folder / "bin/game.exe"
    assert g.inject.adapter == str(tmp_path / "adapters/a.dll") and g.inject.addresses_file == str(folder / "a.toml")
    assert g.inject.cwd == str(folder) and r.runtime.cache_dir == str(folder / "cache")
    assert h.binary == "/opt/abs/game" and h.env == {"X": "bin/not-a-path"}  # env values are the game's business
    assert load_recipe(folder / "r.toml", ["games.1.binary=other"]).games[1].binary == str(folder / "other")
    table = recipe_from_dict({"name": "t", "games": [{"binary": "build/native/null_game"}]})
    assert table.games[0].binary == "build/native/null_game"
    assert table.binary_path(table.games[0]) == REPO / "build/native/null_game"
