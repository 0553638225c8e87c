"""Injection (shim/inject, docs/hooking.md): an unmodified Windows program, the probe
(tests/inject/probe_game.c: a 60-frames-a-second loop on QueryPerformanceCounter and
Sleep that knows nothing of w3async), started through the launcher with the hook and
an adapter under the supervisor: answered and checked, its own clock read in game
time, and every way injection or the adapter fails ends in one clear cause, a restart
or a failed slot, and nothing left behind."""

from __future__ import annotations

import re
import struct
import subprocess
from pathlib import Path

import pytest

from w3async.recipes import recipe_from_dict
from w3async.runtime.inject import HOOK, LAUNCHER

from tests.conftest import REPO
from tests.runtime.test_supervisor import assert_nothing_left, but_lost, events, lost_starts, null_recipe, run_recipe

pytestmark = pytest.mark.wine


@pytest.fixture(scope="session")
def probe(wine, mingw, tmp_path_factory) -> dict[str, Path]:
    """The probe game and its adapter, built for this session; the launcher and hook built by make."""
    if not (LAUNCHER.exists() and HOOK.exists()):
        subprocess.run(["make", "-s", "build"], cwd=REPO, check=True)
    out = tmp_path_factory.mktemp("probe")
    src = REPO / "tests" / "inject"
    game, adapter = out / "probe_game.exe", out / "probe_adapter.dll"
    subprocess.run([mingw, "-O2", "-Wall", "-o", str(game), str(src / "probe_game.c"), "-lgdi32"], check=True)
    subprocess.run([mingw, "-O2", "-Wall", "-shared", "-I", str(REPO / "shim"), "-I", str(REPO / "shim" / "inject"),
                    "-o", str(adapter), str(src / "probe_adapter.c")], check=True)
    return {"game": game, "adapter": adapter, "dir": out}


def probe_group(probe: dict, count: int = 1, args: list[str] | None = None, env: dict | None = None,
                adapter: Path | str | None = None, **inject) -> dict:
    return {"binary": str(probe["game"]), "runtime": "wine", "count": count, "lanes": 1, "sides": 1,
            "env": {"W3P_CHECK": "1", **(env or {})},
            "inject": {"adapter": str(adapter or probe["adapter"]), "args": args or [], "step_ms": 50,
                       "timeout_s": 10, **inject}}


def game_logs(run: Path) -> dict[int, str]:
    return {int(p.stem.split("-")[1]): p.read_text(errors="replace") for p in (run / "games").glob("slot-*.log")}


async def test_eight_injected_games_step_checked_and_leave_nothing(tmp_path, probe):
    """8 injected probes answered by the check policy for thousands of steps: every
    answer recomputed by the adapter, no bad row, no restart, nothing left."""
    data = null_recipe([probe_group(probe, count=8)], supervisor={"start_timeout_s": 120}, stop={"seconds": 15})
    sup, stats = await run_recipe(data, tmp_path / "run")
    run = tmp_path / "run"
    assert stats["restarts"] == {}, game_logs(run)
    assert not [e for e in events(run) if e["event"] in ("bad_row", "game_kill", "game_exit")]
    assert len(stats["games"]) == 8 and stats["bad_rows"] == 0
    assert stats["agent_steps"] >= 8 * 2000  # thousands of steps a game
    assert_nothing_left(sup, run)


@pytest.mark.parametrize("step_thread,step_point", [("main", "Sleep"), ("first", "Sleep"), ("main", "BitBlt"),
                                                    ("main", "export:probe_frame")])
async def test_the_games_clock_advances_exactly_step_ms_a_step(tmp_path, probe, step_thread, step_point):
    """The probe prints what QueryPerformanceCounter and GetTickCount told it at every
    pass of its loop (one pass a step: its Sleep(1), its BitBlt or its own exported
    probe_frame being the step point): exactly step_ms of game time a pass, however long
    the supervisor took to answer."""
    step_ms = 37
    data = null_recipe([probe_group(probe, args=["--print", "200"], step_ms=step_ms, step_thread=step_thread,
                                    step_point=step_point)],
                       supervisor={"start_timeout_s": 120, "round_period_ms": 5}, stop={"steps": 300})
    sup, _ = await run_recipe(data, tmp_path / "run")
    log = game_logs(tmp_path / "run")[0]
    freq = int(re.search(r"probe: frequency (\d+)", log).group(1))
    passes = [tuple(map(int, m)) for m in re.findall(r"pass (\d+) qpc (-?\d+) tick (\d+) frames (\d+) ", log)]
    assert len(passes) >= 150, log[-800:]
    # pass 0 reads the clock before the first step; every pass after reads one step later
    for k, qpc, tick, frames in passes[1:]:
        assert qpc == step_ms * freq // 1000, (k, qpc)
        assert tick == step_ms, (k, tick)
        assert frames == (k * step_ms) // (1000 // 60) or abs(frames - k * step_ms * 60 / 1000) <= 1, (k, frames)
    assert_nothing_left(sup, tmp_path / "run")


async def test_a_game_that_exits_by_itself_is_a_recycle_not_a_kill(tmp_path, probe):
    """The probe ends its loop after 150 passes and returns from main (exit 0 through
    ExitProcess): the hook marks it a clean exit, the launcher exits 0, the supervisor
    recycles the slot, uncounted."""
    data = null_recipe([probe_group(probe, args=["--passes", "150"])],
                       supervisor={"start_timeout_s": 60, "min_uptime_s": 0}, stop={"seconds": 10})
    sup, stats = await run_recipe(data, tmp_path / "run")
    causes = but_lost(stats["games"][0]["causes"], lost_starts(tmp_path / "run"))
    assert causes.get("recycle", 0) >= 2 and set(causes) == {"recycle"}, (causes, game_logs(tmp_path / "run")[0][-400:])
    assert_nothing_left(sup, tmp_path / "run")


async def test_background_threads_sleep_and_wait_in_game_time(tmp_path, probe):
    """Two threads of the probe sleep 5 ms at a time, two wait 5 ms at a time on an event
    nobody sets: parked on the clock while the game waits for its orders, each ends its
    waits 4 times a 20 ms step, as many as game time holds (each wait starts where the
    last one ended: before, once a step, game time jumping a step at a time), never in
    wall time, and the game neither deadlocks nor spins. The answers come at most every
    20 ms of wall time; the waits that fall inside a step past end at once, so parked, each
    thread still wakes about once a step (a wait that polled every 5 ms of wall time would
    wake 4 times)."""
    data = null_recipe([probe_group(probe, args=["--print", "150", "--threads", "2", "--waiters", "2"], step_ms=20)],
                       supervisor={"start_timeout_s": 120, "round_period_ms": 20}, stop={"steps": 200})
    sup, stats = await run_recipe(data, tmp_path / "run")
    log = game_logs(tmp_path / "run")[0]
    pattern = r"pass (\d+) qpc -?\d+ tick \d+ frames \d+ background (\d+) waited (\d+)"
    rows = [tuple(map(int, m)) for m in re.findall(pattern, log)]
    assert len(rows) >= 100 and stats["restarts"] == {}, log[-500:]
    (k0, bg0, w0), (k1, bg1, w1) = rows[5], rows[-1]
    # each of the two sleepers and the two waiters ends 4 waits a step (+-4 each for where
    # each was when a row printed)
    assert abs((bg1 - bg0) - 2 * 4 * (k1 - k0)) <= 8, (rows[5], rows[-1])
    assert abs((w1 - w0) - 2 * 4 * (k1 - k0)) <= 8, (rows[5], rows[-1])
    assert bg0 < 1000 and w0 < 1000, rows[:6]  # nothing spun at the start either
    # the hook's own count at the stop: the waiters woke about once a step each, parked
    m = re.search(r"w3hook: (\d+) steps; other threads' timed waits woke (\d+) times parked, (\d+) times polling", log)
    assert m, log[-400:]
    steps, wakes, polls = map(int, m.groups())
    assert polls == 0 and wakes <= 2 * 2 * steps + 10, m.group(0)  # polling every 5 ms would be ~4 a step each
    assert_nothing_left(sup, tmp_path / "run")


# ---- every way injection fails: one clear cause, a failed slot after backoff, nothing left ----

def _bad_dll(probe: dict, kind: str, mingw: str) -> Path:
    """An adapter that cannot be injected: kind names how."""
    out = probe["dir"] / f"bad-{kind}.dll"
    if kind == "not-pe":
        out.write_text("this is not a DLL\n")
    elif kind == "wrong-bitness":  # the probe adapter with its machine field saying i386
        data = bytearray(probe["adapter"].read_bytes())
        pe = struct.unpack_from("<I", data, 0x3C)[0]
        struct.pack_into("<H", data, pe + 4, 0x14C)
        out.write_bytes(bytes(data))
    elif kind == "no-observe":
        subprocess.run([mingw, "-O2", "-shared", "-DPROBE_NO_OBSERVE", "-I", str(REPO / "shim"),
                        "-I", str(REPO / "shim" / "inject"), "-o", str(out), str(REPO / "tests/inject/probe_adapter.c")],
                       check=True)
    elif kind == "missing":
        out = probe["dir"] / "no-such-adapter.dll"
    elif kind == "missing-dep":  # the probe adapter importing a DLL that is then deleted
        dep = probe["dir"] / "w3gone.dll"
        (probe["dir"] / "w3gone.c").write_text("__declspec(dllexport) int w3gone(void) { return 1; }\n")
        subprocess.run([mingw, "-shared", "-o", str(dep), str(probe["dir"] / "w3gone.c")], check=True)
        (probe["dir"] / "uses_gone.c").write_text('#include "probe_adapter.c"\nint w3gone(void);\n'
                                                  "int probe_uses_gone(void) { return w3gone(); }\n")
        subprocess.run([mingw, "-O2", "-shared", "-I", str(REPO / "shim"), "-I", str(REPO / "shim" / "inject"),
                        "-I", str(REPO / "tests" / "inject"), "-o", str(out), str(probe["dir"] / "uses_gone.c"),
                        str(dep)], check=True)
        dep.unlink()
    return out


async def _failing_run(tmp_path: Path, group: dict, seconds: float = 60, failures: int = 2) -> tuple[object, Path, str]:
    """Runs one group whose every start fails; returns (the supervisor, the run, the run's error)."""
    from w3async.runtime.runfolder import RunError
    from w3async.compose import supervisor

    data = null_recipe([group], supervisor={"start_timeout_s": 60, "max_start_failures": failures},
                       stop={"seconds": seconds})
    run = tmp_path / "run"
    sup = supervisor(recipe_from_dict(data), run)
    with pytest.raises(RunError) as e:
        await sup.run()
    return sup, run, str(e.value)


@pytest.mark.parametrize("kind,cause,says", [
    ("not-pe", "inject", "not a PE file (no MZ header)"),
    ("wrong-bitness", "inject", "i386 (32-bit) and the game is x86-64 (64-bit) (wrong bitness"),
    ("no-observe", "inject", "the adapter exports no w3a_observe"),
    ("missing-dep", "inject", "it imports w3gone.dll, which is not found"),
])
async def test_an_adapter_that_cannot_be_injected_fails_its_slot_with_the_cause(tmp_path, probe, mingw, kind, cause, says):
    bad = _bad_dll(probe, kind, mingw)
    sup, run, err = await _failing_run(tmp_path, probe_group(probe, adapter=bad))
    assert "every game slot failed" in err and says in err and bad.name in err, err
    exits = [e for e in events(run) if e["event"] == "game_exit"]
    assert len(exits) == 2 and all(e["cause"] == cause and e["returncode"] == 69 for e in exits), exits
    assert "Traceback" not in "".join(game_logs(run).values())
    assert_nothing_left(sup, run)


def test_a_recipe_whose_injection_cannot_work_is_refused_before_anything_starts(tmp_path, probe, mingw):
    """Preflight (before `python -m w3async run` makes anything): the adapter missing,
    not a PE file, 32-bit, a program; a native runtime; each named by its key."""
    from w3async.runtime.preflight import preflight

    cases = [
        (probe_group(probe, adapter=_bad_dll(probe, "missing", mingw)), "games[0].inject.adapter", "does not exist"),
        (probe_group(probe, adapter=_bad_dll(probe, "not-pe", mingw)), "games[0].inject.adapter", "is not a PE file"),
        (probe_group(probe, adapter=_bad_dll(probe, "wrong-bitness", mingw)), "games[0].inject.adapter",
         "is a DLL for i386 (32-bit); the game is x86-64 (64-bit) (wrong bitness)"),
        ({**probe_group(probe), "runtime": "native"}, "games[0].runtime = 'native'", "runs under Wine"),
        (probe_group(probe, adapter=probe["game"]), "games[0].inject.adapter", "is a program, not a DLL"),
    ]
    for k, (group, key, says) in enumerate(cases):
        problems = preflight(recipe_from_dict(null_recipe([group], stop={"seconds": 5})), tmp_path / f"run{k}")
        assert [p for p in problems if key in p and says in p], problems


def test_a_32_bit_game_needs_32_bit_wine_and_a_32_bit_adapter(tmp_path, probe):
    """The probe with its machine field saying i386 (nothing runs): preflight names what
    a 32-bit game needs here (docs/hooking.md, "32-bit games")."""
    from w3async.runtime.preflight import preflight
    from w3async.runtime.wineinstall import wine_install

    game = tmp_path / "probe32.exe"
    data = bytearray(probe["game"].read_bytes())
    struct.pack_into("<H", data, struct.unpack_from("<I", data, 0x3C)[0] + 4, 0x14C)
    game.write_bytes(bytes(data))
    group = {**probe_group(probe), "binary": str(game)}
    problems = preflight(recipe_from_dict(null_recipe([group], stop={"seconds": 5})), tmp_path / "run")
    assert [p for p in problems if "is a DLL for x86-64 (64-bit); the game is i386 (32-bit) (wrong bitness)" in p]
    if not wine_install("wine").runs(32):
        assert [p for p in problems if "is a 32-bit game and this Wine" in p and "apt-get install wine32" in p]


@pytest.mark.parametrize("env,inject,code,says", [
    ({"W3P_DLLMAIN": "hang"}, {"timeout_s": 2}, 69, "LoadLibrary did not return within 2000 ms (a hang in its DllMain"),
    ({"W3P_DLLMAIN": "false"}, {}, 69, "LoadLibrary failed in the game (its DllMain returned FALSE"),
    ({"W3P_FAULT": "attach-export"}, {}, 70, "could not attach: the game exports no probe_missing"),
    ({"W3P_FAULT": "attach-address"}, {"addresses": {"probe_missing": "nosuch.dll+0x10"}}, 70,
     "address probe_missing (W3H_ADDR_probe_missing) is not in the game"),
    ({}, {"step_point": "PeekMessageA"}, 69, "the step point PeekMessageA is not imported by the game's .exe"),
    ({}, {"step_point": "GetTickCount"}, 69, "W3H_STEP_POINT=GetTickCount: not a call the hook can make the step point"),
    ({}, {"step_point": "export:probe_nothing"}, 69, "the step point export:probe_nothing: the game's .exe exports no"),
    ({}, {"draw": False, "draw_calls": ["Polygon"]}, 69, "W3H_DRAW_CALLS names Polygon, which is not a draw call the hook knows"),
    ({}, {"draw": False, "draw_calls": ["TextOutA@7"]}, 69, "W3H_DRAW_CALLS names TextOutA@7: expected Name@ARGBYTES"),
    ({}, {"draw": False, "draw_calls": ["Sleep@4"]}, 69, "Sleep is a call the hook hooks itself; name it without @"),
])
async def test_injection_that_fails_in_the_game_fails_its_slot_with_the_cause(tmp_path, probe, env, inject, code, says):
    sup, run, err = await _failing_run(tmp_path, probe_group(probe, env=env, **inject))
    assert "every game slot failed" in err and says in err, err
    lost = lost_starts(run)  # the slot fails after two failed starts, a lost one included
    exits = [e for e in events(run) if e["event"] == "game_exit" and e not in lost]
    assert len(exits) + len(lost) == 2 and all(e["returncode"] == code for e in exits), exits
    assert {e["cause"] for e in exits} == {"inject" if code == 69 else "adapter"}
    assert_nothing_left(sup, run)


@pytest.mark.parametrize("fault,cause,says", [
    ("crash-act", "adapter", r"the adapter .*probe_adapter.dll crashed in w3a_act: access violation \(0xc0000005\) "
                             r"writing address 0x0 at probe_adapter.dll\+0x[0-9a-f]+"),
    ("crash-observe", "adapter", r"crashed in w3a_observe: access violation"),
    ("fail-act", "adapter", r"adapter failed: fault injected at step 3"),
    ("hang-act", "hang", None),
])
async def test_an_adapter_that_fails_mid_game_restarts_its_game(tmp_path, probe, fault, cause, says):
    """Faults after the first post: the game is restarted by cause, the run goes on."""
    data = null_recipe([probe_group(probe, env={"W3P_FAULT": fault})],
                       supervisor={"start_timeout_s": 60, "hang_timeout_s": 2.0}, stop={"seconds": 14})
    sup, stats = await run_recipe(data, tmp_path / "run")
    run = tmp_path / "run"
    assert stats["games"][0]["causes"].get(cause, 0) >= 2, (stats["games"][0], game_logs(run)[0][-600:])
    if says:
        assert re.search(says, game_logs(run)[0]), game_logs(run)[0][-800:]
        exits = [e for e in events(run) if e["event"] == "game_exit"]
        assert exits and re.search(says, exits[0]["stderr"]), exits[0]
    assert_nothing_left(sup, run)


async def test_a_crash_in_the_games_own_code_is_the_games_not_the_adapters(tmp_path, probe):
    """An access violation in the injected game's own code, after it has been stepping:
    the hook passes it on (it is not the adapter's), the shim's last chance names it, and
    the game restarts as a crash while the run goes on."""
    data = null_recipe([probe_group(probe, args=["--crash-at", "300"])],
                       supervisor={"start_timeout_s": 60}, stop={"seconds": 14})
    sup, stats = await run_recipe(data, tmp_path / "run")
    run = tmp_path / "run"
    exits = [e for e in events(run) if e["event"] == "game_exit"]
    assert stats["games"][0]["causes"].get("crash", 0) >= 2, (stats["games"][0], game_logs(run)[0][-600:])
    assert exits and all(e["cause"] == "crash" and e["posted"] for e in exits), exits
    assert all("the game crashed: access violation (0xc0000005)" in e["stderr"] for e in exits), exits[0]
    assert not [e for e in exits if re.search(r"the adapter .* crashed", e["stderr"])], exits[0]
    assert stats["agent_steps"] > 0
    assert_nothing_left(sup, run)




@pytest.mark.parametrize("where", ["main", "thread"])
async def test_a_message_box_ends_the_game_with_its_text_and_a_second_fails_the_slot(tmp_path, probe, where):
    """A message box before the first step (a game whose device could not be made), on
    the main thread or another: the hook ends the game at once, its caption and text on
    one line as the cause; one more start is made (one box may be a passing fault), and
    the second box in a row fails the slot with that text (before the hook: the box
    waited, invisible, until the step deadline said "step point not reached")."""
    args = ["--msgbox-at", "0", *(["--msgbox-thread"] if where == "thread" else [])]
    sup, run, err = await _failing_run(tmp_path, probe_group(probe, args=args, step_deadline_s=60), failures=5)
    exits = [e for e in events(run) if e["event"] == "game_exit"]
    assert len(exits) == 2 and all(e["cause"] == "message_box" and e["returncode"] == 74 for e in exits), exits
    said = "the game showed a message box, which would wait for a click nobody makes: \"Probe \u2013 error\": " \
           "\"Direct3D: the device could not be created. Check your display settings.\""
    assert all(said in e["stderr"] for e in exits) and said in err, (exits, err)
    assert "step point" not in err
    assert_nothing_left(sup, run)


async def test_a_message_box_on_a_later_start_of_a_slot_that_ran_is_restarted(tmp_path, probe):
    """A slot whose first start posted and recycled shows a box before the first post of
    its second start (a device that could not be made once, on a loaded machine): that
    start is restarted after the backoff like any start that ended before its first post,
    and the run goes on (before: the box failed the slot at once, ending a run whose game
    had shown it can start)."""
    group = probe_group(probe, args=["--passes", "40", "--msgbox-at", "0", "--msgbox-start", "1"],
                        env={"PROBE_STARTS": "{run_dir_windows}\\probe"})
    data = null_recipe([group], supervisor={"start_timeout_s": 60}, stop={"seconds": 10})
    run = tmp_path / "run"
    sup, stats = await run_recipe(data, run)
    lost = lost_starts(run)  # a start lost before its game ran: not this test's subject
    exits = [e for e in events(run) if e["event"] == "game_exit" and e not in lost]
    boxes = [e for e in exits if e["cause"] == "message_box"]
    assert len(boxes) == 1 and not boxes[0]["posted"] and "could not be created" in boxes[0]["stderr"], exits
    assert exits[0]["cause"] == "recycle" and exits[0]["posted"], exits[0]  # the first start ran
    after = exits[exits.index(boxes[0]) + 1:]
    assert after and all(e["cause"] == "recycle" and e["posted"] for e in after), after  # and so did the next ones
    assert stats["games"][0]["state"] != "failed" and stats["agent_steps"] > 0, stats["games"]
    assert_nothing_left(sup, run)


@pytest.mark.parametrize("bits", [64, 32])
async def test_a_crash_before_the_first_step_is_said_at_once_with_its_module(tmp_path, probe, bits, request):
    """The game's own access violation before its first step, 64- and 32-bit: the hook's
    last-chance filter says it at once with its thread and module+offset, exit 72, and
    Wine's debugger never starts (before: a 32-bit crash went to winedbg, was held ~10 s
    and was reported as "step point not reached")."""
    game = probe["game"]
    if bits == 32:
        cc = request.getfixturevalue("wine32") and request.getfixturevalue("mingw32")
        game = probe["dir"] / "probe_game32.exe"
        subprocess.run([cc, "-O2", "-Wall", "-o", str(game), str(REPO / "tests" / "inject" / "probe_game.c"), "-lgdi32"],
                       check=True)
    group = {**probe_group(probe, args=["--crash-at", "0"], step_deadline_s=60), "binary": str(game)}
    group["inject"] = {**group["inject"], "adapter": str(_probe_adapter(probe, bits, request))}
    sup, run, err = await _failing_run(tmp_path, group)
    exits = [e for e in events(run) if e["event"] == "game_exit"]
    assert exits and all(e["cause"] == "crash" and e["returncode"] == 72 for e in exits), exits
    assert re.search(r"the game crashed: access violation \(0xc0000005\) writing address 0x0 at "
                     rf"{game.name}\+0x[0-9a-f]+ \(thread \d+\)", exits[0]["stderr"]), exits[0]
    assert "debugger" not in (run / "games" / "slot-0.log").read_text(errors="replace")
    assert_nothing_left(sup, run)


def _probe_adapter(probe: dict, bits: int, request) -> Path:
    if bits == 64:
        return probe["adapter"]
    out = probe["dir"] / "probe_adapter32.dll"
    if not out.exists():
        subprocess.run([request.getfixturevalue("mingw32"), "-O2", "-Wall", "-shared", "-I", str(REPO / "shim"), "-I",
                        str(REPO / "shim" / "inject"), "-o", str(out), str(REPO / "tests/inject/probe_adapter.c")],
                       check=True)
    return out


async def test_an_address_from_the_recipe_reaches_the_adapter(tmp_path, probe):
    rva = _export_rva(probe["game"], "probe_state")
    data = null_recipe([probe_group(probe, addresses={"probe_state": f"exe+{hex(rva)}"})],
                       supervisor={"start_timeout_s": 60}, stop={"steps": 200})
    sup, stats = await run_recipe(data, tmp_path / "run")
    assert stats["restarts"] == {} and stats["agent_steps"] >= 200
    wrong = dict(probe_group(probe, addresses={"probe_state": f"exe+{hex(rva + 8)}"}))
    sup2, run2, err = await _failing_run(tmp_path / "wrong", wrong)
    assert "address probe_state resolves to" in err


def _export_rva(pe_path: Path, name: str) -> int:
    """The RVA of an export, read from the PE file's export directory."""
    b = pe_path.read_bytes()
    pe = struct.unpack_from("<I", b, 0x3C)[0]
    n_sec = struct.unpack_from("<H", b, pe + 6)[0]
    opt = pe + 24
    opt_size = struct.unpack_from("<H", b, pe + 20)[0]
    exp_rva = struct.unpack_from("<I", b, opt + 112)[0]  # PE32+: data directory 0
    secs = [struct.unpack_from("<IIII", b, opt + opt_size + 40 * i + 8) for i in range(n_sec)]

    def off(rva: int) -> int:
        for vsize, va, rawsize, raw in secs:
            if va <= rva < va + max(vsize, rawsize):
                return raw + rva - va
        raise ValueError(rva)

    e = off(exp_rva)
    n_names, funcs, names, ords = struct.unpack_from("<IIII", b, e + 24)
    for i in range(n_names):
        s = off(struct.unpack_from("<I", b, off(names) + 4 * i)[0])
        if b[s:b.index(b"\0", s)].decode() == name:
            return struct.unpack_from("<I", b, off(funcs) + 4 * struct.unpack_from("<H", b, off(ords) + 2 * i)[0])[0]
    return 0


def _processes_of_run(table_name: str, exe: str) -> list[int]:
    """Live processes of this run (their environment names its table: the launcher and the
    game carry the same environment, Windows hands it down) whose argv[0] ends with exe."""
    from w3async.runtime.procs import mentioning

    out = []
    for pid in mentioning(table_name.lstrip("/").encode()):
        try:  # argv[0]: the launcher's arguments name the game too
            if Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode(errors="replace").endswith(exe):
                out.append(pid)
        except OSError:
            pass
    return out


def _describe(pid: int) -> str:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        return f"state {stat[0]} ppid {stat[1]} pgid {stat[2]}: {cmd[:120]}"
    except OSError:
        return "gone"


async def test_every_wine_process_of_a_run_has_a_fixed_layout_and_no_capability(tmp_path, probe):
    """The launcher, the game, its desktop and the prefix's own processes (wineserver,
    services.exe, ...) all run with address randomization off (personality
    ADDR_NO_RANDOMIZE, from `setarch -R` before the loader): with it on, Debian's Wine 8
    put a process's heap on the page it maps at 0x7ffe0000 in about one start of 3,000
    (measured: docs/faults.md), and that process exited 1 before its first instruction."""
    import asyncio
    import os

    from w3async.compose import supervisor
    from w3async.runtime.wineprefix import fixed_layout

    assert fixed_layout(), "this machine refuses personality(ADDR_NO_RANDOMIZE) (setarch -R true failed)"
    data = null_recipe([probe_group(probe)], supervisor={"start_timeout_s": 60}, stop={"seconds": 20})
    sup = supervisor(recipe_from_dict(data), tmp_path / "run")
    task = asyncio.ensure_future(sup.run())
    try:
        for _ in range(300):  # until the game has stepped
            await asyncio.sleep(0.1)
            ours = [p for exe in ("probe_game.exe", "w3inject.exe", "explorer.exe")
                    for p in _processes_of_run(sup.table.name, exe)]
            if len(ours) >= 2 and sup.counters.agent_steps > 100:
                break
        prefix = next(rt.prefix for rt in sup.runtimes.values() if getattr(rt, "prefix", None))
        wine = {p: _describe(p) for p in ours + prefix.processes()}
        layouts = {}
        for p in wine:
            try:  # the programs Wine's loader runs (the wineserver is a Linux program)
                if Path(os.readlink(f"/proc/{p}/exe")).name in ("wine", "wine64", "wine-preloader", "wine64-preloader"):
                    layouts[p] = int(Path(f"/proc/{p}/personality").read_text(), 16)
            except OSError:
                pass  # gone meanwhile
        assert len(ours) >= 2 and len(layouts) >= 4, wine
        assert all(v & 0x0040000 for v in layouts.values()), {wine[p]: hex(v) for p, v in layouts.items()}
        # and the game's processes have no capability, nor (as root, where setpriv emptied
        # it: wineprefix.joined_command) a bounding set an exec could take one from
        for p in ours:
            caps = dict(line.split(":\t") for line in Path(f"/proc/{p}/status").read_text().splitlines()
                        if line.startswith("Cap"))
            assert int(caps["CapEff"], 16) == 0 and (os.geteuid() != 0 or int(caps["CapBnd"], 16) == 0), (wine[p], caps)
    finally:
        sup.request_stop()
        await task


@pytest.mark.parametrize("victim", ["launcher", "game"])
async def test_the_launcher_or_the_game_killed_ends_both_and_restarts(tmp_path, probe, victim):
    """SIGKILL to the launcher takes its game down with it (its job object, then the
    process group); SIGKILL to the game ends the launcher with it. Either way the slot
    restarts and nothing of the killed start is left."""
    import asyncio
    import os
    import signal

    from w3async.procstat import alive
    from w3async.compose import supervisor

    data = null_recipe([probe_group(probe)], supervisor={"start_timeout_s": 60}, stop={"seconds": 20})
    run = tmp_path / "run"
    sup = supervisor(recipe_from_dict(data), run)
    task = asyncio.ensure_future(sup.run())
    game, launcher = [], []
    for _ in range(300):  # until the game has stepped
        await asyncio.sleep(0.1)
        game, launcher = (_processes_of_run(sup.table.name, "probe_game.exe"),
                          _processes_of_run(sup.table.name, "w3inject.exe"))
        if game and launcher and sup.counters.agent_steps > 100:
            break
    assert game and launcher, "the injected game did not start"
    assert len(game) == 1 and len(launcher) == 1, (game, launcher)
    prefix = next(rt.prefix for rt in sup.runtimes.values() if getattr(rt, "prefix", None))
    # The game's own desktop (desktop = "own", the default) has an explorer.exe of its own,
    # started by Wine from the game's first window: it is the game's (its environment
    # names this run's table, its process group is the launcher's) and ends with it. Its
    # command line is only "explorer.exe /desktop" (Wine rewrites argv; the prefix's
    # shared-desktop explorer reads the same), so the environment and the group tell it.
    group = sup.slots[0].proc.pid  # the start's process group (sandboxed: bwrap's, the launcher under it)
    desktop = [p for p in _processes_of_run(sup.table.name, "explorer.exe") if os.getpgid(p) == group]
    wine_own = {p for p in prefix.processes() if p not in game + launcher + desktop + [group]}
    assert wine_own, "the prefix's own processes (wineserver, services.exe, explorer.exe) are not running"
    # none of Wine's own processes is in the game's process group: a game's exit ends its group
    groups = {p: os.getpgid(p) for p in wine_own if alive(p)}
    assert group not in groups.values(), {p: _describe(p) for p, g in groups.items() if g == group}
    killed = (launcher if victim == "launcher" else game)[0]
    os.kill(killed, signal.SIGKILL)
    for _ in range(100):
        await asyncio.sleep(0.1)
        if not any(alive(p) for p in game + launcher):
            break
    left = {p: _describe(p) for p in game + launcher + desktop if alive(p)}
    lost = {p for p in wine_own if not alive(p)}  # Wine's own processes outlive a game's end
    stats = await task
    assert not left, f"after the {victim} ({killed}) was killed, these lived on: {left}"
    assert not lost, f"Wine's own processes {lost} ended with the game"
    causes = stats["games"][0]["causes"]
    # never a recycle: a game killed under its launcher exits 0 under Wine, and the launcher
    # says so (exit 71), or the keeper finds the game gone behind a launcher that missed it
    assert causes.get("crash", 0) >= 1 and "recycle" not in causes, causes
    starts = [e for e in events(run) if e["event"] == "game_start"]
    assert len(starts) >= 2  # restarted
    assert_nothing_left(sup, run)


@pytest.mark.parametrize("args,says", [
    (["--timeout-ms", "20abc"], "--timeout-ms 20abc: not a whole number of milliseconds, 1..86400000"),
    (["--timeout-ms", "-5"], "--timeout-ms -5: not a whole number of milliseconds"),
    (["--timeout-ms", "0"], "--timeout-ms 0: not a whole number of milliseconds"),
    (["--hook", "Z:\\" + "d" * 300 + "\\w3hook.dll"], "more than the 259 this launcher takes"),
])
def test_the_launcher_refuses_a_malformed_argument_naming_it(probe, args, says):
    """The launcher's own arguments: a number with garbage after it (taken as 20 before),
    a path too long for its buffers (cut before, naming another file): exit 2, one line."""
    from w3async.runtime.wine import WineConfig, acquire_prefix

    with acquire_prefix(WineConfig()) as prefix:
        hook = [] if "--hook" in args else ["--hook", str(HOOK)]
        r = prefix.run(prefix.command(str(LAUNCHER), [*args, *hook, "--", str(probe["game"])]),
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and says in r.stderr, (r.returncode, r.stderr[-2000:])
