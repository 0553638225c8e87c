"""Videos of evaluation games: a replay in the viewer's format rendered to frames and
encoded to mp4, which decodes back to frames of the expected size and count; the
maker's thread writes one per new replay, a game without a viewer makes none."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

import numpy as np

from w3async.observe.replay_view import replay_view
from tests.conftest import REPO
from tests.learn.test_evaluate import duel_bin, duel_recipe  # noqa: F401 (duel_bin: a fixture)
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


def test_each_frame_says_its_step_and_the_last_ones_the_outcome():
    """The caption: a frame's step top-left, and the viewer's result on the last tenth of
    the frames; the picture below the caption is untouched."""
    plain = a_view(20)
    won = dict(plain, meta={"result": "win"})
    a, b = render_frames(plain, max_side_px=240), render_frames(won, max_side_px=240)
    corner = a[:, :14, :60].astype(int).sum(-1)
    assert ((corner > 600).sum((1, 2)) > 10).all() and ((corner == 0).sum((1, 2)) > 100).all()  # white on black
    assert (a[3, :14] != a[4, :14]).any()  # "step 3", "step 4"
    assert (a[:, 20:] == b[:, 20:]).all()  # below the caption: the same picture
    assert (a[:18] == b[:18]).all() and (a[18:] != b[18:]).any()  # the result on the last 2 of 20 frames


def test_a_long_replay_is_sampled_down_and_sizes_are_even():
    view = a_view(1250, w=31, h=17)
    assert frame_stride(1250, 600) == 3
    frames = render_frames(view, max_frames=600, max_side_px=31 * 3)
    assert frames.shape == (417, 52, 94, 3)  # ceil(1250 / 3) frames; 17*3=51 and 31*3=93 padded to even


def wait_for_a_video(mk: VideoMaker) -> None:
    """Until the started maker has made a video (at most 30 s), then stop it."""
    try:
        for _ in range(600):
            if mk.made:
                break
            mk._stop.wait(0.05)
    finally:
        mk.stop()


def test_the_maker_writes_a_video_per_new_replay(tmp_path):
    replays = tmp_path / "replays"
    replays.mkdir()
    steps = [100]
    mk = VideoMaker(tmp_path, every_s=0.05, latest=lambda: newest_file(replays, (".json",)), step=lambda: steps[0])
    assert mk.make_one() is None  # no replay yet
    (replays / "a.json").write_text(json.dumps(a_view(12)))
    mk.start()
    wait_for_a_video(mk)
    assert [p.name for p in mk.made] == ["eval-000000000100.mp4"], mk.errors
    assert decode_frames(mk.made[0]).shape[0] == 12
    assert mk.make_one() is None  # the same replay is not made again
    (replays / "bad.json").write_text("{}")
    os.utime(replays / "bad.json", (1e10, 1e10))  # the newest
    mk = VideoMaker(tmp_path, every_s=60, latest=lambda: newest_file(replays, (".json",)), step=lambda: 200)
    assert mk.make_one() is None and "no 'map'" in mk.errors[-1], mk.errors  # the child's last line, named


def test_the_first_video_comes_with_the_first_replay_not_after_every_s(tmp_path, monkeypatch):
    """A run's first video is made once a replay exists (a look every FIRST_POLL_S), not
    after video_minutes: a run shorter than that has one too."""
    from w3async.observe import video

    monkeypatch.setattr(video, "FIRST_POLL_S", 0.05)
    replays = tmp_path / "replays"
    replays.mkdir()
    mk = VideoMaker(tmp_path, every_s=3600, latest=lambda: newest_file(replays, (".json",)), step=lambda: 7)
    mk.start()
    mk._stop.wait(0.3)
    assert not mk.made  # no replay yet: nothing, and the maker keeps looking
    (replays / "a.json").write_text(json.dumps(a_view(6)))
    wait_for_a_video(mk)
    assert [p.name for p in mk.made] == ["eval-000000000007.mp4"], mk.errors


def test_a_duel_learning_run_makes_videos_and_counts_discarded_orders(tmp_path, duel_bin):  # noqa: F811
    """A short learning run on the duel, its eval game recording every replay, a video every
    1.2 s: videos/ holds mp4s of the viewer's frames, events.jsonl a `video` line each, and
    TensorBoard the eval/video animation; episodes.jsonl counts each game's discarded orders."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from w3async.observe.tensorboard import TB_DIR
    from w3async.observe.video import VIDEO_DIR

    from tests.runtime.test_supervisor import events
    from tests.learn.test_training import lines, run

    env = {"W3D_REWARD": "attack", "W3D_TIME_LIMIT": "400"}
    data = duel_recipe()
    data["games"] = [
        {"binary": str(REPO / "build/native/duel"), "count": 1, "lanes": 2, "sides": 1, "nice": 0,
         "env": dict(env, W3D_SIDES="agent,ai:easy")},
        {"binary": str(REPO / "build/native/duel"), "count": 1, "lanes": 1, "sides": 1, "nice": 0, "role": "eval",
         "env": dict(env, W3D_SIDES="agent,ai:easy", W3D_SEED="9001", W3D_RECORD_DIR="{run_dir}/replays",
                     W3D_RECORD_SHARE="1", W3D_RECORD_STATES="1")}]
    data.update(trajectories={"seq_len": 8, "seqs_per_batch": 8}, stop={"seconds": 12},
                evaluation={"video_minutes": 0.02}, learner={"num_threads": 1})
    run_dir = tmp_path / "run"
    asyncio.run(run(data, run_dir))
    made = [e for e in events(run_dir) if e["event"] == "video"]
    assert made, [e["event"] for e in events(run_dir)]
    for e in made:
        frames = decode_frames(Path(e["path"]))
        assert frames.shape == (e["frames"], e["height"], e["width"], 3), (frames.shape, e)
        assert Path(e["path"]).parent == run_dir / VIDEO_DIR
    replay = Path(made[-1]["replay"])
    assert frames.shape[1:] == render_frames(replay_view(replay, "duel")).shape[1:]
    acc = EventAccumulator(str(run_dir / TB_DIR), size_guidance={"images": 0})
    acc.Reload()
    assert len(acc.Images("eval/video")) == len(made)
    eps = lines(run_dir / "episodes.jsonl", "episode")
    assert eps and all(isinstance(x["discarded"], int) and x["discarded"] >= 0 for x in eps)
