"""The chaos script, briefly: SIGKILLed games, a SIGSTOPped one, a rogue game, then
SIGTERM; bench/chaos.py asserts the run kept stepping, logged every cause, trained on
nothing corrupt and left nothing behind."""

from __future__ import annotations

import shutil
import sys

from .conftest import REPO

sys.path.insert(0, str(REPO / "bench"))

import chaos  # noqa: E402


def test_chaos_briefly(null_native):
    r = chaos.chaos(seconds=18, kill_every=2.5, count=3, recover_s=5.0, seed=1, keep=False)
    try:
        fig = chaos.verify(r)
        assert fig["problems"] == []
        assert fig["sigkills"] >= 3 and fig["sigstops"] == 1 and fig["bad_rows"] >= 1
        assert fig["restart_causes"].get("crash", 0) >= 3 and fig["restart_causes"].get("hang", 0) == 1
        assert fig["updates"] >= 1
    finally:
        shutil.rmtree(r["work"], ignore_errors=True)
