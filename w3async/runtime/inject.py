"""Injected games: an unmodified Windows .exe started through the launcher, with the
hook and the user's adapter loaded into it before its first instruction
(docs/hooking.md; the C side is shim/inject/).

The supervisor starts `w3inject.exe` under the group's Wine prefix in place of the
game; the launcher waits for the game and exits with its code, so the game stays
under the supervisor as any other: restarts by cause, the hang watch, backoff, the
process group and the prefix's clean-up. This module turns a group's [games.inject]
section into the launcher's command line and the hook's settings (W3H_*).
"""

from __future__ import annotations

import tomllib
from pathlib import Path

from w3async.recipe_sections import REPO_ROOT, InjectSection
from w3async.runtime.wine import LAUNCHER, windows_path

BUILD_WIN64 = LAUNCHER.parent
HOOK = BUILD_WIN64 / "w3hook.dll"
AMD64, I386 = 0x8664, 0x14C
# The launcher and hook of a game's bitness (shim/Makefile builds win32 where i686 mingw is).
BUILDS = {AMD64: BUILD_WIN64, I386: REPO_ROOT / "build" / "win32"}
MACHINES = {AMD64: "x86-64 (64-bit)", I386: "i386 (32-bit)", 0xAA64: "ARM64"}
WINE32_LIBS = Path("/usr/lib/i386-linux-gnu/wine")  # Debian's wine32 (multiarch i386)


def repo_path(path: str) -> Path:
    """A recipe path: absolute, or from the repository root."""
    p = Path(path)
    return p if p.is_absolute() else REPO_ROOT / p


def fill(text: str, values: dict[str, str]) -> str:
    """The recipe's placeholders ("{seed}", "{lane}", ...) filled; others kept as written."""
    for k, v in values.items():
        text = text.replace("{" + k + "}", v)
    return text


def launch(inject: InjectSection, game: Path, values: dict[str, str]) -> tuple[Path, list[str], dict[str, str], str]:
    """(the launcher, its arguments, the hook's environment, the working folder) for
    starting `game` with inject's hook settings; values fill the args' placeholders."""
    adapter = windows_path(repo_path(inject.adapter))
    machine, _, _ = _pe_machine(game)
    build = BUILDS.get(machine, BUILD_WIN64)
    args = ["--timeout-ms", str(int(inject.timeout_s * 1000)), "--hook", windows_path(build / HOOK.name),
            "--adapter", adapter]
    cwd = windows_path(repo_path(inject.cwd)) if inject.cwd else windows_path(game.parent)
    if inject.desktop == "own":  # a desktop a slot: a game never takes another's focus
        args += ["--own-desktop", f"w3async-slot-{values.get('slot', '0')}"]
    args += ["--cwd", cwd, "--", windows_path(game)] + [fill(a, values) for a in inject.args]
    env = {
        "W3H_ADAPTER": adapter,
        "W3H_STEP_POINT": inject.step_point,
        "W3H_STEP_THREAD": inject.step_thread,
        "W3H_STEP_MS": str(inject.step_ms),
        "W3H_STEP_DEADLINE_MS": str(int(inject.step_deadline_s * 1000)),
        "W3H_CLOCK": "1" if inject.clock else "0",
        "W3H_DRAW": "1" if inject.draw else "0",
        "W3H_DRAW_CALLS": ",".join(inject.draw_calls),
        "W3H_MODULES": ",".join(inject.modules),
    }
    env.update({f"W3H_ADDR_{k}": v for k, v in {**file_addresses(inject), **inject.addresses}.items()})
    return build / LAUNCHER.name, args, env, str(game.parent)


def file_addresses(inject: InjectSection) -> dict[str, str]:
    """The names in inject.addresses_file ({} when none is set). Read at every start, so
    that a rebuilt game's offsets are the ones used; check() reports a bad file first."""
    if not inject.addresses_file:
        return {}
    addresses, problem = _read_addresses(repo_path(inject.addresses_file))
    if problem:
        raise ValueError(f"inject.addresses_file = {inject.addresses_file!r}: {problem}")
    return addresses


def _read_addresses(path: Path) -> tuple[dict[str, str], str | None]:
    """(name -> "module+0xoffset", problem) from an addresses file."""
    try:
        data = tomllib.loads(path.read_text())
    except OSError as e:
        return {}, f"cannot be read ({e.strerror}): make build writes the games' addresses files"
    except tomllib.TOMLDecodeError as e:
        return {}, f"is not TOML ({e})"
    bad = [k for k, v in data.items() if not isinstance(v, str) or "+" not in v or not k.isidentifier()]
    if bad:
        return {}, f"{bad[0]} = {data[bad[0]]!r}: expected name = \"module+0xoffset\""
    return data, None


def _pe_machine(path: Path) -> tuple[int | None, bool, str | None]:
    """(machine, is a DLL, problem) from a PE file's headers; problem names what is wrong."""
    try:
        with open(path, "rb") as f:
            head = f.read(4096)
    except OSError as e:
        return None, False, f"cannot be read ({e.strerror})"
    if head[:2] != b"MZ" or len(head) < 0x40:
        return None, False, "is not a PE file (no MZ header)"
    pe = int.from_bytes(head[0x3C:0x40], "little")
    if head[pe:pe + 4] != b"PE\0\0":
        return None, False, "is not a PE file (no PE signature in its first 4 KiB)"
    machine = int.from_bytes(head[pe + 4:pe + 6], "little")
    chars = int.from_bytes(head[pe + 22:pe + 24], "little")
    return machine, bool(chars & 0x2000), None


def check(recipe) -> list[str]:
    """Problems with the recipe's injected groups, found before anything starts: the
    runtime, the launcher and hook built for the game's bitness, the adapter a DLL of
    that bitness. (The launcher checks the same again at every start, and the
    adapter's exports.)"""
    problems = []
    for i, g in enumerate(recipe.games):
        if g.inject is None:
            continue
        key = f"games[{i}].inject"
        if g.runtime != "wine":
            problems.append(f"games[{i}].runtime = {g.runtime!r}: an injected game ([games.inject]) runs under Wine: "
                            f"set runtime = \"wine\"")
        game = recipe.binary_path(g)
        machine = _pe_machine(game)[0] if game.is_file() else AMD64
        if machine not in BUILDS:
            problems.append(f"games[{i}].binary = {g.binary!r}: {game} is a program for "
                            f"{MACHINES.get(machine, hex(machine))}; injection is built for x86-64 and i386 games")
            continue
        for part in (BUILDS[machine] / LAUNCHER.name, BUILDS[machine] / HOOK.name):
            if not part.exists():
                how = "gcc-mingw-w64-x86-64" if machine == AMD64 else "gcc-mingw-w64-i686"
                problems.append(f"{key}: {part} is not built for this {MACHINES[machine]} game (make build, with "
                                f"apt-get install {how})")
        if machine == I386 and not WINE32_LIBS.is_dir() and not Path(recipe.runtime.wine).is_dir():
            problems.append(f"games[{i}].binary = {g.binary!r}: a 32-bit game needs 32-bit Wine, and {WINE32_LIBS} "
                            f"is missing (dpkg --add-architecture i386; apt-get update; apt-get install wine32)")
        if not g.inject.adapter:
            problems.append(f"{key}.adapter = '': name the adapter DLL (w3h.h; docs/hooking.md)")
            continue
        adapter = repo_path(g.inject.adapter)
        if not adapter.is_file():
            problems.append(f"{key}.adapter = {g.inject.adapter!r}: {adapter} does not exist (make build, or fix the path)")
            continue
        got, is_dll, problem = _pe_machine(adapter)
        if problem:
            problems.append(f"{key}.adapter = {g.inject.adapter!r}: {adapter} {problem}")
        elif got != machine:
            problems.append(f"{key}.adapter = {g.inject.adapter!r}: {adapter} is a DLL for "
                            f"{MACHINES.get(got, hex(got))}; the game is {MACHINES[machine]} (wrong bitness)")
        elif not is_dll:
            problems.append(f"{key}.adapter = {g.inject.adapter!r}: {adapter} is a program, not a DLL")
        if g.inject.addresses_file:
            problem = _read_addresses(repo_path(g.inject.addresses_file))[1]
            if problem:
                problems.append(f"{key}.addresses_file = {g.inject.addresses_file!r}: "
                                f"{repo_path(g.inject.addresses_file)} {problem}")
        if g.inject.cwd and not repo_path(g.inject.cwd).is_dir():
            problems.append(f"{key}.cwd = {g.inject.cwd!r}: {repo_path(g.inject.cwd)} is not a folder")
    return problems
