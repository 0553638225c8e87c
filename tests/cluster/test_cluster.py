"""Game hosts through Ray ([cluster], w3async/cluster/): what crosses the wire comes back
the same; without [cluster] nothing of Ray is imported; on a cluster simulated on this
machine (a head and two nodes), null games on both nodes are answered and checked, a
host killed mid-run comes back while the other never stops, a host that stops answering
for a while has its games started again, and SIGTERM leaves nothing on any node. Ray is the package's `cluster` extra (make test installs it); without it
these tests skip, and under CI=true they fail."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest

from w3async.cluster import wire
from w3async.runtime.procs import alive, mentioning
from w3async.sync import layout
from w3async.sync.gather import Batch
from w3async.sync.table import list_segments

from tests.conftest import REPO, need
from tests.runtime.test_supervisor import check_failures, events


def _ray_installed() -> bool:
    return importlib.util.find_spec("ray") is not None


def _random_batch(n: int, bucket: int, rng: np.random.Generator) -> Batch:
    b = Batch(64)
    b.n, b.bucket = n, bucket
    for name in ("obs_seq", "lane", "side", "episode", "step", "flags", "state_hash", "discarded"):
        a = getattr(b, name)
        a[:n] = rng.integers(0, 200, n)
    b.rows[:n] = rng.permutation(64)[:n]
    b.reward[:n] = rng.normal(size=n)
    b.n_ent[:n] = rng.integers(0, bucket + 1, n)
    b.glob[:n] = rng.normal(size=(n, layout.G_GLOB))
    ent, types = b.ent, b.ent_type
    for i in range(n):  # as a gather leaves them: zero past each row's n_ent
        k = int(b.n_ent[i])
        ent[i, :k] = rng.normal(size=(k, layout.F_ENT))
        types[i, :k] = rng.integers(0, 9, k)
    b.mask[:n] = rng.integers(0, 2, (n, layout.N_HEADS, layout.HEAD_MAX))
    return b


def test_a_round_crosses_the_wire_unchanged():
    rng = np.random.default_rng(5)
    for n, bucket in ((1, 32), (17, 48), (64, 160)):
        b = _random_batch(n, bucket, rng)
        gen = rng.integers(0, 5, n).astype(np.uint32)
        msg = wire.pack(b, gen)
        got = wire.unpack(msg, Batch(200), row_offset=100)
        assert got.n == n and got.bucket == bucket and (msg.gen == gen).all()
        assert (got.rows[:n] == b.rows[:n] + 100).all()
        for name in ("obs_seq", "lane", "side", "episode", "step", "flags", "reward", "n_ent", "state_hash",
                     "discarded", "glob", "mask"):
            assert (getattr(got, name)[:n] == getattr(b, name)[:n]).all(), name
        assert (got.ent == b.ent).all() and (got.ent_type == b.ent_type).all()
        full = n * (bucket * (layout.F_ENT * 4 + 2) + layout.N_HEADS * layout.HEAD_MAX + layout.G_GLOB * 4)
        assert wire.nbytes(msg) < full  # entities to the largest n_ent, masks as bits


def test_a_round_too_large_for_the_centre_is_refused():
    b = _random_batch(40, 32, np.random.default_rng(1))
    with pytest.raises(ValueError, match="40 rows, the centre's buffer holds 8"):
        wire.unpack(wire.pack(b, np.zeros(40, np.uint32)), Batch(8), 0)


def test_no_ray_import_without_a_cluster_section(tmp_path, null_native):
    """A single-host run (games, rounds, shutdown) never imports Ray."""
    code = f"""
import asyncio, sys
from w3async.recipes import recipe_from_dict
from w3async.compose import supervisor
r = recipe_from_dict({{"name": "t", "game": "null", "games": [{{"binary": {str(null_native)!r}, "count": 2}}],
                      "supervisor": {{"policy": "check"}}, "stop": {{"steps": 3000}}}})
asyncio.run(supervisor(r, {str(tmp_path / "run")!r}).run())
print("ray imported:", [m for m in sys.modules if m == "ray" or m.startswith("ray.")][:3])
"""
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "ray imported: []" in out.stdout


def _cluster_recipe(path: Path, null_native: Path, seconds: float, extra: str = "") -> Path:
    path.write_text(f"""
name = "cl"
game = "null"
[[games]]
binary = "{null_native}"
count = 2
lanes = 2
host = "node1"
env = {{ W3N_CHECK = "1", W3N_EPISODE_STEPS = "100" }}
[[games]]
binary = "{null_native}"
count = 2
lanes = 2
host = "node2"
env = {{ W3N_CHECK = "1", W3N_EPISODE_STEPS = "100" }}
[supervisor]
policy = "check"
progress_s = 0
[cluster]
local_nodes = 2
{extra}
[stop]
seconds = {seconds}
""")
    return path


def _status(run_dir: Path) -> dict | None:
    try:
        url = (run_dir / "status.url").read_text().strip()
        with urllib.request.urlopen(url.rstrip("/") + "/status", timeout=5) as r:
            return json.loads(r.read())
    except (OSError, ValueError):
        return None


def _wait(what: str, fn, timeout: float, proc: subprocess.Popen):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = fn()
        if v:
            return v
        if proc.poll() is not None:
            raise AssertionError(f"the run ended (exit {proc.returncode}) while waiting for {what}")
        time.sleep(0.25)
    raise AssertionError(f"timed out waiting for {what}")


def _hosts(run_dir: Path) -> dict:
    st = _status(run_dir) or {}
    return {h["name"]: h for h in st.get("hosts") or []}


def _descendants(pid: int) -> set[int]:
    parent = {}
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                with open(f"/proc/{p}/stat") as f:
                    parent[int(p)] = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                pass
    out, todo = set(), [pid]
    while todo:
        p = todo.pop()
        kids = [c for c, pp in parent.items() if pp == p]
        out.update(kids)
        todo += kids
    return out


def _end(proc: subprocess.Popen) -> str:
    """After a failed check: the run's own shutdown (SIGTERM, a stopped one continued
    first) still ends Ray's processes; SIGKILL if it does not end. Its output."""
    proc.send_signal(signal.SIGCONT)
    proc.send_signal(signal.SIGTERM)
    try:
        return proc.communicate(timeout=120)[0]
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.communicate()[0]


def _in_session(sid: int) -> list[int]:
    """Processes of session `sid` (Ray's processes stay in the session of the run that started them)."""
    out = []
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                with open(f"/proc/{p}/stat") as f:
                    if int(f.read().rsplit(")", 1)[1].split()[3]) == sid:
                        out.append(int(p))
            except (OSError, IndexError, ValueError):
                pass
    return out


def test_games_on_two_simulated_hosts_survive_a_host_kill_and_stop_cleanly(tmp_path, null_native):
    need("ray (the cluster extra)", _ray_installed(), "pip install -e '.[cluster]' (make test does)")
    recipe = _cluster_recipe(tmp_path / "cl.toml", null_native, seconds=600)
    run_dir = tmp_path / "runs" / "cl"
    proc = subprocess.Popen([sys.executable, "-m", "w3async", "run", str(recipe), "--run", "cl",
                             "--runs-dir", str(tmp_path / "runs")],
                            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        both = lambda: (lambda h: h if len(h) == 2 and all(x["games_up"] == 2 and x["agent_steps"] > 2000
                                                            for x in h.values()) else None)(_hosts(run_dir))
        _wait("both hosts' games answering", both, 180, proc)
        ups = [e for e in events(run_dir) if e["event"] == "host_up"]
        node1 = next(e for e in ups if e["host"] == "node1")
        assert {e["host"] for e in ups} == {"node1", "node2"} and node1["node"] != next(
            e for e in ups if e["host"] == "node2")["node"]  # two nodes of the cluster
        node2_before = _hosts(run_dir)["node2"]["agent_steps"]
        os.kill(node1["pid"], signal.SIGKILL)  # the host's process, as a crash would end it
        back = lambda: (lambda h: h if h.get("node1", {}).get("up") and h["node1"]["deaths"] == 1
                        and h["node1"]["games_up"] == 2 and h["node1"]["agent_steps"] > 500 else None)(_hosts(run_dir))
        hosts = _wait("node1's host back with its games", back, 120, proc)
        assert hosts["node2"]["agent_steps"] > node2_before + 1000 and hosts["node2"]["deaths"] == 0
        assert hosts["node2"]["restarts"] == 0 and hosts["node2"]["round_trip_ms"] is not None
        games = json.loads(urllib.request.urlopen(
            (run_dir / "status.url").read_text().strip().rstrip("/") + "/games", timeout=5).read())["games"]
        assert sorted(g["host"] for g in games) == ["node1", "node1", "node2", "node2"]
        # each host samples its own processes (observe/accounting.py): its games' figures and its totals
        assert all(g["rss_mb"] > 0 and g["cpu"] is not None for g in games if g["host"] == "node2"), games
        assert hosts["node2"]["accounting"]["games"]["procs"] >= 2
        ray = json.loads(urllib.request.urlopen(
            (run_dir / "status.url").read_text().strip().rstrip("/") + "/status", timeout=5).read())["accounting"]["kinds"]["ray"]
        assert ray["procs"] >= 3 and ray["rss_mb"] > 50  # raylet, gcs_server, the hosts' workers, ...
        lost = [e for e in events(run_dir) if e["event"] == "host_lost"]
        assert [e["host"] for e in lost] == ["node1"]
        # A host that stops answering for a while, alive (SIGSTOP): cut, then its games start again.
        node2 = next(e for e in ups if e["host"] == "node2")
        os.kill(node2["pid"], signal.SIGSTOP)
        try:
            _wait("node2 counted lost", lambda: [e for e in events(run_dir)
                                                 if e["event"] == "host_lost" and e["host"] == "node2"], 60, proc)
        finally:
            os.kill(node2["pid"], signal.SIGCONT)
        _wait("node2 back", lambda: [e for e in events(run_dir) if e["event"] == "host_back"], 60, proc)
        steps = _hosts(run_dir)["node2"]["agent_steps"]
        _wait("node2's games answering again", lambda: (lambda h: h["node2"]["up"] and h["node2"]["games_up"] == 2
                                                        and h["node2"]["agent_steps"] > steps + 1000)(_hosts(run_dir)),
              60, proc)
        causes = [e["cause"] for e in events(run_dir / "hosts" / "node2") if e["event"] == "game_kill"]
        assert causes == ["centre_lost", "centre_lost"]
        left_behind = _descendants(proc.pid)  # Ray's processes on every node, the hosts and their games
        markers = [e["shm"] for d in (run_dir, run_dir / "hosts" / "node1", run_dir / "hosts" / "node2")
                   for e in events(d) if e["event"] == "run_start"]
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:  # a failed check above: the run's own shutdown still ends Ray's processes
            out = _end(proc)
    assert proc.returncode == 0, out[-3000:]
    deadline = time.monotonic() + 30  # Ray's processes end as their node is shut down
    while [p for p in left_behind if alive(p)] and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not [p for p in left_behind if alive(p)], "a process of the run outlived it"
    for m in markers:  # every table's name: the centre's and each host's (both incarnations)
        assert not mentioning(m.lstrip("/").encode()), f"a process still carries {m}"
        assert not [s for s in list_segments() if s.startswith(m)], f"a segment of {m} is still linked"
    stops = {e["host"]: e for e in events(run_dir) if e["event"] == "host_stop"}
    assert set(stops) == {"node1", "node2"} and all(s["leftovers"]["processes"] == [] for s in stops.values())
    shutdown = [e for e in events(run_dir) if e["event"] == "shutdown"]
    assert shutdown[-1]["error"] is None
    for d in (run_dir / "hosts" / "node1", run_dir / "hosts" / "node2"):
        assert check_failures(d) == []
        assert not [e for e in events(d) if e["event"] == "bad_row"]


def test_each_hosts_recipe_loads_with_only_its_games():
    """A host runs its share of the run's groups with no learning sections: a recipe
    whose learner needs the stop the host has not (fgself-cluster's linear schedule)
    still gives every host a recipe that loads, and a recipe error crosses Ray whole."""
    import pickle
    import types

    from w3async.cluster.link import ClusterLink
    from w3async.recipes import RecipeError, load_recipe, recipe_from_dict

    run = load_recipe(REPO / "recipes/fgself-cluster.toml")
    assert run.learner.lr_schedule == "linear"
    link = ClusterLink(types.SimpleNamespace(recipe=run), 0, 0)
    for h in link.hosts_:
        d = link._host_recipe(h)
        assert not {"learner", "trajectories", "league"} & set(d)
        host = recipe_from_dict(d, f"<game host {h.name}>")
        want = [g for g in run.games if g.host == h.name]
        assert [g.env for g in host.games] == [g.env for g in want] and all(not g.host for g in host.games)
        assert host.cluster is None and not host.status.enabled
    err = pickle.loads(pickle.dumps(RecipeError("<game host node1>", ["a: wrong", "b: missing"])))
    assert err.path == "<game host node1>" and err.problems == ["a: wrong", "b: missing"]
    assert "b: missing" in str(err)


def test_a_host_no_node_offers_is_refused_by_name(tmp_path, null_native):
    """games.host names a resource no node of the cluster offers: the run does not start,
    says which host and what the cluster offers, and leaves nothing running."""
    need("ray (the cluster extra)", _ray_installed(), "pip install -e '.[cluster]' (make test does)")
    recipe = _cluster_recipe(tmp_path / "cl.toml", null_native, seconds=30)
    recipe.write_text(recipe.read_text().replace('host = "node2"', 'host = "node3"'))
    proc = subprocess.Popen([sys.executable, "-m", "w3async", "run", str(recipe), "--run", "cl",
                             "--runs-dir", str(tmp_path / "runs")], start_new_session=True,
                            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        out, _ = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode != 0
    assert "games.host = 'node3': no node of the cluster offers a resource 'node3'" in out, out[-3000:]
    assert "custom resources offered: node1, node2" in out, out[-3000:]
    assert "Traceback" not in out, out[-3000:]
    deadline = time.monotonic() + 30  # the simulated cluster's processes (its session's) end with it
    while _in_session(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not _in_session(proc.pid), "a process of the run's session outlived it"
    run_dir = tmp_path / "runs" / "cl"
    for m in [e["shm"] for e in events(run_dir) if e["event"] == "run_start"]:
        assert not [s for s in list_segments() if s.startswith(m)], f"a segment of {m} is still linked"


def _start(tmp_path: Path, recipe: Path) -> tuple[subprocess.Popen, Path]:
    """`w3async run` of the recipe in a session of its own (Ray's processes stay in it)."""
    proc = subprocess.Popen([sys.executable, "-m", "w3async", "run", str(recipe), "--run", "cl",
                             "--runs-dir", str(tmp_path / "runs")], start_new_session=True,
                            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return proc, tmp_path / "runs" / "cl"


def _wait_both_answering(run_dir: Path, proc: subprocess.Popen) -> None:
    both = lambda: (lambda h: h if len(h) == 2 and all(x["games_up"] == 2 and x["agent_steps"] > 1000
                                                        for x in h.values()) else None)(_hosts(run_dir))
    _wait("both hosts' games answering", both, 180, proc)


def test_hosts_stop_their_games_without_the_centre_and_are_made_again(tmp_path, null_native):
    """The centre stopped (SIGSTOP) for longer than cluster.lost_after_s: every host stops
    its games on its own; when the centre runs again it has Ray make each host again
    (`host_remake`, a death), their games answer again, and SIGTERM still leaves nothing."""
    need("ray (the cluster extra)", _ray_installed(), "pip install -e '.[cluster]' (make test does)")
    recipe = _cluster_recipe(tmp_path / "cl.toml", null_native, seconds=600)
    recipe.write_text(recipe.read_text().replace("local_nodes = 2", "local_nodes = 2\nlost_after_s = 3"))
    proc, run_dir = _start(tmp_path, recipe)
    try:
        _wait_both_answering(run_dir, proc)
        games = [e["pid"] for n in ("node1", "node2") for e in events(run_dir / "hosts" / n) if e["event"] == "game_start"]
        assert len(games) == 4 and all(alive(p) for p in games)
        os.kill(proc.pid, signal.SIGSTOP)
        try:
            deadline = time.monotonic() + 30
            while [p for p in games if alive(p)] and time.monotonic() < deadline:
                time.sleep(0.25)
            assert not [p for p in games if alive(p)], "a host kept its games without the centre"
        finally:
            os.kill(proc.pid, signal.SIGCONT)
        again = lambda: (lambda h: h if all(x["up"] and x["deaths"] == 1 and x["games_up"] == 2 and x["agent_steps"] > 500
                                             for x in h.values()) else None)(_hosts(run_dir))
        _wait("both hosts made again and answering", again, 120, proc)
        remade = sorted(e["host"] for e in events(run_dir) if e["event"] == "host_remake")
        assert remade == ["node1", "node2"]
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            out = _end(proc)
    assert proc.returncode == 0, out[-3000:]
    deadline = time.monotonic() + 30
    while _in_session(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not _in_session(proc.pid), "a process of the run's session outlived it"
    assert [e for e in events(run_dir) if e["event"] == "shutdown"][-1]["error"] is None
    for n in ("node1", "node2"):
        assert check_failures(run_dir / "hosts" / n) == []


def _parent(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


# Each fault of a host that leaves it unable to run its own shutdown, then the signal:
# (the fault, the signals, cluster.host_restarts, cluster.lost_after_s).
HOST_FAULTS = {
    "raylet_killed": ("raylet", [signal.SIGTERM], 3, 30),  # node1's node gone: its host unreachable
    "host_killed": ("host", [signal.SIGINT], 3, 30),  # Ray restarting the host while the run stops
    "budget_spent": ("host", [signal.SIGTERM], 0, 600),  # its last allowed death: dead for good
    "budget_ends_the_run": ("host", [], 0, 3),  # the documented end: the run stops with the cause
    # alive but not answering (SIGSTOP); two signals 30 ms apart hurry the shutdown past its stop
    "host_frozen": ("frozen", [signal.SIGTERM, signal.SIGINT], 3, 600),
}


@pytest.mark.parametrize("fault", list(HOST_FAULTS))
def test_a_run_ends_cleanly_after_a_host_fault(tmp_path, null_native, fault):
    """A host that cannot stop its own games at the run's end (its node's raylet killed,
    its process SIGKILLed, its restart budget spent): a signal still ends the run with
    exit 0 and its shutdown record, no traceback (the dead host's stop is a recorded
    fault, `host_stop` with `fault`), and the centre sweeps what the host made: no
    segment and no process of any table of the run is left, and no process of Ray's.
    A spent budget with no signal ends the run as documented: exit 1 with the cause,
    nothing left either."""
    need("ray (the cluster extra)", _ray_installed(), "pip install -e '.[cluster]' (make test does)")
    what, sigs, restarts, lost_after = HOST_FAULTS[fault]
    recipe = _cluster_recipe(tmp_path / "cl.toml", null_native, seconds=600,
                             extra=f"host_restarts = {restarts}\nlost_after_s = {lost_after}")
    proc, run_dir = _start(tmp_path, recipe)
    try:
        _wait_both_answering(run_dir, proc)
        node1 = next(e for e in events(run_dir) if e["event"] == "host_up" and e["host"] == "node1")
        games = [e["pid"] for e in events(run_dir / "hosts" / "node1") if e["event"] == "game_start"]
        assert len(games) == 2 and all(alive(p) for p in games)
        victim = node1["pid"]
        if what == "raylet":
            victim = _parent(node1["pid"])  # the host's worker is a child of its node's raylet
            assert "raylet" in _cmdline(victim), _cmdline(victim)
        os.kill(victim, signal.SIGSTOP if what == "frozen" else signal.SIGKILL)
        _wait("node1 counted lost", lambda: [e for e in events(run_dir)
                                             if e["event"] == "host_lost" and e["host"] == "node1"], 60, proc)
        markers = [e["shm"] for d in (run_dir, run_dir / "hosts" / "node1", run_dir / "hosts" / "node2")
                   for e in events(d) if e["event"] == "run_start"]
        for i, sig in enumerate(sigs):
            time.sleep(0.03 if i else 0)
            proc.send_signal(sig)
        out, _ = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            out = _end(proc)
    want = 0 if sigs else 1
    assert proc.returncode == want, out[-3000:]
    assert "Traceback" not in out, out[-3000:]
    shutdown = [e for e in events(run_dir) if e["event"] == "shutdown"]
    assert shutdown and shutdown[-1]["shutdown_errors"] == [], shutdown
    if not sigs:
        assert "game host node1 died again after 0 restart(s)" in shutdown[-1]["error"], shutdown[-1]
        assert "game host node1 died again" in out, out[-3000:]
    else:
        assert shutdown[-1]["error"] is None, shutdown[-1]
    stops = {e["host"]: e for e in events(run_dir) if e["event"] == "host_stop"}
    assert set(stops) == {"node1", "node2"}
    if what != "host" or restarts == 0:  # dead at the stop (a restarted host may be back by then)
        assert stops["node1"]["fault"], stops["node1"]
    if not sigs[1:]:  # one signal: the healthy host has all the stop's time to answer
        assert not stops["node2"].get("fault"), stops["node2"]
    for host, stop in stops.items():  # (a second signal 30 ms later may leave node2 unanswered too)
        swept = [e for e in events(run_dir) if e["event"] == "host_sweep" and e["host"] == host]
        if stop.get("fault"):  # the centre's sweep ended what it made (node1's segments: all of them)
            assert swept and swept[0]["left"] == [] and (swept[0]["unlinked"] or host != "node1"), (host, swept)
        else:
            assert stop["leftovers"]["processes"] == [], (host, stop)
    deadline = time.monotonic() + 30
    while _in_session(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not _in_session(proc.pid), [(p, _cmdline(p)) for p in _in_session(proc.pid)]
    assert not [p for p in games if alive(p)], "a game of the dead host outlived the run"
    assert len(markers) >= 3
    for m in markers:  # the centre's table and each host's, every incarnation
        assert not mentioning(m.lstrip("/").encode()), f"a process still carries {m}"
        assert not [s for s in list_segments() if s.startswith(m)], f"a segment of {m} is still linked"


def test_a_host_on_another_node_is_swept_there_and_a_gone_node_is_said(tmp_path):
    """The sweep of a host that could not stop itself, as a Ray task pinned to its node
    (the path for a host on another machine): a helper of its table that left its game's
    session is SIGKILLed there and the table's segment unlinked; once the node is gone,
    the task fails instead of running on another node (link.py then says `host_unswept`)."""
    need("ray (the cluster extra)", _ray_installed(), "pip install -e '.[cluster]' (make test does)")
    import posix_ipc
    import ray
    from ray.cluster_utils import Cluster

    from w3async.cluster.sweep import sweep_on_node
    from w3async.sync.table import segment_name

    table = segment_name("sweep")
    seg = posix_ipc.SharedMemory(f"{table}-0-1", posix_ipc.O_CREX, size=4096)
    seg.close_fd()
    helper = subprocess.Popen(["sleep", "600"], env=dict(os.environ, W3S_SHM=f"{table}-0-1"), start_new_session=True)
    cluster = Cluster(initialize_head=True, head_node_args=dict(num_cpus=1, include_dashboard=False,
                                                                object_store_memory=100 << 20))
    try:
        node1 = cluster.add_node(num_cpus=1, resources={"node1": 1}, object_store_memory=100 << 20)
        cluster.wait_for_nodes()
        ray.init(address=cluster.address, log_to_driver=False)
        traces = dict(shms=[table], pgids=[helper.pid], wine_prefixes=[])
        done = ray.get(sweep_on_node(ray, node1.node_id, traces), timeout=120)
        assert helper.pid in done["killed"] and done["left"] == [], done
        assert done["unlinked"] == [f"{table}-0-1"] and not list_segments(table)
        assert helper.wait(timeout=10) == -signal.SIGKILL
        cluster.remove_node(node1)
        with pytest.raises(ray.exceptions.RayError):
            ray.get(sweep_on_node(ray, node1.node_id, traces), timeout=60)
    finally:
        if helper.poll() is None:
            helper.kill()
            helper.wait()
        for s in list_segments(table):
            posix_ipc.unlink_shared_memory(s)
        ray.shutdown()
        cluster.shutdown()
