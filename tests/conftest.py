"""Shared fixtures: the built binaries, Wine and mingw gates, and a shared-memory leak check.

Tests that need Wine or mingw-w64 skip with the reason where those are missing, but
under CI=true they fail instead: CI installs both (.ci/run).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from w3async.sync.table import list_segments

# Segments made by this test session (and the runs it starts) carry its pid, so the leak
# check below never touches what another process on the machine made.
SHM_PREFIX = f"/w3a-t{os.getpid()}-"
os.environ["W3ASYNC_SHM_PREFIX"] = SHM_PREFIX

REPO = Path(__file__).resolve().parent.parent
BUILD = REPO / "build"
NULL_NATIVE = BUILD / "native" / "null_game"
NULL_EXE = BUILD / "win64" / "null_game.exe"
IN_CI = os.environ.get("CI", "").lower() == "true"


def need(what: str, ok: bool, how: str) -> None:
    """Skip (or, under CI=true, fail) when a system tool is missing."""
    if ok:
        return
    msg = f"{what} is missing: {how}"
    if IN_CI:
        pytest.fail(f"CI=true: {msg}", pytrace=False)
    pytest.skip(msg)


@pytest.fixture(scope="session")
def null_native() -> Path:
    if not NULL_NATIVE.exists():
        subprocess.run(["make", "-s", "build"], cwd=REPO, check=True)
    return NULL_NATIVE


@pytest.fixture(scope="session")
def mingw() -> str:
    cc = shutil.which("x86_64-w64-mingw32-gcc")
    need("x86_64-w64-mingw32-gcc", cc is not None, "apt-get install gcc-mingw-w64-x86-64")
    return cc


@pytest.fixture(scope="session")
def wine(mingw) -> str:
    w = shutil.which("wine") or shutil.which("wine64")
    need("wine", w is not None, "apt-get install wine64")
    if not NULL_EXE.exists():
        subprocess.run(["make", "-s", "build"], cwd=REPO, check=True)
    return w


@pytest.fixture(scope="session")
def mingw32() -> str:
    cc = shutil.which("i686-w64-mingw32-gcc")
    need("i686-w64-mingw32-gcc", cc is not None, "apt-get install gcc-mingw-w64-i686")
    return cc


@pytest.fixture(scope="session")
def wine32(wine, mingw32) -> str:
    """Wine that runs 32-bit programs (its 32-bit loader and i386 DLLs), and the i686 builds."""
    from w3async.runtime.wineinstall import wine_install

    need("32-bit Wine", wine_install("wine").runs(32),
         "dpkg --add-architecture i386; apt-get update; apt-get install wine32")
    if not (BUILD / "win32" / "duel_rt.exe").exists():
        subprocess.run(["make", "-s", "build"], cwd=REPO, check=True)
    return wine


@pytest.fixture(scope="session")
def null_exe(wine) -> Path:
    return NULL_EXE


@pytest.fixture(autouse=True, scope="session")
def no_leaked_segments():
    """The session leaves no segment of its own in /dev/shm."""
    yield
    leaked = set(list_segments(SHM_PREFIX))
    for name in leaked:
        os.unlink("/dev/shm/" + name[1:])
    assert not leaked, f"shared-memory segments left behind: {sorted(leaked)}"
