"""Videos of evaluation games: a replay in the viewer's format rendered to frames and
encoded to mp4, which decodes back to frames of the expected size and count; the
maker's thread writes one per new replay, a game without a viewer makes none."""

from __future__ import annotations

import json

import numpy as np

from w3async.observe.replay_view import replay_view
from w3async.observe.video import VideoMaker, decode_frames, encode_mp4, frame_stride, newest_file, render_frames


def a_view(n_steps: int, w: int = 30, h: int = 20) -> dict:
    cells = [1 if (x == 0 or y == 0) else 0 for y in range(h) for x in range(w)]
    steps = [dict(step=k, units=[dict(id=1, type=0, owner=0, x=2 + k * 0.2, y=5, hp=10),
                                 dict(id=2, type=0, owner=1, x=25, y=15 - k * 0.1, hp=5)]) for k in range(n_steps)]
    return dict(map=dict(w=w, h=h, cells=cells), side=0, types=[dict(name="u", sight=4, hp=10)],
                owners=["agent", "ai"], orders=["idle"], meta={}, steps=steps)


def test_a_video_decodes_to_frames_of_the_expected_size_and_count(tmp_path):
    view = a_view(45)
    frames = render_frames(view, max_side_px=240)  # 30x20 cells at 8 px
    assert frames.shape == (45, 160, 240, 3) and frames.dtype == np.uint8
    assert (frames[0, 40, 16] == (40, 90, 230)).all()  # the agent's unit at cell (2, 5): 8 px a cell, its colour
    assert (frames[0, 40 + 4, 16] == (200, 200, 190)).all()  # beside it, a free cell
    assert (frames[0] != frames[-1]).any()  # the units moved
    path = encode_mp4(frames, tmp_path / "v.mp4", fps=10)
    back = decode_frames(path)
    assert back.shape == frames.shape
    assert np.abs(back.astype(int) - frames.astype(int)).mean() < 8  # lossy, but the same pictures


def test_a_long_replay_is_sampled_down_and_sizes_are_even():
    view = a_view(1250, w=31, h=17)
    assert frame_stride(1250, 600) == 3
    frames = render_frames(view, max_frames=600, max_side_px=31 * 3)
    assert frames.shape == (417, 52, 94, 3)  # ceil(1250 / 3) frames; 17*3=51 and 31*3=93 padded to even


def test_the_maker_writes_a_video_per_new_replay(tmp_path):
    replays = tmp_path / "replays"
    replays.mkdir()
    steps = [100]
    mk = VideoMaker(tmp_path, every_s=0.05, latest=lambda: newest_file(replays, (".json",)),
                    view=replay_view, step=lambda: steps[0])
    assert mk.make_one() is None  # no replay yet
    (replays / "a.json").write_text(json.dumps(a_view(12)))
    mk.start()
    try:
        for _ in range(200):
            if mk.made:
                break
            mk._stop.wait(0.05)
    finally:
        mk.stop()
    assert [p.name for p in mk.made] == ["eval-000000000100.mp4"], mk.errors
    assert decode_frames(mk.made[0]).shape[0] == 12
    assert mk.make_one() is None  # the same replay is not made again
    (replays / "bad.json").write_text("{}")
    import os
    os.utime(replays / "bad.json", (1e10, 1e10))
    assert mk.make_one() is None and "no 'map'" in mk.errors[-1]
