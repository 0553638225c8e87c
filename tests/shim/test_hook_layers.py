"""The hook DLL's C files call each other in layers, as hook.h's header lists them.

Each file of the hook is compiled on its own, and its object's symbols say what it
defines and what it calls: a call into a file of the same layer or of one above is a
failure naming both files and the symbols, so the parts never grow back into one circle
(before: fourteen files, each reachable from every other).
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from tests.conftest import REPO

INJECT = REPO / "shim" / "inject"


def declared_layers() -> dict[str, int]:
    """hook.h's layer table: file -> layer, a file in the first line that names it."""
    head = (INJECT / "hook.h").read_text().split("*/", 1)[0]
    layers: dict[str, int] = {}
    layer = None
    for line in head.splitlines():
        m = re.match(r"\s*\*\s+(\d+)\.\s", line)
        if m:
            layer = int(m.group(1))
        if layer is not None:
            for name in re.findall(r"\b(\w+\.c)\b", line):
                layers.setdefault(name, layer)
    return layers


def hook_sources() -> list[str]:
    """The hook's files as shim/Makefile builds w3hook.dll (the shim's own w3s.c aside)."""
    text = (REPO / "shim" / "Makefile").read_text()
    line = re.search(r"^HOOK_SRC :=(.*)$", text, re.M).group(1)
    return [Path(p).name for p in line.split() if p.startswith("$(INJ)/")]


def symbols(obj: Path) -> tuple[set[str], set[str]]:
    """What an object defines (text, data, bss, read-only) and what it leaves undefined."""
    out = subprocess.run(["x86_64-w64-mingw32-nm", str(obj)], check=True, capture_output=True, text=True).stdout
    defined, undefined = set(), set()
    for line in out.splitlines():
        parts = line.split()
        kind, name = parts[-2], parts[-1]
        if kind == "U":
            undefined.add(name)
        elif kind in "TDBRC":
            defined.add(name)
    return defined, undefined


def calls_between_files(mingw, tmp_path, inject: Path = INJECT) -> dict[tuple[str, str], set[str]]:
    """(caller, callee) -> the symbols the caller's object takes from the callee's."""
    defs, uses = {}, {}
    for name in hook_sources():
        obj = tmp_path / (name + ".o")
        subprocess.run([mingw, "-c", "-O0", "-I", str(REPO / "shim"), "-I", str(inject), "-o", str(obj),
                        str(inject / name)], check=True, capture_output=True)
        defs[name], uses[name] = symbols(obj)
    owner = {sym: f for f, names in defs.items() for sym in names}
    edges: dict[tuple[str, str], set[str]] = {}
    for f, names in uses.items():
        for sym in names:
            if sym in owner and owner[sym] != f:
                edges.setdefault((f, owner[sym]), set()).add(sym)
    return edges


def test_every_hook_file_calls_only_the_layers_below_its_own(mingw, tmp_path):
    layers = declared_layers()
    sources = hook_sources()
    assert sorted(layers) == sorted(sources), "hook.h's layer table and shim/Makefile's HOOK_SRC list other files"
    edges = calls_between_files(mingw, tmp_path)
    assert ("hook.c", "step.c") in edges and ("step.c", "clock.c") in edges  # the symbols were read
    upward = [f"{a} (layer {layers[a]}) calls {b} (layer {layers[b]}): {', '.join(sorted(syms))}"
              for (a, b), syms in sorted(edges.items()) if layers[b] >= layers[a]]
    assert not upward, "\n".join(upward)


def test_the_layer_check_sees_a_call_upward(mingw, tmp_path):
    """A base.c that called the step would be reported: the check reads real calls."""
    bad = tmp_path / "inject"
    bad.mkdir()
    for f in INJECT.iterdir():
        (bad / f.name).write_bytes(f.read_bytes())
    base = bad / "base.c"
    base.write_text(base.read_text() + "\nvoid hk_base_steps(void) { hk_step(); }\n")
    edges = calls_between_files(mingw, tmp_path, bad)
    assert edges[("base.c", "step.c")] == {"hk_step"}
