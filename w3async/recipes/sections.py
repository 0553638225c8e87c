"""The recipe's schema: one pydantic dataclass per section (recipes/load.py loads them); the
learning sections ([network], [learner], [trajectories], [league]) are in recipes/learning.py.

Each key's type, bounds and single-value choices are its annotation; its docstring is
what the key means. recipes/load.py is the one way in: it reads the TOML, applies `--set`,
and turns pydantic's errors into messages naming the file, the key and the value.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Annotated, Any

from pydantic import BeforeValidator, Field
from pydantic.dataclasses import dataclass

from w3async import games
from w3async.recipes.checks import (
    CONFIG,
    YEAR_S,
    Bool,
    Device,
    Env,
    Writable,
    Float,
    Int,
    Name,
    Str,
    choice,
    game_groups,
    year_in,
)
from w3async.recipes.learning import LearnerConfig, LeagueConfig, NetConfig, TrajConfig
from w3async.recipes.spec import SpecSection

REPO_ROOT = Path(__file__).resolve().parents[2]
MAX_ROUND_PERIOD_MS = 60_000.0

_CHOICES = {
    ("games", "runtime"): ("native", "wine"),
    ("supervisor", "sandbox"): ("preferred", "required", "off"),
    ("games", "role"): ("train", "eval"),
    ("supervisor", "policy"): ("check", "random", "network"),
    ("supervisor", "gather"): ("c", "numpy"),
    ("", "game"): games.NAMES,  # the games registry, read at each check (a game registered later counts)
}


def _one_of(section: str, key: str) -> Any:
    return choice(lambda: _CHOICES[(section, key)])


@dataclass(config=CONFIG)
class InjectSection:
    """A Windows game not built for w3async ([games.inject], docs/hooking.md): the
    group's binary is the unmodified .exe; the launcher (w3inject.exe) loads the hook
    (w3hook.dll) and the adapter into it before its first instruction."""

    adapter: Str = ""
    """The adapter DLL (w3h.h): reads the game's state into rows, gives it the orders.
    A relative path is from the recipe file's folder (recipes.load.from_recipe_folder)."""
    args: list[Str] = Field(default_factory=list)
    """The game's command line. "{seed}" (new at every start), "{lane}" (the global
    number of the group's first lane in this process), "{slot}" and "{run_dir_windows}"
    are filled in."""
    cwd: Str = ""
    """The game's working folder ('': the .exe's folder; relative: from the recipe file's
    folder)."""
    step_point: Str = "Sleep"
    """Where a step happens (docs/hooking.md, "Finding the step point"): an imported call
    the game makes once a frame (Sleep, SleepEx, a timed wait, SwapBuffers, BitBlt,
    StretchDIBits; PeekMessageA/W: a busy loop, a step when the queue is drained and a
    frame ran; GetMessageA/W: a loop driven by messages and SetTimer, steps while the
    queue is empty); "export:NAME", a function the .exe exports, or "at:exe+0x1a2b"
    ("at:NAME": a name of addresses), an address in the game's code (a breakpoint at
    either); or "adapter": the adapter calls host->step from a hook of its own."""
    step_thread: Annotated[Str, choice(lambda: ("main", "first"))] = "main"
    """Which thread's step point calls are steps: the game's main thread, or the first
    thread to call the step point (a game whose frame runs on a thread of its own)."""
    step_ms: Int = Field(50, ge=1, le=3_600_000)
    """Game time a step advances the virtual clock by."""
    clock: Bool = True
    """The virtual clock: the game's time reads, sleeps and timed waits in game time."""
    draw: Bool = True
    """false: the draw calls in draw_calls return at once, drawing nothing."""
    draw_calls: list[Str] = Field(default_factory=lambda: ["BitBlt", "StretchBlt", "StretchDIBits", "SetDIBitsToDevice",
                                                           "SwapBuffers", "wglSwapBuffers"])
    """What draw = false turns off (docs/hooking.md lists the calls the hook knows)."""
    modules: list[Str] = Field(default_factory=list)
    """DLLs (loaded at the game's start) whose calls of the step point are steps too,
    besides the .exe's: a frame loop inside a DLL. Not needed for the clock: every
    module's imports are hooked (docs/hooking.md, "The hooks")."""
    addresses: Env = Field(default_factory=dict)
    """Names the adapter looks up (host->find_address): name = "module+0xoffset", the
    module "exe" or a DLL's name."""
    addresses_file: Str = ""
    """A TOML file of more such names (name = "module+0xoffset"), read at every start:
    offsets a tool found in the game, written by the build (e.g.
    build/win64/pong.addresses.toml, games/symbol_offsets.sh). A name in addresses
    wins. A relative path is from the recipe file's folder."""
    timeout_s: Float = Field(20.0, gt=0, le=3600)
    """How long loading each DLL into the game may take before the start fails."""
    step_deadline_s: Float = Field(10.0, ge=0, le=86400)
    """The game must reach its step point this long (wall time) after the hook is loaded,
    or it ends with exit 69 naming the step point: a step point the game imports but
    never calls fails in seconds, not after start_timeout_s. 0: no deadline (a game
    whose start-up, before its first frame, takes longer)."""
    epoch_s: Int | None = Field(None, ge=0, le=253_402_300_799)
    """The game's system time at attach, in unix seconds (W3H_EPOCH_S); unset: the real
    time. Set, the counters (QueryPerformanceCounter, GetTickCount) start at fixed values
    too (an hour of uptime), so a game that seeds itself from time(), a tick count or
    the counter gets the same seed in every run: what makes such a game's episodes
    repeat for the same seed and orders."""
    desktop: Annotated[Str, choice(lambda: ("own", "shared"))] = "own"
    """"own" (the default): each game on a Windows desktop of its own (named
    w3async-slot-N), so that games of one prefix never take the focus from each other (a
    game that pauses when it loses the focus keeps running); it costs ~0.1 s more a
    start (docs/hooking.md, "Windows and displays"). "shared": the prefix's desktop (the
    second game's window deactivates the first)."""


@dataclass(config=CONFIG)
class GameGroup:
    """A group of identical game processes ([[games]]; a recipe may mix groups)."""

    binary: Str = "build/native/null_game"
    """The game: a Linux executable, or a Windows .exe for runtime = "wine". A relative
    path is from the recipe file's folder (a recipe given as a table: the repository
    root); unset: the repository's null game."""
    runtime: Annotated[Str, _one_of("games", "runtime")] = "native"
    """"native" (eventfd doorbells) or "wine" (FIFO doorbells, the table through Z:)."""
    count: Int = Field(1, ge=1)
    """Processes in this group."""
    lanes: Int = Field(1, ge=1)
    """Lanes (whole games) per process."""
    sides: Int = Field(2, ge=1, le=2)
    """Agent sides per lane: rows per process = lanes * sides."""
    nice: Int = Field(10, ge=-20, le=19)
    """Nice level of the games, so the supervisor and the learner get the CPU first."""
    role: Annotated[Str, _one_of("games", "role")] = "train"
    """"train": the current policy's rows feed the learner; "eval": played by the current
    policy (against the built-in AI at fixed seeds), logged, never trained on."""
    env: Env = Field(default_factory=dict)
    """Extra environment for the game (strings). "{run_dir}" in a value becomes the run
    folder ("{run_dir_windows}": the same as a Z: path, for Wine games)."""
    inject: InjectSection | None = None
    """[games.inject]: start the binary, an unmodified Windows game, through the launcher
    with the hook and an adapter (runtime = "wine" only)."""
    network: Bool = False
    """The games may use the network (in a sandbox: a network namespace of their own
    otherwise, with no interface but loopback: docs/security.md)."""
    writable: list[Writable] = Field(default_factory=list)
    """Folders the games may write in their sandbox besides their own doorbells ("{run_dir}"
    becomes the run folder). A folder named by an env value that starts with "{run_dir}"
    or "{run_dir_windows}" (W3D_RECORD_DIR = "{run_dir}/replays"), or that is the
    absolute path of an existing folder, is writable without being listed here."""
    max_rss_mb: Float = Field(0.0, ge=0, le=2**24)
    """A game's memory cap: over this many MiB of RSS (its processes together, sampled
    every supervisor.accounting_s) it is recycled, cause `memory`, counted in the restart
    budget like a crash. Where a cgroup can be made (docs/security.md, "Limits") the
    kernel holds the cap too, at once, counting what the game writes to its tmpfs. 0: no
    cap."""
    max_disk_mb: Float = Field(0.0, ge=0, le=2**30)
    """What the group's writable folders (its `writable` list and the run-folder folders
    its env values name, e.g. replays) may hold together, in MiB, checked every 2 s: over
    it, the group's games are ended and their slots failed, cause `disk`, and the run
    goes on without them (docs/security.md, "Limits"). 0: no cap of its own (the
    supervisor's disk_reserve_mb still holds)."""
    host: Str = ""
    """Where the group's games run: "" on this machine; a name: on a game host of the
    [cluster], on the Ray node that offers the resource of that name (docs/cluster.md)."""


@dataclass(config=CONFIG)
class RuntimeSection:
    """Wine settings ([runtime]); unused by native groups."""

    wine: Str = "wine"
    """The Wine loader, or a Proton build folder (see runtime_wine.WineConfig)."""
    cache_dir: Str = ""
    """Where Wine prefixes live ('' : $W3ASYNC_CACHE or ~/.cache/w3async)."""
    fsync: Bool = False
    """WINEFSYNC (Proton only: nothing on stock Wine)."""
    esync: Bool = False
    """WINEESYNC (Proton/staging only: nothing on stock Wine)."""
    display: Annotated[Str, choice(lambda: ("null", "xvfb"))] = "null"
    """How Windows games draw: "null", Wine's null graphics driver (windows are made,
    nothing is shown, no X server needed); "xvfb", a virtual X server (Xvfb) the
    supervisor starts for the run on a free display, with Wine's x11 driver: for a game
    that needs real drawing (reading its own pixels back, OpenGL)."""
    prefix: Annotated[Str, choice(lambda: ("shared", "per-game"))] = "shared"
    """"shared": one prefix (and wineserver) for the run's Windows games; "per-game": a
    prefix and wineserver for each game slot, so that no Windows game reaches another
    through Wine's named objects, pipes, windows or process handles (docs/security.md),
    at the cost of a prefix's start each (and, the first time, its boot)."""


@dataclass(config=CONFIG)
class SupervisorSection:
    """How the supervisor answers and watches ([supervisor])."""

    policy: Annotated[Str, _one_of("supervisor", "policy")] = "check"
    """"check" (the null game's checkable answers), "random" (uniform under the masks)
    or "network" (the learner's policy)."""
    gather: Annotated[Str, _one_of("supervisor", "gather")] = "c"
    """Row checks and gathers in "c" (csrc/rows.c) or "numpy" (the reference path)."""
    round_period_ms: Float = Field(0.0, ge=0, le=MAX_ROUND_PERIOD_MS)
    """At most one round every this many ms: bigger rounds, a little more latency (at
    least one round a minute)."""
    hang_timeout_s: Float = Field(30.0, gt=0, le=YEAR_S)
    """A game that posts nothing for this long after its rows were answered is hung."""
    start_timeout_s: Float = Field(60.0, gt=0, le=YEAR_S)
    """Time a (re)started game has to post its first rows (Wine needs a few seconds)."""
    stop_timeout_s: Float = Field(3.0, gt=0, le=YEAR_S)
    """On shutdown, how long games get to exit by themselves before SIGTERM, then SIGKILL."""
    max_start_failures: Int = Field(3, ge=1)
    """A slot whose game fails this many starts in a row is marked failed: starts that
    end before their first post, or that end the same way (cause and exit code or
    signal) each within min_uptime_s of their start."""
    backoff_s: Float = Field(0.5, gt=0, le=YEAR_S)
    """First restart delay of a slot; doubles per failure in a row, capped below."""
    backoff_max_s: Float = Field(10.0, gt=0, le=YEAR_S)
    """Cap on a slot's restart delay."""
    restart_budget: Int = Field(20, ge=0)
    """Restarts a slot may need within restart_window_s (exits of every kind, hangs, bad
    rows, an exit 0 before the first post; not a recycle: an exit 0 after a post) before
    it is marked failed."""
    restart_window_s: Float = Field(60.0, ge=0, le=YEAR_S)
    """The window of the restart budget."""
    min_uptime_s: Float = Field(2.0, ge=0, le=YEAR_S)
    """A start that posted and lived this long is healthy: a failure after it backs off
    from backoff_s again. (An exit 0 after a post, a recycle, restarts at once whatever
    the uptime.)"""
    game_log_mb: Float = Field(64.0, gt=0, le=2**20)
    """A game's log (games/slot-N.log, its stdout and stderr) is cut to its last 64 KiB
    when it passes this many MiB (checked twice a second): a game that prints without end
    never fills the disk."""
    game_file_mb: Float = Field(0.0, ge=0, le=2**20)
    """The largest file a game start may write, its log included (RLIMIT_FSIZE, held by
    the kernel at each write): a write past it fails and the game gets SIGXFSZ (recycled,
    cause `file_size`). So a burst of output stops here, between two of the watch's
    looks at the log. 0: twice game_log_mb; else more than game_log_mb."""
    sandbox: Annotated[Str, _one_of("supervisor", "sandbox")] = "preferred"
    """Each game start in a bubblewrap sandbox (docs/security.md): "preferred" where bwrap
    works here (a `sandbox_off` warning event where not), "required" (preflight refuses a
    machine without it), "off"."""
    game_tmpfs_mb: Float = Field(64.0, gt=0, le=2**20)
    """The size of each private tmpfs a sandbox gives a game (/dev/shm, /tmp, /run,
    /var/tmp): what a game writes there is memory (docs/security.md)."""
    game_max_procs: Int = Field(1024, ge=8, le=2**22)
    """Tasks (processes and threads) a game start may have at once, its helpers
    included, in a cgroup of its own where the machine allows one (docs/security.md,
    "Limits"): a fork bomb is refused, and the game recycled, cause `processes`."""
    disk_reserve_mb: Float = Field(128.0, ge=0, le=2**30)
    """Free space kept for the run's checkpoints and logs on the file system of any
    folder a game group may write: below it (checked every 2 s), the games of the groups
    writing there are ended and their slots failed, cause `disk`, and the run goes on, its
    checkpoints saved (before: an evaluation game that filled the disk with replays
    stopped the run at its next checkpoint). 0: none."""
    game_oom_score_adj: Int = Field(1000, ge=0, le=1000)
    """Added to every game process's OOM score: when memory runs out, the kernel ends a
    game (recycled, cause `crash`) before the supervisor and its learner."""
    progress_s: Float = Field(5.0, ge=0, le=YEAR_S)
    """Seconds between console progress lines (0: none)."""
    accounting_s: Float = Field(2.0, ge=0, le=3600)
    """Seconds between samples of every game's, Wine's and the supervisor's CPU and memory
    from /proc (observe/accounting.py, on a thread of its own; 0: none)."""
    accounting_event_s: Float = Field(60.0, ge=0, le=YEAR_S)
    """Seconds between `accounting` events in events.jsonl (0: none)."""

    def __post_init__(self) -> None:
        if self.game_file_mb and self.game_file_mb <= self.game_log_mb:
            raise ValueError(f"game_file_mb={self.game_file_mb:g} must be more than game_log_mb="
                             f"{self.game_log_mb:g} (a log reaching it ends its game before the cut), or 0 "
                             f"(twice game_log_mb)")

    @property
    def file_cap_mb(self) -> float:
        """The file size cap a game start gets (game_file_mb, or twice game_log_mb)."""
        return self.game_file_mb or 2 * self.game_log_mb


@dataclass(config=CONFIG)
class InferenceSection:
    """The inference rounds' compute ([inference])."""

    device: Device = "cpu"
    """"cpu", or "cuda" (streams and graphs; only where torch sees a GPU)."""
    num_threads: Int = Field(1, ge=1)
    """torch threads of the inference worker (on 2 cores: 1, and 1 for the learner)."""
    n_nets: Int = Field(3, ge=1)
    """Networks held: net 0 the current policy, the rest past snapshots (league)."""
    seed: Int = Field(0, ge=0)
    """Seeds the networks' initial weights and the action sampling."""


@dataclass(config=CONFIG)
class CheckpointSection:
    """Checkpoints ([checkpoint]): atomic, with a `latest` pointer; a run resumes from one."""

    every_updates: Int = Field(10, ge=1)
    """A checkpoint every this many learner updates (and one at the end of the run)."""
    keep: Int = Field(3, ge=1)
    """Checkpoints kept on disk (the newest)."""
    fallback: Bool = False
    """false: a resume whose latest checkpoint fails its checks (digest, format, weights
    that are not finite, a league snapshot it names) is refused, naming the file. true:
    the newest older checkpoint that passes is used instead; each one passed over is
    named on the console and in events.jsonl's `resume` record (refused)."""


@dataclass(config=CONFIG)
class EvaluationSection:
    """Evaluation against the built-in AI ([evaluation])."""

    window: Int = Field(50, ge=1)
    """Win rates are over each level's last `window` evaluation episodes."""
    greedy: Bool = False
    """true: the evaluation groups' rows are answered by each head's most likely choice
    under the masks (the current policy's argmax, as `w3async eval --greedy`), not a
    sample: the policy's result without its exploration. false: sampled, as in training."""
    video_minutes: Float = Field(10.0, ge=0, le=year_in("minutes"))
    """The first evaluation replay of a learning run as a video as soon as it exists, then
    every this many minutes the latest, in runs/<run>/videos/ and TensorBoard
    (observe/video.py); 0: none."""


@dataclass(config=CONFIG)
class StatusSection:
    """The status server ([status]): /status, /metrics, /games and the dashboard."""

    enabled: Bool = True
    """Serve the run's state while it runs."""
    tensorboard: Bool = True
    """A learning run writes TensorBoard event files to runs/<run>/tb/ (observe/tensorboard.py)."""
    host: Str = "127.0.0.1"
    """Address to listen on (loopback by default: the page changes nothing, but it is yours)."""
    port: Int = Field(0, ge=0, le=65535)
    """Port; 0 picks a free one. The URL is printed and left in runs/<run>/status.url.
    A port in use is a clear error at start."""


@dataclass(config=CONFIG)
class ClusterSection:
    """Game hosts on other machines through Ray ([cluster], docs/cluster.md). Groups
    with `host` set run there, the rest here; inference, the learner, the logs and the
    status stay here. Without this section nothing of Ray is imported."""

    address: Str = ""
    """The Ray cluster to join: "auto" (the one this machine is a node of), or its
    address ("HOST:PORT"). "" with local_nodes: a cluster simulated on this machine."""
    local_nodes: Int = Field(0, ge=0, le=8)
    """A cluster simulated on this machine, for tests and demos: a head and this many
    nodes, node i offering the resource "node<i>" (host = "node1", ...)."""
    lost_after_s: Float = Field(30.0, gt=0, le=3600)
    """A game host that is not polled by this process this long stops its games."""
    host_restarts: Int = Field(3, ge=0, le=1000)
    """How often Ray restarts a game host that died (its games' open episodes are cut);
    one more death ends the run with the cause."""


@dataclass(config=CONFIG)
class StopSection:
    """When the run ends by itself ([stop]); 0 means no limit."""

    steps: Int = Field(0, ge=0)
    """Agent steps (rows answered)."""
    updates: Int = Field(0, ge=0)
    """Learner updates."""
    seconds: Float = Field(0.0, ge=0, le=YEAR_S)
    """Wall-clock seconds."""
    minutes: Float = Field(0.0, ge=0, le=year_in("minutes"))
    """Wall-clock minutes (with seconds also set, the sooner limit wins)."""

    # The stop rule, read in one place each: agent steps where rows are answered
    # (RunControl), updates where the learner makes them (learner_thread.py), the
    # wall-clock limit where the supervisor waits for the stop (Recipe.stop_after_s).
    def steps_reached(self, steps: int) -> bool:
        return bool(self.steps) and steps >= self.steps

    def updates_reached(self, updates: int) -> bool:
        return bool(self.updates) and updates >= self.updates


@dataclass(config=CONFIG)
class Recipe:
    """A recipe: its top-level keys, its sections, the file it was read from."""

    name: Name = "unnamed"
    """The run's name: it starts the run folder's name (no '/')."""
    game: Annotated[Str, _one_of("", "game")] = "null"
    """The game spec: a name in the games registry (w3async.games: "null", "duel", ...),
    or the name of the game the recipe's [spec] declares."""
    games: Annotated[list[GameGroup], BeforeValidator(game_groups)] = Field(default_factory=lambda: [GameGroup()])
    runtime: RuntimeSection = Field(default_factory=RuntimeSection)
    supervisor: SupervisorSection = Field(default_factory=SupervisorSection)
    stop: StopSection = Field(default_factory=StopSection)
    inference: InferenceSection = Field(default_factory=InferenceSection)
    checkpoint: CheckpointSection = Field(default_factory=CheckpointSection)
    evaluation: EvaluationSection = Field(default_factory=EvaluationSection)
    status: StatusSection = Field(default_factory=StatusSection)
    cluster: ClusterSection | None = None
    """[cluster]: game groups on other machines (None: every game runs here)."""
    spec: SpecSection | None = None
    """[spec] or spec = "FILE.toml": the recipe's own game, declared under `game`
    (recipes/spec.py, docs/games.md); None: `game` names a registered game."""
    network: NetConfig = Field(default_factory=NetConfig)
    """[network]: the policy's size."""
    learner: LearnerConfig = Field(default_factory=LearnerConfig)
    """[learner]: PPO's hyper-parameters and pacing."""
    trajectories: TrajConfig = Field(default_factory=TrajConfig)
    """[trajectories]: sequence length, batch, queue."""
    league: LeagueConfig = Field(default_factory=LeagueConfig)
    """[league]: snapshots and opponents."""
    path: str = dataclasses.field(default="", init=False)
    """Where the recipe was read from (set by load_recipe; not a key of the file)."""

    @property
    def stop_after_s(self) -> float:
        """The wall-clock limit: the sooner of seconds and minutes that are set (0: none)."""
        limits = [x for x in (self.stop.seconds, 60.0 * self.stop.minutes) if x > 0]
        return min(limits) if limits else 0.0

    def binary_path(self, group: GameGroup) -> Path:
        p = Path(group.binary)
        return p if p.is_absolute() else REPO_ROOT / p
