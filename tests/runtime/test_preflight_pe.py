"""Preflight reads the PE files (w3async/runtime/inject_checks.py, pe.py): a step point the
game does not import or export, a name the hook does not know, an unknown draw call, an
address outside its module, an adapter without its exports or with a DLL that is not
found, a 32-bit game on a Wine without 32-bit parts; each one line naming the key, the
value and the fix, and nothing started: no run folder, no segment, no Wine prefix. The
hook's names are its own C tables (hooknames.py). Prefixes are keyed by the Wine build's
versions and architectures, and a prefix that cannot run a bitness is remade once."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from w3async.recipes import recipe_from_dict
from w3async.runtime import inject_checks
from w3async.runtime.hooknames import SHIM_INJECT, hook_names
from w3async.runtime.pe import read_pe
from w3async.runtime.wineinstall import wine_install
from w3async.sync.table import list_segments

from tests.conftest import BUILD, REPO, SHM_PREFIX

DUEL_RT = BUILD / "win64" / "duel_rt.exe"
ADAPTER = BUILD / "win64" / "duel_adapter.dll"


@pytest.fixture(scope="module")
def built(mingw) -> None:
    if not all(p.exists() for p in (DUEL_RT, ADAPTER, BUILD / "win64" / "w3hook.dll")):
        subprocess.run(["make", "-s", "build"], cwd=REPO, check=True)


def _toml(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return str(v)
    if isinstance(v, list):
        return "[" + ", ".join(_toml(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{ " + ", ".join(f"{k} = {_toml(x)}" for k, x in v.items()) + " }"
    return '"' + str(v).replace("\\", "\\\\").replace('"', '\\"') + '"'


def duel_recipe(tmp_path: Path, binary: Path = DUEL_RT, wine: str = "wine", **inject) -> Path:
    """recipes/duel-injected.toml's shape, one game, Wine's cache under tmp_path; a file."""
    inj = {"adapter": str(ADAPTER), "step_point": "Sleep", "step_ms": 1000, "draw": False,
           "draw_calls": ["FillRect", "Ellipse", "Rectangle", "BitBlt"], **inject}
    text = (f'name = "pe"\ngame = "duel"\n[[games]]\nbinary = {_toml(str(binary))}\nruntime = "wine"\ncount = 1\n'
            f'lanes = 1\nsides = 1\nenv = {{ W3D_SIDES = "agent,ai:easy" }}\n[games.inject]\n'
            + "".join(f"{k} = {_toml(v)}\n" for k, v in inj.items())
            + f'[runtime]\nwine = {_toml(wine)}\ncache_dir = {_toml(str(tmp_path / "cache"))}\n'
            f'[supervisor]\npolicy = "random"\n[stop]\nseconds = 5\n')
    path = tmp_path / "pe.toml"
    path.write_text(text)
    return path


def refused(tmp_path: Path, recipe: Path) -> list[str]:
    """`w3async run` on the recipe: exit 2, one error, nothing created; its problem lines."""
    runs = tmp_path / "runs"
    segs = set(list_segments(SHM_PREFIX))
    r = subprocess.run([sys.executable, "-m", "w3async", "run", str(recipe), "--runs-dir", str(runs)],
                       capture_output=True, text=True, cwd=REPO, timeout=120)
    assert r.returncode == 2 and "Traceback" not in r.stderr, (r.returncode, r.stderr)
    assert r.stderr.count("w3async: error:") == 1, r.stderr
    assert not runs.exists(), "a run folder was created"
    assert set(list_segments(SHM_PREFIX)) == segs, "a shared-memory segment was created"
    assert not (tmp_path / "cache" / "wine").exists(), "a Wine prefix was made"
    return [ln.strip() for ln in r.stderr.splitlines()[1:] if ln.strip()]


def test_pe_mistakes_are_refused_one_line_each_before_anything_starts(tmp_path, built):
    lines = refused(tmp_path, duel_recipe(
        tmp_path, step_point="PeekMessageA", draw_calls=["FillRect", "Polygon"], adapter=str(BUILD / "win64" / "w3hook.dll"),
        addresses={"far": "exe+0x7fffffff", "typo": "exe-0x10", "fine": "exe+0x1000", "system": "kernel32.dll+0x10"}))
    want = [
        "games[0].inject.step_point = 'PeekMessageA': PeekMessageA is not imported by duel_rt.exe",
        "games[0].inject.draw_calls: 'Polygon' is not a draw call the hook knows (one of: ",
        "games[0].inject.addresses.far = 'exe+0x7fffffff': offset 0x7fffffff is past the end of duel_rt.exe's image",
        "games[0].inject.addresses.typo = 'exe-0x10': expected module+0xoffset",
        "games[0].inject.adapter = ", "w3hook.dll exports no w3a_attach, w3a_observe, w3a_act (w3h.h requires",
    ]
    for w in want:
        assert len([ln for ln in lines if w in ln]) == 1, (w, lines)
    assert len(lines) == 5, lines  # nothing about the address that is fine, nor kernel32's (Wine's, looked up at run time)
    polygon = next(ln for ln in lines if "Polygon" in ln)
    assert "fix or remove it" in polygon and "SwapBuffers" in polygon and "IDirect3DDevice9::Present" in polygon


def test_a_step_point_the_hook_cannot_make_or_the_game_does_not_export(tmp_path, built):
    (line,) = refused(tmp_path, duel_recipe(tmp_path, step_point="GetTickCount"))
    assert line.startswith("games[0].inject.step_point = 'GetTickCount': not a call the hook can make the step point "
                           "(one of: ") and "Sleep, SleepEx," in line and "export:NAME" in line, line
    (line,) = refused(tmp_path, duel_recipe(tmp_path, step_point="export:duel_nosuch"))
    assert re.search(r"step_point = 'export:duel_nosuch': \S+duel_rt.exe exports no duel_nosuch \(it exports "
                     r"duel_order, duel_rematch, duel_state\): name a function", line), line


def test_an_adapter_importing_a_dll_that_is_not_found(tmp_path, built, mingw):
    src = tmp_path / "gone.c"
    src.write_text("__declspec(dllexport) int w3gone(void) { return 1; }\n")
    dep = tmp_path / "w3gone.dll"
    subprocess.run([mingw, "-shared", "-o", str(dep), str(src)], check=True)
    ad = tmp_path / "ad.c"
    ad.write_text("int w3gone(void);\n" + "".join(f"__declspec(dllexport) int {n}(void) {{ return w3gone(); }}\n"
                                                   for n in inject_checks.ADAPTER_EXPORTS))
    adapter = tmp_path / "uses_gone.dll"
    subprocess.run([mingw, "-shared", "-o", str(adapter), str(ad), str(dep)], check=True)
    recipe = duel_recipe(tmp_path, adapter=str(adapter))
    assert inject_checks.check(recipe_from_dict_file(recipe)) == []  # found next to it
    dep.unlink()
    (line,) = refused(tmp_path, recipe)
    assert f"games[0].inject.adapter = {str(adapter)!r}: {adapter} imports w3gone.dll, which is not next to it" in line
    assert "put w3gone.dll next to the adapter" in line


def recipe_from_dict_file(path: Path):
    return recipe_from_dict(tomllib.loads(path.read_text()), str(path))


def test_a_code_address_must_be_in_an_executable_section(built):
    game = inject_checks._Game(read_pe(DUEL_RT))
    text = next(s for s in game.exe.sections if s.executable)
    data = next(s for s in game.exe.sections if not s.executable)
    assert inject_checks._check_address("k", f"exe+{text.rva + 16:#x}", game, code=True) == []
    (line,) = inject_checks._check_address("k", f"exe+{data.rva:#x}", game, code=True)
    assert f"in its section {data.name}, which is not code" in line and text.name in line
    assert inject_checks._check_address("k", f"duel_rt.exe+{data.rva:#x}", game, code=False) == []


def test_the_hooks_names_are_its_c_tables(tmp_path):
    """hooknames.py reads the hk_fn tables; the draw calls it finds are the ones draw.c's
    W3H_DRAW_CALLS parser knows (its own, and the COM methods of com.c, d3d8.c and
    dxgi.c), and the step points those patch.c accepts."""
    names = hook_names()
    draw_c = (SHIM_INJECT / "draw.c").read_text()
    listed = re.search(r"DRAW_NAMES\[D_N\]\s*=\s*\{([^}]*)\}", draw_c).group(1)
    methods = [m for part in ("com.c", "d3d8.c", "dxgi.c") for m in re.findall(
        r'"(\w+::\w+)"', re.search(r"NAMES\[C_N\]\s*=\s*\{([^}]*)\}", (SHIM_INJECT / part).read_text()).group(1))]
    assert sorted(names.draw_calls) == sorted(re.findall(r'"(\w+)"', listed) + methods)
    assert {"IDirect3DDevice9::Present", "IDirect3DDevice9Ex::PresentEx", "IDirect3DDevice8::Present",
            "IDXGISwapChain::Present", "IDXGISwapChain1::Present1"} <= set(names.step_points)
    assert {"Sleep", "SleepEx", "PeekMessageA", "BitBlt", "SwapBuffers"} <= set(names.step_points)
    assert not {"GetTickCount", "QueryPerformanceCounter", "GetProcAddress", "FillRect"} & set(names.step_points)
    assert "export:" in names.forms
    # A part added to the hook is known with no list to update, and so are new forms.
    fake = tmp_path / "inject"
    fake.mkdir()
    (fake / "hook.c").write_text('if (!strncmp(sp, "at:", 3)) ... if (!strcmp(sp, "adapter")) ...')
    (fake / "msgloop.c").write_text("hk_fn hk_msg_fns[] = {\n    FN(GetMessageA, HK_STEP),\n};\n")
    (fake / "draw.c").write_text("#define FN(name) {#name, (void *)h_##name, (void **)&r_##name, HK_DRAW, 0}\n"
                                 "hk_fn d[] = { FN(Polygon), FN(Pie), };\n#undef FN\n char *at = strchr(tok, '@');\n")
    more = hook_names(fake)
    assert more.step_points == ("GetMessageA",) and more.draw_calls == ("Polygon", "Pie")
    assert more.forms == ("at:", "adapter") and more.draw_argbytes
    assert more.step_point_problem("at:exe+0x10") is None and more.step_point_problem("adapter") is None
    assert more.draw_call_problem("Chord@20") is None and "one of: Polygon, Pie" in more.draw_call_problem("Chord")


def _fake_wine(root: Path, bits: tuple[int, ...]) -> Path:
    """A Wine build folder of links to this machine's Wine, with only the given bitnesses."""
    real = wine_install("wine")
    (root / "bin").mkdir(parents=True)
    for b in bits:
        (root / "bin" / ("wine64" if b == 64 else "wine")).symlink_to(real.loaders[b])
        lib = root / ("lib64" if b == 64 else "lib") / "wine"
        lib.mkdir(parents=True)
        (lib / real.pe_dirs[b].name).symlink_to(real.pe_dirs[b])
    return root


def test_prefixes_are_keyed_by_the_wine_builds_architectures_and_a_32_bit_game_needs_them(tmp_path, built, wine32):
    w64, both = _fake_wine(tmp_path / "w64", (64,)), _fake_wine(tmp_path / "both", (64, 32))
    i64, i_both = wine_install(str(w64)), wine_install(str(both))
    assert i64.runs(64) and not i64.runs(32) and i_both.runs(32)
    assert i64.key != i_both.key  # installing wine32 gives a new prefix, not the old 64-bit one
    assert wine_install(str(both)).key == i_both.key
    game32 = BUILD / "win32" / "duel_rt.exe"
    (line,) = refused(tmp_path, duel_recipe(tmp_path, binary=game32, wine=str(w64),
                                            adapter=str(BUILD / "win32" / "duel_adapter.dll")))
    assert line == (f"games[0].binary = {str(game32)!r}: {game32} is a 32-bit game and this Wine ({w64}) has no "
                    f"32-bit loader (dpkg --add-architecture i386; apt-get update; apt-get install wine32)"), line
    assert inject_checks.check(recipe_from_dict_file(duel_recipe(
        tmp_path, binary=game32, wine=str(both), adapter=str(BUILD / "win32" / "duel_adapter.dll")))) == []


@pytest.mark.wine
def test_a_prefix_that_cannot_run_32_bit_programs_is_made_again(tmp_path, wine32):
    """A WoW64 prefix without its 32-bit system folder (what a prefix made before wine32
    was installed lacks) fails the 32-bit launcher's --check; acquire remakes it once."""
    from w3async.runtime.wine import WineConfig, acquire_running_prefix, check_prefix

    cfg = WineConfig(cache_dir=str(tmp_path / "cache"), bits=(32, 64))
    with acquire_running_prefix(cfg) as p:
        assert check_prefix(p, (32, 64)) is None
        p.kill()
        shutil.rmtree(p.path / "drive_c" / "windows" / "syswow64")
        broken = check_prefix(p, (32,))
        assert broken and broken.startswith("32-bit launcher:") and "exited" in broken, broken
        p.kill()
    with acquire_running_prefix(cfg) as p:
        assert (p.path / "drive_c" / "windows" / "syswow64" / "kernel32.dll").exists()
        assert check_prefix(p, (32, 64)) is None


@pytest.mark.wine
def test_a_prefix_that_fails_its_check_twice_is_refused_with_the_cause(tmp_path, wine32, monkeypatch):
    from w3async.runtime import wine as winemod

    bad = tmp_path / "w3inject.exe"
    bad.write_text("not a program\n")
    monkeypatch.setitem(winemod.LAUNCHERS, 32, bad)
    cfg = winemod.WineConfig(cache_dir=str(tmp_path / "cache"), bits=(32,))
    with pytest.raises(winemod.WineError) as e:
        winemod.acquire_running_prefix(cfg)
    assert "cannot run the 32-bit launcher" in str(e.value) and "even after it was made again" in str(e.value)
    root = next((tmp_path / "cache" / "wine").iterdir())
    assert winemod.processes_with_env("WINEPREFIX", str(root / "prefix-0")) == []
    with winemod.acquire_prefix(winemod.WineConfig(cache_dir=str(tmp_path / "cache"))) as p:  # unlocked again
        assert p.path == root / "prefix-0"


@pytest.mark.parametrize("api", ["d3d9", "opengl32"])
def test_a_game_that_draws_with_a_graphics_api_needs_a_display(tmp_path, built, mingw, api):
    """A game whose .exe (Direct3D 9) or a DLL next to it (OpenGL) imports a graphics
    API's DLL, with display = "null": refused before anything starts, naming the module,
    the API and the fix (before: an OpenGL game crashed with exit 72 at its third start, a
    Direct3D one sat in an invisible MessageBox, reported as a step point not reached).
    With display = "xvfb" the same recipe passes this check."""
    game = tmp_path / "game"
    game.mkdir()
    calls = {"d3d9": ("void *__stdcall Direct3DCreate9(unsigned);", "Direct3DCreate9(32)"),
             "opengl32": ("void __stdcall glFlush(void);", "glFlush()")}[api]
    src = tmp_path / "g.c"
    src.write_text(f"{calls[0]}\n__declspec(dllexport) void draw(void) {{ {calls[1]}; }}\n"
                   "int main(void) { return 0; }\n")
    if api == "d3d9":
        exe = game / "g.exe"
        subprocess.run([mingw, "-o", str(exe), str(src), "-ld3d9"], check=True)
    else:  # the import in a DLL beside a plain .exe
        subprocess.run([mingw, "-shared", "-o", str(game / "render.dll"), str(src), "-lopengl32"], check=True)
        (tmp_path / "m.c").write_text("int main(void) { return 0; }\n")
        exe = game / "g.exe"
        subprocess.run([mingw, "-o", str(exe), str(tmp_path / "m.c")], check=True)
    recipe = tmp_path / "g.toml"
    recipe.write_text(f'name = "g"\ngame = "null"\n[[games]]\nbinary = {_toml(str(exe))}\nruntime = "wine"\n'
                      f'[runtime]\ncache_dir = {_toml(str(tmp_path / "cache"))}\n')
    (line,) = refused(tmp_path, recipe)
    dll, name = ("d3d9.dll (direct3d 9)", str(exe)) if api == "d3d9" else \
        ("opengl32.dll (opengl)", f"{game / 'render.dll'} (next to it)")
    assert f"games[0].binary = {str(exe)!r}: {name} imports" in line and dll in line.lower(), line
    assert 'set [runtime] display = "xvfb"' in line, line
    data = {**tomllib.loads(recipe.read_text()), "runtime": {"display": "xvfb", "cache_dir": str(tmp_path / "cache")}}
    assert [p for p in inject_checks.check(recipe_from_dict(data, str(recipe))) if "display" in p] == []


@pytest.mark.parametrize("bits", [64, 32])
def test_a_crash_in_a_prefix_never_starts_wines_debugger(tmp_path, wine32, mingw, mingw32, bits):
    """A Windows program whose exception nothing handles (no shim, no hook: a filter of
    ours is not there) ends at once with Wine's one-line report, 64- and 32-bit: the
    prefix's AeDebug names a debugger that does not exist, in both registry views (before:
    Wine started winedbg, which printed a backtrace, and a 32-bit game's crash was held
    long enough to be reported as "step point not reached")."""
    from w3async.runtime.wineprefix import WineConfig, acquire_running_prefix, debugger_set

    src = tmp_path / "crash.c"
    src.write_text('#include <stdio.h>\nint main(void) { puts("about to crash"); fflush(stdout);\n'
                   '  *(volatile int *)0 = 1; return 0; }\n')
    exe = tmp_path / f"crash{bits}.exe"
    subprocess.run([mingw if bits == 64 else mingw32, "-o", str(exe), str(src)], check=True)
    with acquire_running_prefix(WineConfig(bits=(32, 64))) as prefix:
        assert debugger_set(prefix.path)
        out = prefix.run(prefix.command(str(exe)), capture_output=True, text=True, timeout=60)
    said = out.stdout + out.stderr
    assert "about to crash" in said and "Unhandled page fault on write access" in said, said
    assert "System information" not in said and "Backtrace" not in said, said  # winedbg's report
    assert out.returncode == 5, said  # 0xC0000005's low byte
