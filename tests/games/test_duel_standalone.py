"""The real-time standalone duel (duel_rt.exe) and its adapter (duel_adapter.dll).

The standalone must be a game that knows nothing of w3async: no import outside Windows'
own DLLs, no string of the harness in it. It plays in real time under Wine, says which
argument is bad, and its AI games end as the linked duel's do. The adapter exports
the w3h.h functions. duel_adapter_check.exe runs the standalone's own source on a
virtual clock whose Sleep does what the hook does at its step point (the adapter,
compiled in) beside the linked duel's agent mode, and compares every row: the
injected game's steps equal the linked duel's, and so do the replays, which the
linked duel plays back (w3async.replay_parity). The end-to-end run through
w3inject.exe and w3hook.dll is tests/shim/test_injection.py's."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import need

REPO = Path(__file__).resolve().parents[2]
WIN = REPO / "build" / "win64"
RT = WIN / "duel_rt.exe"
ADAPTER = WIN / "duel_adapter.dll"
CHECK = WIN / "duel_adapter_check.exe"
LINKED_EXE = WIN / "duel.exe"
DUEL = REPO / "build" / "native" / "duel"

# Windows' own DLLs: what any console program with GDI drawing may import.
SYSTEM_DLLS = {"kernel32.dll", "user32.dll", "gdi32.dll", "msvcrt.dll", "ucrtbase.dll", "ntdll.dll",
               "advapi32.dll", "winmm.dll"}
HARNESS_WORDS = ("w3s_", "w3async", "doorbell", "fifo", "obs_seq", "act_seq")


@pytest.fixture(scope="module")
def objdump(mingw) -> str:
    tool = shutil.which("x86_64-w64-mingw32-objdump")
    need("x86_64-w64-mingw32-objdump", tool is not None, "apt-get install binutils-mingw-w64-x86-64")
    return tool


@pytest.fixture(scope="module")
def built(mingw) -> Path:
    subprocess.run(["make", "-s", "-C", "games/duel", f"BUILD={REPO / 'build'}"], cwd=REPO, check=True)
    subprocess.run(["make", "-s", "-C", "games/duel", "native", f"BUILD={REPO / 'build'}"], cwd=REPO, check=True)
    return WIN


@pytest.fixture(scope="module")
def prefix(wine, built):
    from w3async.runtime.wine import WineConfig, acquire_running_prefix

    with acquire_running_prefix(WineConfig()) as p:
        yield p


def run_win(prefix, exe: Path, args: list[str], cwd: Path, env: dict | None = None,
            timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(prefix.command(str(exe), args), env=prefix.env(env), cwd=cwd, capture_output=True,
                          text=True, timeout=timeout)


def pe_imports_exports(objdump: str, path: Path) -> tuple[set[str], set[str]]:
    """The DLLs a PE file imports and the names it exports (objdump -p)."""
    out = subprocess.run([objdump, "-p", str(path)], capture_output=True, text=True, check=True).stdout
    imports = {m.lower() for m in re.findall(r"DLL Name: (\S+)", out)}
    table = out.split("[Ordinal/Name Pointer] Table", 1)
    exports = set(re.findall(r"^\s*\[\s*\d+\] (\S+)$", table[1], re.M)) if len(table) > 1 else set()
    return imports, exports


def harness_strings(path: Path) -> list[str]:
    """Every harness word found in the file, as ASCII or UTF-16, any case."""
    data = path.read_bytes().lower()
    found = []
    for word in HARNESS_WORDS:
        for enc in ("ascii", "utf-16-le"):
            if word.encode(enc) in data:
                found.append(f"{word} ({enc})")
    return found


@pytest.mark.mingw
def test_the_standalone_has_no_harness_in_it(built, objdump):
    imports, exports = pe_imports_exports(objdump, RT)
    assert imports and imports <= SYSTEM_DLLS, f"duel_rt.exe imports {sorted(imports - SYSTEM_DLLS)}"
    assert exports == {"duel_state", "duel_order", "duel_rematch"}, exports
    assert harness_strings(RT) == []
    # the scan finds the harness where it is: the linked duel
    assert "w3s_ (ascii)" in harness_strings(LINKED_EXE)


@pytest.mark.mingw
def test_the_adapter_exports_the_w3h_functions(built, objdump):
    _, exports = pe_imports_exports(objdump, ADAPTER)
    assert {"w3a_attach", "w3a_observe", "w3a_act", "w3a_episode_end", "w3a_detach"} <= exports, exports


@pytest.mark.wine
def test_it_plays_in_real_time(prefix, tmp_path):
    """40 turns at 20 turns a second: at least 2 s, and about 2 s more than at 1,000 (the
    margin of 1 s leaves room for a slow Wine start)."""
    args = ["--sides", "ai:easy,ai:easy", "--turns", "40", "--quiet"]
    t0 = time.monotonic()
    out = run_win(prefix, RT, args, tmp_path)
    slow = time.monotonic() - t0
    assert out.returncode == 0, out.stderr
    assert out.stdout == ""
    t0 = time.monotonic()
    out = run_win(prefix, RT, [*args, "--speed", "1000", "--draw", "0"], tmp_path)
    fast = time.monotonic() - t0
    assert out.returncode == 0, out.stderr
    assert slow >= 2.0 and slow - fast >= 1.0, (slow, fast)


@pytest.mark.wine
def test_an_ai_game_ends_as_in_the_linked_duel(prefix, tmp_path):
    """ai:hard against ai:easy, seed 9, lane 0, episode 0: the same winner, and the
    standalone's turns fill the linked duel's steps."""
    out = run_win(prefix, RT, ["--sides", "ai:hard,ai:easy", "--seed", "9", "--map", "open", "--games", "1",
                               "--speed", "1000", "--draw", "0"], tmp_path)
    assert out.returncode == 0, out.stderr
    m = re.fullmatch(r"game 0: winner (\d), turns (\d+), map open, seed ([0-9a-f]{16})\n", out.stdout)
    assert m, out.stdout
    rec = subprocess.run([str(DUEL), "--record", str(tmp_path / "g.w3dr"), "--sides", "ai:hard,ai:easy",
                          "--seed", "9", "--map", "open"], capture_output=True, text=True, check=True).stdout
    steps, winner = re.search(r"(\d+) steps, winner (\d)", rec).groups()
    assert m.group(1) == winner
    assert (int(m.group(2)) + 19) // 20 == int(steps)


@pytest.mark.wine
@pytest.mark.parametrize("args, named", [
    (["--speed", "0"], "--speed 0"),
    (["--sides", "ai:easy"], "--sides ai:easy"),
    (["--sides", "agent,ai:easy"], "--sides agent,ai:easy"),
    (["--map", "moon"], "--map moon"),
    (["--seed", "x"], "--seed x"),
    (["--lane", "-1"], "--lane -1"),
    (["--step-turns", "0"], "--step-turns 0"),
    (["--draw", "2"], "--draw 2"),
    (["--games"], "--games needs a value"),
    (["--frobnicate"], "--frobnicate"),
])
def test_a_bad_argument_is_named(prefix, tmp_path, args, named):
    out = run_win(prefix, RT, args, tmp_path, timeout=60)
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and named in lines[0], out.stderr


CHECKS = {
    # name: (adapter env, check args: FREQ STEP_MS SEED, duel_rt args)
    "agent-vs-easy": ({"W3D_SIDES": "agent,ai:easy", "W3D_REWARD": "shaped"}, ["10000000", "1000", "5"],
                      ["--sides", "human,ai:easy", "--games", "2", "--seed", "9", "--lane", "3"]),
    # two agents, 30 turns a second (a turn is not a whole number of ticks), a time limit
    # in the middle of a step, the reference with every cut, the full state recorded
    "two-agents-fractional-turns": ({"W3D_SIDES": "agent,agent", "W3D_CUTS": "7", "W3D_RECORD_STATES": "1"},
                                    ["10000000", "500", "7"],
                                    ["--sides", "human,human", "--games", "2", "--seed", "4", "--speed", "30",
                                     "--step-turns", "15", "--time-limit", "1010", "--draw", "0"]),
    "hard-vs-agent-camps": ({"W3D_SIDES": "ai:hard,agent"}, ["3579545000", "1000", "8"],
                            ["--sides", "ai:hard,human", "--games", "1", "--seed", "5", "--map", "camps"]),
}


@pytest.mark.wine
@pytest.mark.parametrize("name", sorted(CHECKS))
def test_the_injected_steps_equal_the_linked_duels(prefix, tmp_path, name):
    env, clock, game = CHECKS[name]
    (tmp_path / "ref").mkdir()
    (tmp_path / "inj").mkdir()
    out = run_win(prefix, CHECK, ["ref", *clock, "--", *game], tmp_path, {**env, "W3D_RECORD_DIR": "inj"})
    assert out.returncode == 0, out.stderr
    assert "every row equal" in out.stdout
    inj = sorted(p.name for p in (tmp_path / "inj").glob("*.w3dr"))
    ref = sorted(p.name for p in (tmp_path / "ref").glob("*.w3dr"))
    games = int(game[game.index("--games") + 1])
    assert len(inj) == games and inj == ref
    for f in inj:
        assert (tmp_path / "inj" / f).read_bytes() == (tmp_path / "ref" / f).read_bytes(), f
    # the adapter's replays play back in the linked duel to the hashes they carry
    parity = subprocess.run([sys.executable, "-m", "w3async.replay_parity",
                             *(str(tmp_path / "inj" / f) for f in inj), "--runtime", "native"],
                            capture_output=True, text=True, timeout=300, cwd=REPO)
    assert parity.returncode == 0, parity.stdout + parity.stderr


@pytest.mark.wine
def test_the_check_finds_a_divergence(prefix, tmp_path):
    """The test-only cut changes the reference at step 5: the check names the field."""
    (tmp_path / "ref").mkdir()
    out = run_win(prefix, CHECK, ["ref", "10000000", "1000", "5", "--", "--sides", "human,ai:easy", "--games", "1",
                                  "--draw", "0"], tmp_path,
                  {"W3D_SIDES": "agent,ai:easy", "W3D_CUTS": "128", "W3D_BREAK_STEP": "5"})
    assert out.returncode == 1
    assert "step 6): state_hash differs" in out.stderr


@pytest.mark.wine
@pytest.mark.parametrize("env, clock, said", [
    ({"W3D_SIDES": "agent,ai:hard"}, "1000", "W3D_SIDES=agent,ai:hard but the game plays human,ai:easy"),
    ({"W3D_SIDES": "agent,ai:easy", "W3D_MAP": "camps"}, "1000", "W3D_MAP=camps"),
    ({"W3D_SIDES": "agent,ai:easy"}, "500", "a step of 500 ms is not 20 turns at 20 turns/s"),
])
def test_the_adapter_refuses_a_setup_that_disagrees(prefix, tmp_path, env, clock, said):
    out = run_win(prefix, CHECK, ["ref", "10000000", clock, "5", "--", "--sides", "human,ai:easy", "--games", "1"],
                  tmp_path, env)
    assert out.returncode == 70
    assert said in out.stderr
