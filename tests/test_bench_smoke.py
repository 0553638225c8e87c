"""Every benchmark script imports and parses its arguments (`--help`): a move of the
package cannot leave `make bench` broken without a test saying so."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import REPO

BENCHES = sorted(p.name for p in (REPO / "bench").glob("*.py"))


@pytest.mark.parametrize("script", BENCHES)
def test_bench_script_starts(script):
    r = subprocess.run([sys.executable, str(REPO / "bench" / script), "--help"], capture_output=True, text=True,
                       timeout=120, cwd=REPO)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "usage" in r.stdout.lower()


def test_training_curve_checks_issue_12s_figures():
    """bench/training_curve.py's checks on made-up results: easy reaches 85% (last 50) at
    game 50 and dips to 80% after; 3 of the 4 self-play games of the last 10 minutes drew;
    half of normal's wins came at the time limit (its decisive share)."""
    sys.path.insert(0, str(REPO / "bench"))
    try:
        import training_curve as tc
    finally:
        sys.path.pop(0)
    easy = [(i * 0.5, 1.0 if i % 10 else 0.0) for i in range(50)]  # 90% over the first 50
    easy += [(25 + i * 0.1, 0.0 if i < 5 else 1.0) for i in range(20)]  # 5 losses then wins
    easy = [(m, w, w) for m, w in easy]  # every win decisive
    normal = [(i * 0.3, 1.0 if i % 4 else 0.0, 1.0 if i % 4 in (1, 2) and i % 2 else 0.0) for i in range(120)]
    selfplay = [(5.0, "draw"), (30.0, "draw"), (31.0, "win"), (33.0, "draw"), (34.0, "draw")]
    c = tc.checks({"ai:easy": easy, "ai:normal": normal}, selfplay, t_max=35.0)
    assert c["last_100"]["ai:normal"] == (0.75, 100) and c["last_100"]["ai:easy"][1] == 70
    assert c["last_100_decisive"]["ai:normal"] == (0.25, 100) and c["last_100_decisive"]["ai:easy"][0] == c[
        "last_100"]["ai:easy"][0]
    assert c["easy_first_85"] == 24.5
    assert c["easy_lowest_after"] == 0.82  # 9 losses in the last 50 after the fifth new loss
    assert c["easy_lowest_at"] == 25.4 and c["easy_last_under_75"] is None
    assert c["selfplay_draws_last_10_min"] == (0.75, 4)
