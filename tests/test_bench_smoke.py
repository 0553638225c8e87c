"""Every benchmark script imports and parses its arguments (`--help`): a move of the
package cannot leave `make bench` broken without a test saying so."""

from __future__ import annotations

import subprocess
import sys

import pytest

from .conftest import REPO

BENCHES = sorted(p.name for p in (REPO / "bench").glob("*.py"))


@pytest.mark.parametrize("script", BENCHES)
def test_bench_script_starts(script):
    r = subprocess.run([sys.executable, str(REPO / "bench" / script), "--help"], capture_output=True, text=True,
                       timeout=120, cwd=REPO)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "usage" in r.stdout.lower()
