"""Preflight for injected games: what the PE files and this machine can answer before
any game starts (docs/hooking.md, "What preflight checks").

The launcher and the hook check the same again at every start (a file replaced
mid-run), but a mistake found there costs a prefix boot and max_start_failures failed
starts before the run gives up; found here it is one line naming the file, the recipe
key, the value and the fix, and nothing starts.

Each check reads files only: the game's .exe and the DLLs next to it (pe.py), the
adapter, the hook's own tables (hooknames.py), and where Wine keeps its DLLs
(wineinstall.py).
"""

from __future__ import annotations

import re
from pathlib import Path

from w3async.runtime.hooknames import hook_names
from w3async.runtime.inject import BUILDS, HOOK, read_addresses, repo_path
from w3async.runtime.pe import AMD64, PeError, PeFile, machine_name, read_pe
from w3async.runtime.wine import LAUNCHER
from w3async.runtime.wineinstall import wine_install

ADAPTER_EXPORTS = ("w3a_attach", "w3a_observe", "w3a_act")
"""What w3h.h requires of an adapter (the launcher checks the same list: launcher.c)."""
APISETS = ("api-ms-win-", "ext-ms-")
"""DLL names the Windows loader resolves by API set, not by file: Wine has no such files."""
_ADDRESS = re.compile(r"^(?P<module>[^+]+)\+(?P<offset>0[xX][0-9a-fA-F]+|[0-9]+)$")
WINE_FOR = {64: "apt-get install wine64",
            32: "dpkg --add-architecture i386; apt-get update; apt-get install wine32"}


class _Game:
    """The game's .exe and the DLLs in its folder, read once, looked up by name in any case."""

    def __init__(self, exe: PeFile):
        self.exe = exe
        self.folder = exe.path.parent
        try:
            self.files = {p.name.lower(): p for p in self.folder.iterdir() if p.is_file()}
        except OSError:
            self.files = {}
        self._read: dict[str, PeFile | None] = {}

    def module(self, name: str) -> PeFile | None:
        """The .exe ("exe", or its own file name), or a DLL in its folder; None otherwise."""
        if name.lower() in ("exe", self.exe.path.name.lower()):
            return self.exe
        key = name.lower()
        if key not in self._read:
            path = self.files.get(key)
            try:
                self._read[key] = read_pe(path) if path else None
            except (OSError, PeError):
                self._read[key] = None
        return self._read[key]

    def step_modules(self, modules: list[str]) -> tuple[list[PeFile], list[str]]:
        """The modules whose calls of the step point are steps (hook.c, patch.c: the .exe
        and the recipe's `modules`) that are read here, and the names of those that are
        not next to the .exe (Wine's own DLLs: left to the hook)."""
        found, elsewhere = [self.exe], []
        for name in modules:
            m = self.module(name)
            (found.append(m) if m is not None else elsewhere.append(name))
        return found, elsewhere


def _address(value: str) -> tuple[str, int] | None:
    m = _ADDRESS.match(value.strip())
    return (m["module"].strip(), int(m["offset"], 0)) if m else None


def check(recipe) -> list[str]:
    """Problems with the recipe's Windows groups: Wine for each game's bitness, and for
    injected groups the runtime, the launcher and hook of that bitness, the adapter, the
    step point, the draw calls and the addresses; each one line, all of them."""
    problems: list[str] = []
    install = None
    for i, g in enumerate(recipe.games):
        if g.runtime != "wine" and g.inject is None:
            continue
        key = f"games[{i}].inject"
        if g.inject is not None and g.runtime != "wine":
            problems.append(f"games[{i}].runtime = {g.runtime!r}: an injected game ([games.inject]) runs under Wine: "
                            f"set runtime = \"wine\"")
        path = recipe.binary_path(g)
        try:
            exe = read_pe(path)
        except OSError:
            continue  # check_binaries names a missing or unreadable binary
        except PeError as e:
            with open(path, "rb") as f:
                mz = f.read(2) == b"MZ"
            if mz:  # no MZ: check_binaries says so
                problems.append(f"games[{i}].binary = {g.binary!r}: {path} {e}")
            continue
        if exe.machine not in BUILDS:
            problems.append(f"games[{i}].binary = {g.binary!r}: {path} is a program for {machine_name(exe.machine)}; "
                            f"Wine here runs x86-64 and i386 games")
            continue
        install = install or wine_install(recipe.runtime.wine)
        if install.loaders and not install.runs(exe.bits):
            what = "loader" if exe.bits not in install.loaders else "Windows DLLs"
            problems.append(f"games[{i}].binary = {g.binary!r}: {path} is a {exe.bits}-bit game and this Wine "
                            f"({recipe.runtime.wine}) has no {exe.bits}-bit {what} ({WINE_FOR[exe.bits]})")
        game = _Game(exe)
        if recipe.runtime.display == "null":
            problems += _check_display(f"games[{i}].binary = {g.binary!r}", game)
        if g.inject is not None:
            problems += _check_inject(key, g.inject, game, install)
    return problems


# The DLLs through which a game draws with a graphics API: Wine's null driver has no
# display for them (an OpenGL game then crashes, a Direct3D one waits in an invisible
# MessageBox after CreateDevice fails).
GRAPHICS_DLLS = {"opengl32.dll": "OpenGL", "ddraw.dll": "DirectDraw", "d3d8.dll": "Direct3D 8",
                 "d3d9.dll": "Direct3D 9", "d3d10.dll": "Direct3D 10", "d3d10_1.dll": "Direct3D 10.1",
                 "d3d11.dll": "Direct3D 11", "d3d12.dll": "Direct3D 12", "dxgi.dll": "DXGI"}


def _check_display(key: str, game: _Game) -> list[str]:
    """A game whose .exe, or a DLL next to it, imports a graphics API's DLL needs a
    display: [runtime] display = "null" is refused, naming the module and the API."""
    modules = [game.exe] + [m for name in sorted(game.files) if name.endswith(".dll")
                            for m in [game.module(name)] if m is not None]
    for m in modules:
        for dll in m.imports:
            api = GRAPHICS_DLLS.get(dll.lower())
            if api:
                where = str(m.path) if m is game.exe else f"{m.path} (next to it)"
                return [f"{key}: {where} imports {dll} ({api}), which draws through a display, and [runtime] "
                        f"display = \"null\" has none: set [runtime] display = \"xvfb\""]
    return []


def _check_inject(key: str, inj, game: _Game, install) -> list[str]:
    exe, problems = game.exe, []
    for part in (BUILDS[exe.machine] / LAUNCHER.name, BUILDS[exe.machine] / HOOK.name):
        if not part.exists():
            how = "gcc-mingw-w64-x86-64" if exe.machine == AMD64 else "gcc-mingw-w64-i686"
            problems.append(f"{key}: {part} is not built for this {machine_name(exe.machine)} game (make build, with "
                            f"apt-get install {how})")
    if inj.cwd and not repo_path(inj.cwd).is_dir():
        problems.append(f"{key}.cwd = {inj.cwd!r}: {repo_path(inj.cwd)} is not a folder")
    problems += _check_adapter(key, inj, game, install)
    addresses = dict(inj.addresses)
    if inj.addresses_file:
        found, problem = read_addresses(repo_path(inj.addresses_file))
        if problem:
            problems.append(f"{key}.addresses_file = {inj.addresses_file!r}: {repo_path(inj.addresses_file)} {problem}")
        addresses = {**found, **addresses}
    names = hook_names()
    problems += _check_step_point(key, inj, game, names, addresses)
    if names is not None and not inj.draw:
        for call in inj.draw_calls:
            why = names.draw_call_problem(call)
            if why:
                problems.append(f"{key}.draw_calls: {call!r} is {why}: fix or remove it")
    for name, value in addresses.items():
        problems += _check_address(f"{key}.addresses.{name} = {value!r}", value, game, code=False)
    return problems


def _check_adapter(key: str, inj, game: _Game, install) -> list[str]:
    exe = game.exe
    if not inj.adapter:
        return [f"{key}.adapter = '': name the adapter DLL (w3h.h; docs/hooking.md)"]
    what = f"{key}.adapter = {inj.adapter!r}"
    path = repo_path(inj.adapter)
    if not path.is_file():
        return [f"{what}: {path} does not exist (make build, or fix the path)"]
    try:
        ad = read_pe(path)
    except OSError as e:
        return [f"{what}: {path} cannot be read ({e.strerror})"]
    except PeError as e:
        return [f"{what}: {path} {e}"]
    if ad.machine != exe.machine:
        return [f"{what}: {path} is a DLL for {machine_name(ad.machine)}; the game is {machine_name(exe.machine)} "
                f"(wrong bitness); build it with the game's compiler"]
    if not ad.is_dll:
        return [f"{what}: {path} is a program, not a DLL"]
    missing = [name for name in ADAPTER_EXPORTS if name not in ad.exports]
    problems = [f"{what}: {path} exports no {', '.join(missing)} (w3h.h requires {', '.join(ADAPTER_EXPORTS)}: "
                f"declare each W3A_EXPORT)"] if missing else []
    system = install.pe_dirs.get(exe.bits) if install else None
    if system is None:
        return problems  # where Wine keeps its DLLs is unknown: the launcher checks at start
    try:
        beside = {p.name.lower() for p in path.parent.iterdir()}
    except OSError:
        beside = set()
    for dll in ad.imports:
        low = dll.lower()
        if low.startswith(APISETS) or low in beside or low in game.files or (system / low).is_file():
            continue
        problems.append(f"{what}: {path} imports {dll}, which is not next to it, next to the game, nor one of "
                        f"Wine's DLLs ({system}): put {dll} next to the adapter")
    return problems


def _check_step_point(key: str, inj, game: _Game, names, addresses: dict[str, str]) -> list[str]:
    sp, exe = inj.step_point, game.exe
    what = f"{key}.step_point = {sp!r}"
    if names is not None:
        why = names.step_point_problem(sp)
        if why:
            return [f"{what}: {why}: name a call the game makes once a frame (docs/hooking.md, "
                    f"\"Finding the step point\")"]
    if sp == "adapter" or "::" in sp:  # a COM method: reached through its creator, imported or looked up
        return []
    if sp.startswith("export:"):
        name = sp[len("export:"):]
        if name not in exe.exports:
            shown = ", ".join(sorted(exe.exports)[:8]) or "nothing"
            return [f"{what}: {exe.path} exports no {name} (it exports {shown}): name a function the .exe exports, "
                    f"or an import it calls once a frame"]
        return []
    if sp.startswith("at:"):
        at = sp[len("at:"):]
        if "+" not in at:  # at:NAME, a name of addresses (or of addresses_file)
            if at not in addresses:
                return [f"{what}: no address named {at} in addresses or addresses_file (known: "
                        f"{', '.join(sorted(addresses)) or 'none'})"]
            at = addresses[at]
        return _check_address(what, at, game, code=True)
    modules, elsewhere = game.step_modules(list(inj.modules))
    if elsewhere or any(m.imports_name(sp) for m in modules):
        return []
    where = ", ".join(m.path.name for m in modules)
    return [f"{what}: {sp} is not imported by {where} ({exe.path.parent}): name a call the game imports and makes "
            f"once a frame, or add the DLL whose frame loop calls it to modules (docs/hooking.md, \"Finding the step "
            f"point\")"]


def _check_address(what: str, value: str, game: _Game, code: bool) -> list[str]:
    """module+0xoffset: for the .exe or a DLL next to it, the offset inside its image
    (code: inside an executable section). A module found elsewhere (Wine's own DLLs)
    is looked up by the hook at run time."""
    parsed = _address(value)
    if parsed is None:
        return [f"{what}: expected module+0xoffset (e.g. exe+0x1a2b or game.dll+0x40)"]
    module, offset = parsed
    pe = game.module(module)
    if pe is None:
        return []
    if offset >= pe.image_size:
        return [f"{what}: offset {offset:#x} is past the end of {pe.path.name}'s image ({pe.image_size:#x} bytes): "
                f"an offset from the module's base, as a disassembler shows it less the image base"]
    if code:
        s = pe.section_at(offset)
        if s is None or not s.executable:
            inside = f"in its section {s.name}, which is not code" if s else "outside its sections"
            return [f"{what}: offset {offset:#x} of {pe.path.name} is {inside}: the step point must be code "
                    f"(an executable section: {', '.join(x.name for x in pe.sections if x.executable) or 'none'})"]
    return []
