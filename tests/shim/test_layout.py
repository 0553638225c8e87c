"""The C layout (shim/w3s_table.h) and the Python mirror (w3async/layout.py) agree byte
for byte: natively, for the Windows build (mingw-w64), and in the C extension."""

from __future__ import annotations

import subprocess

import numpy as np
import pytest

from w3async.sync import layout

from ..conftest import REPO

HEADER_FIELDS = list(layout.HEADER_DTYPE.names)
ROW_FIELDS = list(layout.ROW_DTYPE.names)


def _dump_program() -> str:
    lines = ['#include <stdio.h>', '#include "w3s_table.h"', "int main(void) {"]
    for f in HEADER_FIELDS:
        lines.append(f'printf("header {f} %zu %zu\\n", offsetof(w3s_header, {f}), sizeof(((w3s_header*)0)->{f}));')
    for f in ROW_FIELDS:
        lines.append(f'printf("row {f} %zu %zu\\n", offsetof(w3s_row, {f}), sizeof(((w3s_row*)0)->{f}));')
    lines.append('printf("size header %zu row %zu\\n", sizeof(w3s_header), sizeof(w3s_row));')
    lines.append('printf("hash %llu\\n", (unsigned long long)w3s_layout_hash());')
    lines.append('printf("magic %llu version %u rowmagic %u\\n", (unsigned long long)W3S_MAGIC, W3S_VERSION, W3S_ROW_MAGIC);')
    lines.append("return 0; }")
    return "\n".join(lines)


def _expected() -> list[str]:
    out = []
    for kind, dt, names in (("header", layout.HEADER_DTYPE, HEADER_FIELDS), ("row", layout.ROW_DTYPE, ROW_FIELDS)):
        for f in names:
            fdt, off = dt.fields[f][:2]
            out.append(f"{kind} {f} {off} {fdt.itemsize}")
    out.append(f"size header {layout.HEADER_DTYPE.itemsize} row {layout.ROW_DTYPE.itemsize}")
    out.append(f"hash {layout.LAYOUT_HASH}")
    out.append(f"magic {layout.MAGIC} version {layout.VERSION} rowmagic {layout.ROW_MAGIC}")
    return out


def test_native_layout_matches_python(tmp_path):
    src = tmp_path / "dump.c"
    src.write_text(_dump_program())
    exe = tmp_path / "dump"
    subprocess.run(["gcc", "-I", str(REPO / "shim"), "-o", str(exe), str(src)], check=True)
    got = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout.splitlines()
    assert got == _expected()


def test_windows_layout_matches_python(tmp_path, mingw):
    """The .exe's compiler lays the structs out the same: proven at compile time, so no
    Wine is needed (a mismatch fails the build with the field's name)."""
    asserts = []
    for kind, ctype, dt, names in (("header", "w3s_header", layout.HEADER_DTYPE, HEADER_FIELDS),
                                   ("row", "w3s_row", layout.ROW_DTYPE, ROW_FIELDS)):
        for f in names:
            fdt, off = dt.fields[f][:2]
            asserts.append(f'_Static_assert(offsetof({ctype}, {f}) == {off}, "{kind}.{f} offset");')
            asserts.append(f'_Static_assert(sizeof((({ctype}*)0)->{f}) == {fdt.itemsize}, "{kind}.{f} size");')
        asserts.append(f'_Static_assert(sizeof({ctype}) == {dt.itemsize}, "{kind} size");')
    src = tmp_path / "check.c"
    src.write_text('#include "w3s_table.h"\n' + "\n".join(asserts) + "\nint main(void) { return 0; }\n")
    r = subprocess.run([mingw, "-I", str(REPO / "shim"), "-c", "-o", str(tmp_path / "check.o"), str(src)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_extension_built_against_same_layout():
    from w3async.sync import _rows

    assert _rows.ROW_SIZE == layout.ROW_SIZE
    assert _rows.layout_hash() == layout.LAYOUT_HASH


def test_check_answer_matches_c(tmp_path):
    """The check policy's answers (Python) equal w3s_check_answer (C)."""
    seqs = [0, 1, 2, 77, 2**32 - 1, 2**32 + 5, 2**40 + 3]
    prog = ['#include <stdio.h>', '#include "w3s_table.h"', "int main(void) {"]
    for s in seqs:
        for lane, side in ((0, 0), (3, 1), (65535, 1)):
            for h in range(layout.N_HEADS):
                prog.append(f'printf("%d\\n", w3s_check_answer({s}ULL, {lane}u, {side}u, {h}u));')
    prog.append("return 0; }")
    src = tmp_path / "ck.c"
    src.write_text("\n".join(prog))
    subprocess.run(["gcc", "-I", str(REPO / "shim"), "-o", str(tmp_path / "ck"), str(src)], check=True)
    got = [int(x) for x in subprocess.run([str(tmp_path / "ck")], capture_output=True, text=True).stdout.split()]
    want = []
    for s in seqs:
        for lane, side in ((0, 0), (3, 1), (65535, 1)):
            for h in range(layout.N_HEADS):
                want.append(int(layout.check_answer(np.array([s], np.uint64), np.array([lane]), np.array([side]), h)[0]))
    assert got == want


@pytest.mark.parametrize("field", ["obs_seq", "act_seq", "action", "ent", "mask"])
def test_table_views_write_where_c_reads(field):
    """A value written through the numpy view lands at the C offset in the segment."""
    from w3async.sync.table import Table, segment_name

    t = Table(segment_name("layout"), 5, games=[(0, 2), (2, 3)])
    try:
        t.rows[3][field] = 7 if field != "ent" else 7.0  # the second game's second row
        with open(t.segment(1).path, "rb") as f:  # what that game maps
            raw = np.frombuffer(f.read(), np.uint8)
        off = layout.HEADER_SIZE + layout.ROW_SIZE + layout.ROW_DTYPE.fields[field][1]
        assert raw[off] == 7 or np.frombuffer(raw[off:off + 4].tobytes(), np.float32)[0] == 7.0
    finally:
        t.unlink()
        t.close()


def test_exit_codes_match_the_header():
    """Every W3S_EXIT_* of w3s_table.h is layout.EXIT_* with the same value, and each
    non-zero one has a name the supervisor's events use."""
    import re

    header = (REPO / "shim" / "w3s_table.h").read_text()
    codes = {m.group(1): int(m.group(2)) for m in re.finditer(r"#define W3S_EXIT_(\w+) (\d+)", header)}
    assert len(codes) >= 10, codes
    for name, value in codes.items():
        assert getattr(layout, f"EXIT_{name}") == value, name
        assert value == 0 or value in layout.EXIT_NAMES, name
