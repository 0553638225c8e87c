"""A Wine build's parts, found on disk: its loaders by bitness, their versions, the
folders of its Windows DLLs. wine.py keys its prefixes by them (WineInstall.key), and
preflight asks whether the build runs a game's bitness and finds an adapter's DLLs.

Debian's layout (Wine 8.0): /usr/bin/wine is a shell script that runs
/usr/lib/wine/wine (the 32-bit loader, from wine32) where it is installed and
/usr/lib/wine/wine64 otherwise; the DLLs are in /usr/lib/x86_64-linux-gnu/wine/x86_64-windows
and /usr/lib/i386-linux-gnu/wine/i386-windows. A build folder (Proton) has bin/wine and
bin/wine64 and lib/wine, lib64/wine.
"""

from __future__ import annotations

import functools
import hashlib
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from w3async.runtime.pe import PeError, read_pe


@dataclass(frozen=True)
class WineInstall:
    """What a Wine build can run: its loaders by bitness (ELF binaries, not a wrapper
    script), their versions, and the folders of its Windows DLLs by bitness."""

    loaders: dict  # bits (32, 64) -> path
    versions: dict  # bits -> `loader --version`
    pe_dirs: dict  # bits -> the folder of its i386-windows / x86_64-windows DLLs
    other: str = ""  # with no ELF loader found: the configured loader's real path (a script of the user's)

    def runs(self, bits: int) -> bool:
        """Whether this build can run a program of that bitness (its loader and DLLs)."""
        return bits in self.loaders and bits in self.pe_dirs

    @property
    def key(self) -> str:
        """The id of the build's prefixes: the loaders' versions and the architectures
        installed. Installing wine32 (or an upgrade) gives new prefixes; a prefix made by
        a 64-bit-only Wine cannot start a 32-bit program, nor is it remade in place (it
        fails with "could not load kernel32.dll, status c0000135")."""
        facts = sorted((b, self.versions.get(b, "")) for b in self.loaders) + sorted(("dlls", b) for b in self.pe_dirs)
        facts += [("other", self.other)] if self.other else []
        return hashlib.sha1(repr(facts).encode()).hexdigest()[:12]


_PE_ARCH = {64: "x86_64-windows", 32: "i386-windows"}
DEBIAN_LOADERS = "/usr/lib/wine"
_SYSTEM_LIBS = ("/usr/lib/x86_64-linux-gnu/wine", "/usr/lib/i386-linux-gnu/wine", "/usr/lib64/wine", "/usr/lib/wine",
                "/usr/lib32/wine", "/usr/local/lib/wine", "/usr/local/lib64/wine")


def _elf_bits(path: str) -> int | None:
    """32 or 64 for an ELF executable, None for anything else (Debian's `wine` is a
    shell script that picks /usr/lib/wine/wine or wine64)."""
    try:
        with open(path, "rb") as f:
            head = f.read(5)
    except OSError:
        return None
    return {1: 32, 2: 64}.get(head[4]) if head[:4] == b"\x7fELF" and len(head) == 5 else None


def _head(path: str) -> str:
    try:
        with open(path, "rb") as f:
            return f.read(4096).decode("latin-1")
    except OSError:
        return ""


@functools.lru_cache(maxsize=16)
def _version(path: str, mtime: float) -> str:
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30)
        return out.stdout.strip() or f"exit {out.returncode}"
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"no version ({e})"


def wine_install(wine: str, loader: str | None = None) -> WineInstall:
    """The loaders (named wine and wine64, next to the loader `wine` names, in a build
    folder's bin, or in /usr/lib/wine for Debian's wrapper script; never another
    build's: a loader of the user's own is the one that runs) and the Windows DLL folders of that Wine (the
    recipe's runtime.wine); empty where none."""
    w = wine
    dirs: list[Path] = []
    if os.path.isdir(w):
        dirs = [Path(w) / sub / "bin" for sub in ("files", "dist", ".")]
    else:
        found = loader or shutil.which(w) or (shutil.which("wine64") if w == "wine" else None)
        if found:
            dirs = [Path(found).parent, Path(os.path.realpath(found)).parent]
            if _elf_bits(found) is None and DEBIAN_LOADERS in _head(found):
                dirs.append(Path(DEBIAN_LOADERS))  # Debian's wrapper script: its loaders are there
    loaders: dict[int, str] = {}
    for d in dirs:
        for name in ("wine64", "wine"):
            p = str(d / name)
            bits = _elf_bits(p)
            if bits and bits not in loaders:
                loaders[bits] = p
    # A build folder's DLLs are its own; a system Wine's may also be in a multiarch folder.
    tops = {Path(q).parent.parent for p in loaders.values() for q in (p, os.path.realpath(p))}
    libs = [top / sub for top in sorted(tops) for sub in ("lib64/wine", "lib/wine", "lib32/wine")]
    if not os.path.isdir(w):
        libs += [Path(p) for p in _SYSTEM_LIBS]
    pe_dirs = {}
    for bits, arch in _PE_ARCH.items():
        hit = next((lib / arch for lib in libs if (lib / arch / "kernel32.dll").is_file()), None)
        if hit:
            pe_dirs[bits] = hit
    versions = {b: _version(p, os.path.getmtime(p)) for b, p in loaders.items()}
    other = "" if loaders or not dirs else os.path.realpath(w if os.path.isdir(w) else (loader or shutil.which(w) or w))
    return WineInstall(loaders=loaders, versions=versions, pe_dirs=pe_dirs, other=other)


@functools.lru_cache(maxsize=256)
def _exe_bits(path: str, mtime_ns: int) -> int | None:
    try:
        return read_pe(path).bits
    except (OSError, PeError):
        return None


def exe_bits(path: str | os.PathLike) -> int | None:
    """32 or 64 for a Windows program (by its PE header), None for anything else (a
    built-in such as wineboot, a file that is not there)."""
    try:
        return _exe_bits(str(path), os.stat(path).st_mtime_ns)
    except OSError:
        return None


def program_bits(binaries) -> tuple[int, ...]:
    """The bitnesses of the given Windows programs (a file that is not a readable PE
    file counts as 64-bit: preflight names it)."""
    bits = set()
    for b in binaries:
        try:
            bits.add(read_pe(b).bits)
        except (OSError, PeError):
            bits.add(64)
    return tuple(sorted(bits)) or (64,)
