"""Videos of evaluation games: a replay in the viewer's format (replay_view.py, what the
dashboard's viewer draws) rasterised into RGB frames and encoded to mp4 with PyAV (`av`,
FFmpeg in its wheel).

    render_frames(view)        -> (T, H, W, 3) uint8: the map, fog, units by owner, each
                                  frame's step and at the end the outcome written on it
    encode_mp4(frames, path)   -> H.264 (yuv420p) at `fps`, written whole or not at all
    make_video(replay, out)    -> both, and an animated GIF for TensorBoard
    VideoMaker                 -> its own thread, "w3s-video": every `every_s`, the newest
                                  evaluation replay -> runs/<run>/videos/ by a child process
                                  (make_video), and its GIF to TensorBoard (tensorboard.py)
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np

from w3async.pychild import python_child

VIDEO_DIR = "videos"  # in the run folder
VIDEO_NAME = re.compile(r"eval-\d{12}\.mp4")  # eval-<the run's agent steps>.mp4 (the status server serves only these)
MAX_FRAMES = 600  # a longer replay is sampled down to this many frames (every k-th step)
MAX_SIDE_PX = 480  # the frame's longer side at most this many pixels (cells at least 2 px)
FREE, BLOCKED, HIDDEN = (200, 200, 190), (60, 60, 70), 0.45  # HIDDEN: a fogged cell's brightness
OWNER_COLOURS = ((40, 90, 230), (220, 50, 40), (40, 170, 60), (200, 160, 20))  # the agent side first


def frame_stride(n_steps: int, max_frames: int = MAX_FRAMES) -> int:
    """Every k-th step becomes a frame so that at most max_frames are made."""
    return max(1, math.ceil(n_steps / max_frames))


def render_frames(view: dict, max_frames: int = MAX_FRAMES, max_side_px: int = MAX_SIDE_PX) -> np.ndarray:
    """The replay's steps (every frame_stride-th) as frames: (T, H, W, 3) uint8, H and W
    even (H.264's 4:2:0 needs them so). Cells are squares; a unit is a square of its
    owner's colour (the viewer's `side` first), its inner part dimmed by its lost hp."""
    m = view["map"]
    w, h = int(m["w"]), int(m["h"])
    px = max(2, max_side_px // max(w, h))
    cells = np.asarray(m.get("cells") or np.zeros(w * h), np.uint8).reshape(h, w)
    base = np.where(cells[..., None] == 0, np.array(FREE, np.uint8), np.array(BLOCKED, np.uint8))
    H, W = h * px + (h * px) % 2, w * px + (w * px) % 2
    side = view.get("side", 0)
    owners = list(range(len(view.get("owners") or [0, 1])))
    order = [side] + [o for o in owners if o != side]
    colour = {o: OWNER_COLOURS[i % len(OWNER_COLOURS)] for i, o in enumerate(order)}
    hp_max = [max(1.0, float(t.get("hp") or 1)) for t in view.get("types") or []]
    steps = view["steps"][:: frame_stride(len(view["steps"]), max_frames)]
    out = np.zeros((len(steps), H, W, 3), np.uint8)
    r = max(1, px // 2)
    for k, st in enumerate(steps):
        img = base.astype(np.float32)
        if st.get("fog") is not None:
            seen = np.asarray(st["fog"], np.float32).reshape(h, w)
            img *= (HIDDEN + (1 - HIDDEN) * seen)[..., None]
        frame = np.zeros((H, W, 3), np.uint8)
        frame[: h * px, : w * px] = np.repeat(np.repeat(img, px, 0), px, 1).astype(np.uint8)
        for u in st.get("units") or []:
            cx, cy = int(float(u["x"]) * px), int(float(u["y"]) * px)
            y0, y1, x0, x1 = max(0, cy - r), min(H, cy + r), max(0, cx - r), min(W, cx + r)
            frame[y0:y1, x0:x1] = colour.get(u.get("owner"), (255, 255, 255))
            t = u.get("type")
            if isinstance(t, int) and 0 <= t < len(hp_max) and u.get("hp") is not None:
                lost = 1.0 - min(1.0, max(0.0, float(u["hp"]) / hp_max[t]))
                if lost > 0 and r >= 2:
                    frame[y0 + 1:y1 - 1, x0 + 1:x1 - 1] = (np.array(frame[y0, x0], np.float32) * (1 - 0.6 * lost))
        out[k] = frame
    caption(out, steps, (view.get("meta") or {}).get("result"))
    return out


def caption(frames: np.ndarray, steps: list[dict], result: str | None) -> None:
    """In place, each frame's step in its top-left corner (white on black), and on the
    last tenth of the frames (the last one at least) the outcome the viewer's meta gives
    (`result`: "win", "loss", "draw" from the viewer's side), so a clip says where it is
    and how the game ended."""
    from PIL import Image, ImageDraw  # noqa: PLC0415 (tensorboard's dependency; only where a video is made)

    tail = len(steps) - max(1, len(steps) // 10)
    for k, st in enumerate(steps):
        text = f"step {st.get('step', k)}" + (f"  {result}" if result and k >= tail else "")
        img = Image.fromarray(frames[k])
        draw = ImageDraw.Draw(img)
        x0, y0, x1, y1 = draw.textbbox((2, 1), text)
        draw.rectangle((0, 0, x1 + 2, y1 + 2), fill=(0, 0, 0))
        draw.text((2, 1), text, fill=(255, 255, 255))
        frames[k] = np.asarray(img)


def encode_mp4(frames: np.ndarray, path: Path, fps: float = 10.0) -> Path:
    """frames (T, H, W, 3) uint8 with even H and W, as H.264 mp4 at `path` (written to a
    temporary name, then renamed: a reader sees the whole video or none)."""
    import av  # noqa: PLC0415 (only where a video is made)

    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp")
    t, h, w, _ = frames.shape
    with av.open(str(tmp), mode="w", format="mp4") as out:
        stream = out.add_stream("libx264", rate=int(round(fps)))
        stream.width, stream.height, stream.pix_fmt = w, h, "yuv420p"
        for f in frames:
            for packet in stream.encode(av.VideoFrame.from_ndarray(np.ascontiguousarray(f), format="rgb24")):
                out.mux(packet)
        for packet in stream.encode():
            out.mux(packet)
    os.replace(tmp, path)
    return path


def decode_frames(path: Path) -> np.ndarray:
    """A video's frames as (T, H, W, 3) uint8 (tests, and a check of what was written)."""
    import av  # noqa: PLC0415

    with av.open(str(path)) as f:
        return np.stack([fr.to_ndarray(format="rgb24") for fr in f.decode(video=0)])


GIF_FRAMES = 100  # TensorBoard's copy: at most this many frames (every k-th), as an animated GIF


def make_video(replay: Path, out: Path, game: str | None = None, gif: Path | None = None, fps: float = 10.0) -> dict:
    """The replay, converted by the game's viewer (replay_view), as an mp4 at `out` and,
    with `gif`, an animated GIF of at most GIF_FRAMES frames there; returns
    {frames, width, height} of the mp4."""
    from PIL import Image  # noqa: PLC0415 (tensorboard's dependency)

    from w3async.observe.replay_view import replay_view  # noqa: PLC0415

    frames = render_frames(replay_view(Path(replay), game))
    encode_mp4(frames, out, fps)
    if gif is not None:
        k = frame_stride(len(frames), GIF_FRAMES)
        images = [Image.fromarray(f) for f in frames[::k]]
        images[0].save(gif, format="GIF", save_all=True, append_images=images[1:], duration=int(1000 * k / fps), loop=0)
    return dict(frames=int(frames.shape[0]), height=int(frames.shape[1]), width=int(frames.shape[2]))


FIRST_POLL_S = 5.0  # until the first video: how often VideoMaker looks for a replay


class VideoMaker:
    """The first replay that `latest()` names as soon as there is one, then every
    `every_s` the newest (when it is new), made into
    runs/<run>/videos/eval-<step()>.mp4 by a child process (`python -m
    w3async.observe.video`, at nice 10: rendering and encoding take seconds of CPU, and in
    this process they would hold the GIL the event loop needs), and its GIF to `tb`.
    `made` lists the videos written, `errors` the failures (the run goes on: a video is a
    view of the run, never a part of it). Runs on its own thread; stop() ends a child
    still working."""

    def __init__(self, run_dir: Path, every_s: float, latest, step, game: str | None = None, tb=None,
                 on_video=None, fps: float = 10.0, timeout_s: float = 600.0):
        self.dir = Path(run_dir) / VIDEO_DIR
        self.every_s, self.latest, self.step, self.game, self.tb, self.fps = every_s, latest, step, game, tb, fps
        self.on_video = on_video  # called with (path, replay, {frames, width, height}) after each video
        self.timeout_s = timeout_s
        self.made: list[Path] = []
        self.errors: list[str] = []
        self._last: tuple | None = None
        self._proc: subprocess.Popen | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="w3s-video", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        proc = self._proc
        if proc is not None and proc.poll() is None:
            proc.kill()  # a video half made is not kept: encode_mp4 renames only a whole one
        if self._thread.is_alive():
            self._thread.join()

    def _run(self) -> None:
        # The first video as soon as there is a replay (a look every FIRST_POLL_S), then
        # one every every_s: a short run has one too.
        while not self._stop.wait(self.every_s if self.made else min(self.every_s, FIRST_POLL_S)):
            self.make_one()

    def make_one(self) -> Path | None:
        """The newest replay as a video, unless there is none or it was made already."""
        replay = self.latest()
        if replay is None:
            return None
        try:
            key = (str(replay), os.stat(replay).st_mtime_ns)
            if key == self._last:
                return None
            step = int(self.step())
            self.dir.mkdir(exist_ok=True)
            path, gif = self.dir / f"eval-{step:012d}.mp4", self.dir / f".eval-{step:012d}.gif"
            info = self._child(replay, path, gif)
        except Exception as e:  # noqa: BLE001 (any viewer's or encoder's failure: counted, named)
            self.errors.append(f"video of {replay} failed: {e}")
            return None
        self._last = key
        self.made.append(path)
        try:
            if self.tb is not None:
                self.tb.animation("eval/video", gif.read_bytes(), info["height"], info["width"], step)
        finally:
            gif.unlink(missing_ok=True)
        if self.on_video is not None:
            self.on_video(path, replay, info)
        return path

    def _child(self, replay: Path, path: Path, gif: Path) -> dict:
        cmd = python_child("w3async.observe.video", str(replay), str(path), "--gif", str(gif),
                           "--fps", str(self.fps), *(["--game", self.game] if self.game else []))
        if shutil.which("nice"):
            cmd = ["nice", "-n", "10"] + cmd
        if self._stop.is_set():
            raise RuntimeError("stopping")
        self._proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            out, err = self._proc.communicate(timeout=self.timeout_s)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.communicate()
            raise RuntimeError(f"took over {self.timeout_s:.0f} s (killed)") from None
        if self._proc.returncode != 0:
            lines = (err or "").strip().splitlines()
            raise RuntimeError(f"exit {self._proc.returncode}: {lines[-1] if lines else 'no message'}")
        return json.loads(out)


def newest_file(folder: Path, suffixes: tuple[str, ...]) -> Path | None:
    """The newest file in `folder` with one of `suffixes` (None when none). Games write a
    replay under another name (.part) and rename it: a listed one is whole. Symbolic
    links are passed over (one could lead out of the run folder)."""
    try:
        with os.scandir(folder) as it:
            entries = [(e.stat().st_mtime, e.path) for e in it
                       if e.name.endswith(suffixes) and e.is_file(follow_symlinks=False)]
    except OSError:
        return None
    return Path(max(entries)[1]) if entries else None


def main(argv: list[str] | None = None) -> int:
    """`python -m w3async.observe.video REPLAY OUT.mp4 [--game G] [--gif G.gif] [--fps F]`:
    VideoMaker's child; prints make_video's {frames, width, height} as JSON."""
    p = argparse.ArgumentParser(prog="python -m w3async.observe.video", description=main.__doc__.split("\n")[0])
    p.add_argument("replay")
    p.add_argument("out")
    p.add_argument("--game", default=None)
    p.add_argument("--gif", default=None)
    p.add_argument("--fps", type=float, default=10.0)
    a = p.parse_args(argv)
    print(json.dumps(make_video(Path(a.replay), Path(a.out), a.game, Path(a.gif) if a.gif else None, a.fps)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
