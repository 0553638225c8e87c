"""The C layout (shim/w3s_table.h) and the Python mirror (w3async/layout.py) agree byte
for byte: natively, for the Windows build (mingw-w64), and in the C extension."""

from __future__ import annotations

import subprocess

import numpy as np
import pytest

from w3async.sync import layout

from tests.conftest import REPO

HEADER_FIELDS = list(layout.HEADER_DTYPE.names)
FIXED_FIELDS = [n for n, _, _ in layout._HEAD_FIELDS]  # the struct's: counters and the answer
OBS_FIELDS = ["glob", "ent", "ent_type", "mask"]  # laid out by the run's shape
# The default (the duel's), a flat 8-float row with one head of 3 (no entities), Pong's,
# one without globals and 8 heads, and one whose observation spills past a page.
SHAPES = [layout.DEFAULT.shape, (0, 0, 8, 1, 3), (3, 2, 11, 1, 3), (5, 7, 0, 8, 200), (300, 5, 1, 2, 300)]


def _dump_program() -> str:
    lines = ['#include <stdio.h>', '#include "w3s_table.h"', "int main(void) {", "w3s_layout L;"]
    for f in HEADER_FIELDS:
        lines.append(f'printf("header {f} %zu %zu\\n", offsetof(w3s_header, {f}), sizeof(((w3s_header*)0)->{f}));')
    for f in FIXED_FIELDS:
        lines.append(f'printf("row {f} %zu %zu\\n", offsetof(w3s_row, {f}), sizeof(((w3s_row*)0)->{f}));')
    lines.append('printf("size header %zu row %zu\\n", sizeof(w3s_header), sizeof(w3s_row));')
    for sh in SHAPES:
        lines.append(f"if (w3s_layout_make(&L, {', '.join(map(str, sh))})) return 1;")
        lines.append('printf("shape %u %u %u %u %u: %u %u %u %u %u %u %llu\\n", L.e_max, L.f_ent, L.g_glob, L.n_heads, '
                     'L.head_max, L.glob, L.ent, L.ent_type, L.mask, L.obs_end, L.row_size, '
                     '(unsigned long long)w3s_layout_hash(&L));')
    lines.append('printf("magic %llu version %u rowmagic %u\\n", (unsigned long long)W3S_MAGIC, W3S_VERSION, W3S_ROW_MAGIC);')
    lines.append("return 0; }")
    return "\n".join(lines)


def _expected() -> list[str]:
    out = []
    for f in HEADER_FIELDS:
        fdt, off = layout.HEADER_DTYPE.fields[f][:2]
        out.append(f"header {f} {off} {fdt.itemsize}")
    for f in FIXED_FIELDS:
        fdt, off = layout.ROW_DTYPE.fields[f][:2]
        out.append(f"row {f} {off} {fdt.itemsize}")
    out.append(f"size header {layout.HEADER_DTYPE.itemsize} row {layout.OBS_OFFSET}")
    for sh in SHAPES:
        lay = layout.Layout(*sh)
        o = lay.offsets
        out.append(f"shape {' '.join(map(str, lay.shape))}: {o['glob']} {o['ent']} {o['ent_type']} {o['mask']} "
                   f"{lay.obs_end} {lay.row_size} {lay.hash}")
    out.append(f"magic {layout.MAGIC} version {layout.VERSION} rowmagic {layout.ROW_MAGIC}")
    return out


def test_native_layout_matches_python(tmp_path):
    src = tmp_path / "dump.c"
    src.write_text(_dump_program())
    exe = tmp_path / "dump"
    subprocess.run(["gcc", "-I", str(REPO / "shim"), "-o", str(exe), str(src)], check=True)
    got = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout.splitlines()
    assert got == _expected()


def test_every_row_field_of_a_shape_lies_where_its_dtype_says():
    """Each shape's numpy row: the observation's fields at the layout's offsets, sized by
    the shape, nothing overlapping, the row a whole number of pages."""
    for sh in SHAPES:
        lay = layout.Layout(*sh)
        dt = lay.row_dtype
        e, f, g, h, m = sh
        want = {"glob": ((g,), 4), "ent": ((e, f if e else 0), 4), "ent_type": ((e,), 2), "mask": ((h, m), 1)}
        end = layout.OBS_OFFSET
        for name in OBS_FIELDS:
            fdt, off = dt.fields[name][:2]
            assert off == lay.offsets[name] == end, (sh, name)
            assert fdt.shape == want[name][0] and fdt.base.itemsize == want[name][1], (sh, name)
            end += fdt.itemsize
        assert end == lay.obs_end <= dt.itemsize == lay.row_size and lay.row_size % layout.PAGE == 0
    assert layout.Layout(0, 0, 8, 1, 3).row_size == 4096 and layout.DEFAULT.row_size == 12288


def test_a_shape_out_of_range_is_named():
    for sh, said in [((0, 0, 0, 1, 3), "an observation needs one of them"), ((4, 0, 8, 1, 3), "features = 0"),
                     ((0, 0, 8, 9, 3), "9 action heads"), ((0, 0, 8, 0, 3), "0 action heads"),
                     ((4097, 4, 8, 1, 3), "entities = 4097"), ((4096, 1024, 8, 1, 3), "bytes: more than")]:
        with pytest.raises(ValueError, match=said):
            layout.Layout(*sh)


def test_windows_layout_matches_python(tmp_path, mingw):
    """The .exe's compiler lays the structs out the same: proven at compile time, so no
    Wine is needed (a mismatch fails the build with the field's name)."""
    asserts = []
    for kind, ctype, dt, names in (("header", "w3s_header", layout.HEADER_DTYPE, HEADER_FIELDS),
                                   ("row", "w3s_row", layout.ROW_DTYPE, FIXED_FIELDS)):
        for f in names:
            fdt, off = dt.fields[f][:2]
            asserts.append(f'_Static_assert(offsetof({ctype}, {f}) == {off}, "{kind}.{f} offset");')
            asserts.append(f'_Static_assert(sizeof((({ctype}*)0)->{f}) == {fdt.itemsize}, "{kind}.{f} size");')
    asserts.append(f'_Static_assert(sizeof(w3s_header) == {layout.HEADER_SIZE}, "header size");')
    asserts.append(f'_Static_assert(sizeof(w3s_row) == {layout.OBS_OFFSET}, "row size");')
    # The default shape's struct (w3s_obs_default) where the default layout puts each field.
    for f in OBS_FIELDS:
        fdt, off = layout.ROW_DTYPE.fields[f][:2]
        asserts.append(f'_Static_assert({layout.OBS_OFFSET} + offsetof(w3s_obs_default, {f}) == {off}, "obs.{f}");')
    src = tmp_path / "check.c"
    src.write_text('#include "w3s_table.h"\n' + "\n".join(asserts) + "\nint main(void) { return 0; }\n")
    r = subprocess.run([mingw, "-I", str(REPO / "shim"), "-c", "-o", str(tmp_path / "check.o"), str(src)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_extension_built_against_same_layout():
    from w3async.env import _rowcopies
    from w3async.sync import _rows

    assert _rows.VERSION == layout.VERSION
    for sh in SHAPES:
        lay = layout.Layout(*sh)
        o = lay.offsets
        assert _rows.layout(*sh) == (o["glob"], o["ent"], o["ent_type"], o["mask"], lay.obs_end, lay.row_size)
        assert _rows.layout_hash(*sh) == _rowcopies.layout_hash(*sh) == lay.hash
    with pytest.raises(ValueError, match="out of range"):
        _rows.layout_hash(0, 0, 8, 9, 3)


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


@pytest.mark.parametrize("shape", [layout.DEFAULT.shape, (0, 0, 8, 1, 3)])
@pytest.mark.parametrize("field", ["obs_seq", "act_seq", "action", "glob", "mask"])
def test_table_views_write_where_c_reads(field, shape):
    """A value written through the numpy view lands at the C offset in the segment, and
    the segment's header carries the shape and its hash."""
    from w3async.sync.table import Table, segment_name

    lay = layout.Layout(*shape)
    t = Table(segment_name("layout"), 5, games=[(0, 2), (2, 3)], lay=lay)
    try:
        t.rows[3][field] = 7 if field != "glob" else 7.0  # the second game's second row
        with open(t.segment(1).path, "rb") as f:  # what that game maps
            raw = np.frombuffer(f.read(), np.uint8)
        head = np.frombuffer(raw[: layout.HEADER_SIZE].tobytes(), layout.HEADER_DTYPE)[0]
        assert [int(head[k]) for k in ("e_max", "f_ent", "g_glob", "n_heads", "head_max")] == list(shape)
        assert int(head["layout_hash"]) == lay.hash and int(head["row_size"]) == lay.row_size
        assert len(raw) == layout.HEADER_SIZE + 3 * lay.row_size
        off = layout.HEADER_SIZE + lay.row_size + lay.row_dtype.fields[field][1]
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
