"""TensorBoard event files of a run (runs/<run>/tb/): `tensorboard --logdir runs/` shows
the runs side by side.

`TbWriter` takes scalars and animations from any thread (a queue put, never a write) and
writes them on its own thread, "w3s-tensorboard", with torch's SummaryWriter (the
`tensorboard` package). Every tag's step is the run's agent steps (one axis for all, so
that one purge step covers every tag). A resumed run opens its writer with
`purge_step` = the checkpoint's agent steps: TensorBoard's reader then drops what the
killed run wrote beyond that checkpoint, and the curves continue with no step twice.

Animations (`animation`) are GIFs (made with Pillow, tensorboard's own dependency, by
observe/video.py) in an image summary, which TensorBoard's Images tab plays: what
SummaryWriter.add_video writes, without its moviepy dependency.
"""

from __future__ import annotations

import math
import queue
import threading
from pathlib import Path

TB_DIR = "tb"  # in the run folder
_CLOSE = object()


class TbWriter:
    """The run's TensorBoard writer: `scalars()` and `animation()` enqueue, the thread
    writes; `close()` writes what is queued, flushes and joins."""

    def __init__(self, run_dir: Path, purge_step: int | None = None, flush_s: float = 10.0):
        self.log_dir = Path(run_dir) / TB_DIR
        self.purge_step = purge_step
        self.written = 0  # values written (scalars and animations)
        self.error: str | None = None  # the writer's failure, when it failed (the run goes on)
        self._q: queue.SimpleQueue = queue.SimpleQueue()
        self._flush_s = flush_s
        self._thread = threading.Thread(target=self._run, name="w3s-tensorboard", daemon=True)
        self._thread.start()

    def scalars(self, step: int, values: dict[str, float | int | None]) -> None:
        """Finite values at `step` (None, non-numbers and non-finite ones are left out)."""
        vals = {}
        for k, v in values.items():
            try:
                f = float(v)
            except (TypeError, ValueError):  # None, or not a number: not plotted (never the caller's error)
                continue
            if math.isfinite(f):
                vals[k] = f
        if vals:
            self._q.put(("scalars", int(step), vals))

    def animation(self, tag: str, gif: bytes, height: int, width: int, step: int) -> None:
        """An animated GIF (observe/video.py's make_video), shown under `tag` in the Images tab."""
        self._q.put(("animation", int(step), (tag, gif, height, width)))

    def close(self) -> None:
        self._q.put(_CLOSE)
        self._thread.join()

    def _run(self) -> None:
        try:
            from torch.utils.tensorboard import SummaryWriter  # noqa: PLC0415 (the thread's own import)

            writer = SummaryWriter(str(self.log_dir), purge_step=self.purge_step, flush_secs=self._flush_s)
        except Exception as e:  # noqa: BLE001 (no TensorBoard: the run goes on, the cause kept)
            self.error = f"tensorboard writer in {self.log_dir} failed: {e!r}"
            while self._q.get() is not _CLOSE:
                pass
            return
        try:
            while (item := self._q.get()) is not _CLOSE:
                kind, step, data = item
                try:
                    if kind == "scalars":
                        for tag, v in data.items():
                            writer.add_scalar(tag, v, step)
                        self.written += len(data)
                    else:
                        writer._get_file_writer().add_summary(gif_summary(*data), step)
                        self.written += 1
                except Exception as e:  # noqa: BLE001 (one bad value must not end the writer)
                    self.error = f"tensorboard write of {kind} at step {step} failed: {e!r}"
        finally:
            writer.flush()
            writer.close()


def gif_summary(tag: str, gif: bytes, height: int, width: int):
    """An image Summary holding an animated GIF: what SummaryWriter.add_video writes."""
    from tensorboard.compat.proto.summary_pb2 import Summary  # noqa: PLC0415

    img = Summary.Image(height=height, width=width, colorspace=3, encoded_image_string=gif)
    return Summary(value=[Summary.Value(tag=tag, image=img)])
