"""What TensorBoard and the evaluation videos cost (docs/learning.md, "TensorBoard and
videos"): the loop's side of a scalars() call (a queue put), the writer thread's time per
value, and a video's render and encode time and size for a duel replay of N steps.

    .venv/bin/python bench/board_costs.py [--steps 600]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np

from w3async.observe.tensorboard import TbWriter
from w3async.observe.video import encode_mp4, render_frames


def a_view(n_steps: int, w: int = 64, h: int = 64) -> dict:
    rng = np.random.default_rng(0)
    cells = (rng.random(w * h) < 0.15).astype(int).tolist()
    units = rng.random((40, 2)) * [w, h]
    steps = []
    for k in range(n_steps):
        units = np.clip(units + rng.normal(0, 0.3, units.shape), 0, [w - 1, h - 1])
        steps.append(dict(step=k, units=[dict(id=i, type=0, owner=i % 2, x=float(x), y=float(y), hp=5)
                                         for i, (x, y) in enumerate(units)]))
    return dict(map=dict(w=w, h=h, cells=cells), side=0, types=[dict(name="u", hp=10)], owners=["a", "b"], steps=steps)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=600)
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tb = TbWriter(Path(tmp))
        vals = {f"learner/x{i}": float(i) for i in range(14)}
        n = 2000
        t0 = time.perf_counter()
        for k in range(n):
            tb.scalars(k, vals)
        put = time.perf_counter() - t0
        tb.close()
        drained = time.perf_counter() - t0
        print(f"scalars(): {put / n * 1e6:.1f} us a call of {len(vals)} values on the caller's thread; "
              f"the writer: {drained / (n * len(vals)) * 1e6:.1f} us a value ({n * len(vals)} values, close included)")
        view = a_view(args.steps)
        t0 = time.perf_counter()
        frames = render_frames(view)
        t1 = time.perf_counter()
        path = encode_mp4(frames, Path(tmp) / "v.mp4")
        t2 = time.perf_counter()
        print(f"video of {args.steps} steps: {frames.shape[0]} frames {frames.shape[2]}x{frames.shape[1]}, "
              f"render {t1 - t0:.2f} s, encode {t2 - t1:.2f} s, {path.stat().st_size / 1024:.0f} KiB")


if __name__ == "__main__":
    main()
