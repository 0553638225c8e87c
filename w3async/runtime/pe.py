"""What preflight reads from a PE file (a Windows .exe or .dll) without loading it: the
machine, DLL or program, the image's size, the sections, the imports by DLL and the
exported names.

Only the headers and the import and export directories, read from the file through
mmap (a game's .exe may be hundreds of MB; only the pages touched are read). The hook
(shim/inject/patch.c) matches imports by name in the tables that name them (the
OriginalFirstThunk's), so `imports` lists exactly those names: a descriptor without one
(a bound, stripped table) has its DLL listed with no names, as the hook sees it.

A file that is not a PE file, or whose tables point outside it, raises PeError naming
what is wrong; nothing here trusts an offset it has not checked.
"""

from __future__ import annotations

import mmap
import struct
from dataclasses import dataclass, field
from pathlib import Path

AMD64, I386, ARM64 = 0x8664, 0x14C, 0xAA64
MACHINES = {AMD64: "x86-64 (64-bit)", I386: "i386 (32-bit)", ARM64: "ARM64"}
SCN_CNT_CODE, SCN_MEM_EXECUTE = 0x20, 0x20000000
MAX_IMPORTS = 100_000  # names across all DLLs: a loop bound against a table that never ends


class PeError(ValueError):
    """The file is not a PE file, or its headers or tables are cut short or out of range."""


@dataclass(frozen=True)
class Section:
    name: str
    rva: int
    size: int  # in memory: max(VirtualSize, SizeOfRawData)
    executable: bool


@dataclass
class PeFile:
    """The facts preflight checks; read_pe() makes one."""

    path: Path
    machine: int
    is_dll: bool
    image_size: int
    sections: list[Section] = field(default_factory=list)
    imports: dict[str, list[str]] = field(default_factory=dict)
    """DLL name as written (e.g. "KERNEL32.dll") -> the function names imported by name."""
    exports: set[str] = field(default_factory=set)

    @property
    def bits(self) -> int:
        return 32 if self.machine == I386 else 64

    def imports_name(self, name: str) -> bool:
        return any(name in names for names in self.imports.values())

    def section_at(self, rva: int) -> Section | None:
        return next((s for s in self.sections if s.rva <= rva < s.rva + s.size), None)


def machine_name(machine: int | None) -> str:
    return MACHINES.get(machine, hex(machine)) if machine is not None else "unknown"


class _Reader:
    def __init__(self, buf, path: Path):
        self.buf, self.path = buf, path

    def unpack(self, fmt: str, off: int, what: str) -> tuple:
        n = struct.calcsize(fmt)
        if off < 0 or off + n > len(self.buf):
            raise PeError(f"is cut short: its {what} at offset {off:#x} is past the end ({len(self.buf)} bytes)")
        return struct.unpack_from(fmt, self.buf, off)

    def cstr(self, off: int, what: str, limit: int = 512) -> str:
        if off < 0 or off >= len(self.buf):
            raise PeError(f"is cut short: its {what} at offset {off:#x} is past the end")
        end = self.buf.find(b"\0", off, off + limit)
        if end < 0:
            raise PeError(f"has a {what} at offset {off:#x} with no end")
        return bytes(self.buf[off:end]).decode("latin-1")


def read_pe(path: str | Path) -> PeFile:
    """The PE facts of path; PeError (what is wrong) or OSError (cannot be read)."""
    path = Path(path)
    with open(path, "rb") as f:
        size = f.seek(0, 2)
        if size < 0x40:
            raise PeError("is not a PE file (no MZ header)")
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
            return _parse(_Reader(buf, path), size)


def _parse(r: _Reader, size: int) -> PeFile:
    if r.buf[:2] != b"MZ":
        raise PeError("is not a PE file (no MZ header)")
    (pe,) = r.unpack("<I", 0x3C, "PE header offset")
    if r.buf[pe:pe + 4] != b"PE\0\0":
        raise PeError("is not a PE file (no PE signature where its MZ header points)")
    machine, n_sec, _, _, _, opt_size, chars = r.unpack("<HHIIIHH", pe + 4, "COFF header")
    opt = pe + 24
    (magic,) = r.unpack("<H", opt, "optional header")
    if magic not in (0x10B, 0x20B):
        raise PeError(f"has an optional header of unknown kind {magic:#x}")
    wide = magic == 0x20B
    (image_size,) = r.unpack("<I", opt + 56, "optional header")
    (size_headers,) = r.unpack("<I", opt + 60, "optional header")
    n_dirs_at, dirs_at = (opt + 108, opt + 112) if wide else (opt + 92, opt + 96)
    (n_dirs,) = r.unpack("<I", n_dirs_at, "optional header")
    dirs = [r.unpack("<II", dirs_at + 8 * k, "data directories") for k in range(min(n_dirs, 2))]
    sections = []
    for k in range(n_sec):
        name, vsize, va, raw_size, raw_ptr, _, _, _, _, sch = r.unpack("<8sIIIIIIHHI", opt + opt_size + 40 * k,
                                                                        "section table")
        sections.append((Section(name.rstrip(b"\0").decode("latin-1"), va, max(vsize, raw_size),
                                 bool(sch & SCN_MEM_EXECUTE)), raw_ptr, raw_size))

    def offset(rva: int, what: str) -> int:
        if rva < size_headers:
            return rva
        for s, raw_ptr, raw_size in sections:
            if s.rva <= rva < s.rva + raw_size:
                return raw_ptr + rva - s.rva
        raise PeError(f"has its {what} at RVA {rva:#x}, outside its sections' data")

    out = PeFile(r.path, machine, bool(chars & 0x2000), image_size, [s for s, _, _ in sections])
    if len(dirs) > 0 and dirs[0][0]:
        at = offset(dirs[0][0], "export directory")
        n_names, _, names_rva = r.unpack("<III", at + 24, "export directory")  # names, functions' RVA, names' RVA
        if n_names:
            names_at = offset(names_rva, "export names")
            for k in range(min(n_names, MAX_IMPORTS)):
                (rva,) = r.unpack("<I", names_at + 4 * k, "export names")
                out.exports.add(r.cstr(offset(rva, "export name"), "export name"))
    if len(dirs) > 1 and dirs[1][0]:
        at, total = offset(dirs[1][0], "import directory"), 0
        thunk_fmt, ordinal_bit = ("<Q", 1 << 63) if wide else ("<I", 1 << 31)
        step = struct.calcsize(thunk_fmt)
        while True:
            oft, _, _, name_rva, ft = r.unpack("<IIIII", at, "import directory")
            if not (oft or name_rva or ft):
                break
            names = out.imports.setdefault(r.cstr(offset(name_rva, "imported DLL's name"), "imported DLL's name"), [])
            t = offset(oft, "import names") if oft else None
            while t is not None and total < MAX_IMPORTS:
                (v,) = r.unpack(thunk_fmt, t, "import names")
                if not v:
                    break
                if not v & ordinal_bit:
                    names.append(r.cstr(offset(v & 0x7FFFFFFF, "import name") + 2, "import name"))
                t += step
                total += 1
            at += 20
    return out
