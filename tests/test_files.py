"""w3async.files: a write is whole or absent, a failed one leaves no temporary file and
the old file untouched, with a typed error naming the file and the cause; discard
ignores only a missing file."""

from __future__ import annotations

import errno
import os

import pytest

from w3async.files import AtomicWriteError, atomic_write, atomic_write_text, discard


def test_atomic_write_replaces_whole(tmp_path):
    p = tmp_path / "f.txt"
    atomic_write_text(p, "one\n")
    atomic_write(p, lambda f: f.write(b"two\n"))
    assert p.read_text() == "two\n" and os.listdir(tmp_path) == ["f.txt"]


def test_a_write_that_fails_leaves_the_old_file_and_no_temporary(tmp_path):
    p = tmp_path / "f.txt"
    atomic_write_text(p, "old\n")

    def half_then_full_disk(f):
        f.write(b"half")
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    with pytest.raises(AtomicWriteError) as e:
        atomic_write(p, half_then_full_disk)
    assert e.value.path == str(p) and e.value.errno == errno.ENOSPC and "[ENOSPC]" in e.value.cause
    assert str(p) in str(e.value) and isinstance(e.value, OSError)
    assert p.read_text() == "old\n" and os.listdir(tmp_path) == ["f.txt"]

    with pytest.raises(ZeroDivisionError):  # not an OSError: propagates as it is, cleaned up all the same
        atomic_write(p, lambda f: 1 / 0)
    assert p.read_text() == "old\n" and os.listdir(tmp_path) == ["f.txt"]


def test_a_folder_that_is_not_there_is_a_typed_error(tmp_path):
    with pytest.raises(AtomicWriteError) as e:
        atomic_write_text(tmp_path / "no" / "f.txt", "x")
    assert e.value.errno == errno.ENOENT


def test_discard(tmp_path):
    p = tmp_path / "f"
    p.write_text("x")
    assert discard(p) is True and not p.exists()
    assert discard(p) is False
    d = tmp_path / "d"
    d.mkdir()
    with pytest.raises(OSError):  # a folder is not a file: only a missing file is ignored
        discard(d)
    assert discard(d, best_effort=True) is False and d.is_dir()
