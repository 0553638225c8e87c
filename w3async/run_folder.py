"""A run's folder (runs/<run>/): every file and folder a run writes, named once.

The supervisor, the learning side, the status views, the pre-flight checks and the
resume all reach the run's files through `RunFolder`'s properties; none spells a file
name of its own. Imports nothing of the package: every role may use it.
"""

from __future__ import annotations

from pathlib import Path


class RunFolder:
    """runs/<run>/: a property per file or folder in it."""

    LOGS = ("events.jsonl", "inference.jsonl", "learner.jsonl", "episodes.jsonl")
    """The run's JSON-lines logs (observe/logs.py writes them, observe/run_files.py reads them)."""
    FILES = ("run.lock", "events.jsonl", "recipe.json", "status.url", "inference.jsonl", "learner.jsonl",
             "episodes.jsonl", "threads.txt")
    """Every file a run writes in its top folder."""
    FOLDERS = ("games", "bells", "checkpoints", "league", "replays", "tb", "videos", "shader-cache")
    """Every folder a run writes in it."""

    def __init__(self, path: str | Path):
        self.path = Path(path)

    def __repr__(self) -> str:
        return f"RunFolder({str(self.path)!r})"

    @property
    def lock(self) -> Path:
        """run.lock: the live supervisor's flock and what a later run cleans up (runtime/runfolder.py)."""
        return self.path / "run.lock"

    @property
    def recipe(self) -> Path:
        """recipe.json: the recipe the run runs, as loaded (checked against on resume)."""
        return self.path / "recipe.json"

    @property
    def events(self) -> Path:
        return self.path / "events.jsonl"

    @property
    def inference_log(self) -> Path:
        return self.path / "inference.jsonl"

    @property
    def learner_log(self) -> Path:
        return self.path / "learner.jsonl"

    @property
    def episodes_log(self) -> Path:
        return self.path / "episodes.jsonl"

    @property
    def status_url(self) -> Path:
        """status.url: where the live status server listens, while it does."""
        return self.path / "status.url"

    @property
    def games(self) -> Path:
        """games/: one log per game slot (game_log)."""
        return self.path / "games"

    def game_log(self, slot: int) -> Path:
        return self.games / f"slot-{slot}.log"

    @property
    def shader_cache(self) -> Path:
        """shader-cache/slot-N/: a Windows game's Mesa shader cache with a display (runtime/wine.py)."""
        return self.path / "shader-cache"

    @property
    def bells(self) -> Path:
        """bells/: the Wine games' doorbell FIFOs."""
        return self.path / "bells"

    @property
    def checkpoints(self) -> Path:
        return self.path / "checkpoints"

    @property
    def league(self) -> Path:
        """league/: the league's snapshots (snap-*.pt)."""
        return self.path / "league"

    @property
    def replays(self) -> Path:
        """replays/: the evaluation games' recordings (a game's recipe points W3D_RECORD_DIR here)."""
        return self.path / "replays"

    @property
    def threads(self) -> Path:
        """threads.txt: every thread's stack, appended at each SIGUSR1 (runtime/stackdump.py)."""
        return self.path / "threads.txt"

    @property
    def tensorboard(self) -> Path:
        """tb/: TensorBoard event files of a learning run (observe/tensorboard.py)."""
        return self.path / "tb"

    @property
    def videos(self) -> Path:
        """videos/: the evaluation games rendered to mp4 (observe/video.py)."""
        return self.path / "videos"
