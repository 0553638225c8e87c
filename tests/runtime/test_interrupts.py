"""A Ctrl-C at a loop's back edge: where CPython unwinds it from.

CPython (3.11 to 3.13, cpython#108214 and #130279) checks for a signal's exception after
a backward jump has moved to its target, and looks up the handler of the instruction
before that target. When that instruction lies outside the try or `with` the loop is in
(a `continue` to a loop that opens the try's body, say), the exception leaves the
function without running them: a `with lock:` then leaves the lock held. That is how a
Ctrl-C inside step() once left the run's lock taken, and the next sleep deadlocked
(w3async/env/bridge.py, Bridge.wait). The check below reads every function's bytecode:
each back edge must unwind through the handler that covers the jump itself.
"""

from __future__ import annotations

import dis
import types
from pathlib import Path

import w3async

# Functions that run only on threads of their own: a signal handler's exception is raised
# on the main thread alone, so no Ctrl-C lands at their back edges.
OFF_THE_MAIN_THREAD = {
    ("w3async/learn/learner_thread.py", "LearnerThread._run"),  # the learner's thread
}


def _codes(code: types.CodeType):
    yield code
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            yield from _codes(c)


def _handler(entries, offset: int):
    return next((e.target for e in entries if e.start <= offset < e.end), None)


def misplaced_back_edges(code: types.CodeType) -> list[tuple[str, int]]:
    """(function, line) of each backward jump whose target's previous instruction is
    under another handler than the jump (or under none)."""
    found = []
    for co in _codes(code):
        bc = dis.Bytecode(co)
        for ins in bc:
            if ins.opname.startswith("JUMP_BACKWARD"):
                if _handler(bc.exception_entries, ins.offset) != _handler(bc.exception_entries, ins.argval - 2):
                    found.append((co.co_qualname, ins.positions.lineno))
    return found


def test_the_check_finds_a_continue_that_skips_the_with():
    """The shape that deadlocked: a `continue` in a loop that opens a try inside a `with`
    (the check can fail; without the `continue`, the same loop passes)."""
    bad = """
def wait(lock, ready, nap, spin):
    with lock:
        try:
            while True:
                if ready():
                    return
                if spin():
                    continue
                nap()
        finally:
            pass
"""
    good = bad.replace("if spin():\n                    continue\n                nap()",
                       "if not spin():\n                    nap()")
    assert good != bad
    assert misplaced_back_edges(compile(bad, "bad.py", "exec")) == [("wait", 9)]
    assert misplaced_back_edges(compile(good, "good.py", "exec")) == []


def test_every_back_edge_in_the_package_unwinds_through_its_own_handlers():
    root = Path(w3async.__file__).parent
    found = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root.parent).as_posix()
        for name, line in misplaced_back_edges(compile(path.read_text(), rel, "exec")):
            if (rel, name) not in OFF_THE_MAIN_THREAD:
                found.append(f"{rel}:{line} ({name})")
    assert not found, ("a Ctrl-C at these back edges would skip the try/with around the loop "
                       f"(restructure the loop, e.g. no `continue` to its head): {found}")
