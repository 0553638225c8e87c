"""The names the hook knows, read from its C source: the one list is the hook's.

Every part of the hook (shim/inject/waits.c, draw.c, msgloop.c, patch.c) lists the
functions it can put in a game's import tables in an `hk_fn` table, one entry a
function: `FN(Sleep, HK_WAIT)` or `{"Name", repl, &real, HK_KINDS, 0}`. The hook makes a
step point of any entry of kind HK_STEP or HK_WAIT (patch.c, hk_can_be_step_point), and
turns off any draw call of kind HK_DRAW (draw.c). Preflight reads the same tables, so
that a function added to the hook is known here with no second list to update
(tests/runtime/test_preflight_pe.py holds the parse to the hook's own checks).

The step point's other forms are parsed by the hook's setup (hook.c) from their
prefixes; a form counts as known only when its literal is in the hook's source, so
that preflight never accepts what the hook built from this tree would refuse.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from pathlib import Path

SHIM_INJECT = Path(__file__).resolve().parents[2] / "shim" / "inject"
_ENTRY = re.compile(r'(?:\bFN\(\s*(\w+)\s*,\s*([A-Z_| ]+?)\s*\)|\{\s*"(\w+(?:::\w+)?)"\s*,[^{}]*?,\s*([A-Z_| ]+?)\s*,\s*0\s*\})')
_ONE_ARG_DEFINE = re.compile(r"^\s*\w+\s*\)\s*\{[^{}]*,\s*([A-Z_| ]+?)\s*,\s*0\s*\}")
_ONE_ARG_USE = re.compile(r"\bFN\(\s*(\w+)\s*\)")
STEP_KINDS = {"HK_STEP", "HK_WAIT"}
DRAW_KIND = "HK_DRAW"
STEP_POINT_FORMS = {
    "export:": 'export:NAME (a function the .exe exports)',
    "at:": 'at:module+0xoffset (an address in the code of the .exe or of a DLL next to it)',
    "adapter": 'adapter (the adapter says when a frame is a step)',
}
"""The step point's forms other than an import, by the literal hook.c parses (a prefix,
or the whole value); each counts only where its literal is in the hook's source."""
DRAW_CALL_ARGBYTES = re.compile(r"^[A-Za-z_]\w*@\d+$")
"""A draw call the recipe adds by name and the bytes of its arguments (`Name@argbytes`):
known to the hook when draw.c parses the '@'."""


@dataclass(frozen=True)
class HookNames:
    """What the hook built from this tree accepts."""

    step_points: tuple[str, ...]
    draw_calls: tuple[str, ...]
    forms: tuple[str, ...]  # the keys of STEP_POINT_FORMS the hook parses
    draw_argbytes: bool

    def step_point_problem(self, value: str) -> str | None:
        """None when the hook can make value the step point, else the choices."""
        if value in self.step_points:
            return None
        for form in self.forms:
            if value == form or (form.endswith(":") and value.startswith(form) and len(value) > len(form)):
                return None
        forms = "; ".join(STEP_POINT_FORMS[f] for f in self.forms)
        return f"not a call the hook can make the step point (one of: {', '.join(self.step_points)}; or {forms})"

    def draw_call_problem(self, value: str) -> str | None:
        """None when the hook can turn value off, else the choices."""
        if value in self.draw_calls or (self.draw_argbytes and DRAW_CALL_ARGBYTES.match(value)):
            return None
        extra = "; or Name@argbytes for another call" if self.draw_argbytes else ""
        return f"not a draw call the hook knows (one of: {', '.join(self.draw_calls)}{extra})"


def parse_tables(text: str) -> dict[str, set[str]]:
    """Function name -> its HK_* kinds, from the hk_fn table entries in C source text:
    `FN(name, KINDS)`, `{"name", ..., KINDS, 0}`, and `FN(name)` after a one-argument
    `#define FN(name) {..., KINDS, 0}` (the kinds the macro gives every entry)."""
    out: dict[str, set[str]] = {}

    def add(name: str, kinds: str) -> None:
        out.setdefault(name, set()).update(k.strip() for k in kinds.split("|"))

    for m in _ENTRY.finditer(text):
        add(*((m.group(1), m.group(2)) if m.group(1) else (m.group(3), m.group(4))))
    for chunk in text.split("#define FN(")[1:]:
        define, _, body = chunk.partition("\n")
        one = _ONE_ARG_DEFINE.match(define)
        if one:
            end = body.find("#undef FN")
            for name in _ONE_ARG_USE.findall(body if end < 0 else body[:end]):
                add(name, one.group(1))
    return out


@functools.lru_cache(maxsize=4)
def _load(folder: Path, stamp: tuple) -> HookNames | None:
    texts = {p.name: p.read_text(errors="replace") for p in sorted(folder.glob("*.c"))}
    if not texts:
        return None
    fns: dict[str, set[str]] = {}
    for text in texts.values():
        for name, kinds in parse_tables(text).items():
            fns.setdefault(name, set()).update(kinds)
    setup = texts.get("hook.c", "")
    return HookNames(
        step_points=tuple(n for n, k in fns.items() if k & STEP_KINDS),
        draw_calls=tuple(n for n, k in fns.items() if DRAW_KIND in k),
        forms=tuple(f for f in STEP_POINT_FORMS if f'"{f}"' in setup),
        draw_argbytes="'@'" in texts.get("draw.c", ""),
    )


def hook_names(folder: Path = SHIM_INJECT) -> HookNames | None:
    """The hook's names from its source in folder; None where the source is not there
    (an installed package without shim/): then only the hook checks, at each start."""
    try:
        stamp = tuple((p.name, p.stat().st_mtime_ns) for p in sorted(folder.glob("*.c")))
        return _load(folder, stamp)
    except OSError:
        return None
