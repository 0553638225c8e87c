"""Inference rounds: one gathered Batch in, one action per row out, off the event loop.

    engine = InferenceEngine(spec, net_cfg, max_rows=table.n_rows, n_table_rows=table.n_rows)
    engine.start()
    fut = engine.submit(batch, net_per_row)        # copies the batch now, computes later
    ...gather the next round while this one computes...
    res = fut.result()                              # or await asyncio.wrap_future(fut)
    gatherer.answer(res.rows, res.obs_seq, res.actions, res.versions)
    engine.stop()

Why a thread and a copy: the supervisor's loop must keep reading doorbells while a round
computes (measured in a Warcraft III harness under Wine: one-row calls and a busy server were the first limits), and the
gatherer reuses its Batch buffers for the next round, so submit() copies what the
network needs into buffers of the engine's own (a small pool: a round can be gathered
and submitted while the last one computes) and returns at once. The compute runs on
one dedicated worker thread, which is also the only thread that touches the networks:
new weights (publish, load_net) are copied into them there, between two rounds, so a
round never sees half-written weights.

Rows are split by network: net 0 is the current policy, nets 1..n_nets-1 hold past
snapshots (league opponents), loaded by copying weights into a network that already
exists (measured in a Warcraft III harness under Wine: one network with swapped weights instead of a network per snapshot).

A GRU network keeps its state per table row here (reset where a row's FIRST flag is
set), plus one scratch row that the CUDA graphs' padded rows use; RoundResult.state_in
gives the state each row had before the round, which the trajectories keep at the start
of each sequence. On CUDA it is graphed too (gru_graphs=False: eager, one round at a
time, the fallback).

The CUDA path (w3async.learn.inference.cuda_runner.CudaRunner: a stream per network, a CUDA graph
per (network, bucket, row count) with static pinned input buffers, events made once) is
used only when the device is "cuda" and torch.cuda.is_available() (tests run its code on
a CPU with stand-ins for streams and graphs). There the worker only launches a graphed round, up to n_flights of them in flight
(w3async.learn.inference.flights): a finisher thread waits for each and resolves its future in
submission order, so the next round's copy and upload overlap the last one's compute.
It is UNCHECKED unless docs/performance.md says a GPU check ran. The engine hands
it its networks, GRU state and generator at construction (its declared interface).
"""

from __future__ import annotations

import queue
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import torch

from w3async.sync import layout
from w3async.sync.gather import Batch
from w3async.learn.inference.cuda_runner import CudaRunner
from w3async.learn.inference.runner_parts import check_weights
from w3async.learn.inference.flights import Flights
from w3async.learn.inference.inputs import Inputs
from w3async.learn.network import NetConfig, Network
from w3async.games.spec import GameSpec


@dataclass
class RoundStats:
    """One round, for inference.jsonl and the status page (all times in ms)."""

    rows: int
    bucket: int
    nets: int  # networks that ran
    copy_ms: float  # submit(): the copy out of the Batch, on the caller's thread
    queue_ms: float  # from submit() to the worker starting (a round before it still computing)
    compute_ms: float  # the worker: weights swapped in, the networks run, answers made
    net_ms: float  # of compute_ms, inside the networks (inputs to sampled actions)
    latency_ms: float  # from submit() to the result


class RoundResult(NamedTuple):
    """The answers of one round, rows in the order they were submitted. The arrays are
    the result's own (nothing is reused by later rounds)."""

    rows: np.ndarray  # (n,) int32 table rows
    obs_seq: np.ndarray  # (n,) uint64 the sequence each row was gathered at
    actions: np.ndarray  # (n, N_HEADS) int32
    logp: np.ndarray  # (n,) float32 the joint log-probability of the action
    value: np.ndarray  # (n,) float32
    versions: np.ndarray  # (n,) uint32 the policy version of the network that answered
    net: np.ndarray  # (n,) int16 the net that answered
    state_in: np.ndarray | None  # (n, d_model) the GRU state before this step, None without GRU
    stats: RoundStats


class InferenceEngine:
    """See the module docstring. Not thread-safe for submitters: one caller (the
    supervisor's loop) submits; publish/load_net may come from any thread."""

    def __init__(
        self, spec: GameSpec, net_cfg: NetConfig = NetConfig(), device: str = "cpu", n_nets: int = 3,
        max_rows: int = 256, n_table_rows: int | None = None, num_threads: int = 1, seed: int = 0,
        n_buffers: int = 2, n_flights: int | None = None, gru_graphs: bool = True, greedy_twin: bool = False,
    ):
        if n_nets < 1:
            raise ValueError(f"n_nets={n_nets} must be >= 1 (net 0 is the current policy)")
        if n_flights is not None and n_flights < 0:
            raise ValueError(f"n_flights={n_flights} must be >= 0 (0: one round at a time)")
        if device.startswith("cuda") and not torch.cuda.is_available():
            raise ValueError(f"device={device!r} but torch.cuda.is_available() is False: use device='cpu'")
        self.spec, self.net_cfg, self.device = spec, net_cfg, torch.device(device)
        if self.device.type == "cuda" and self.device.index is None:  # the caller's, for the worker to set
            self.device = torch.device("cuda", torch.cuda.current_device())
        # greedy_twin: one net more, last, that answers by the argmax and holds net 0's
        # weights (publish() loads both): the rows of a greedy evaluation use it.
        self.greedy_net = n_nets if greedy_twin else None
        n_nets += bool(greedy_twin)
        self.n_nets, self.max_rows, self.num_threads, self.seed = n_nets, max_rows, num_threads, seed
        self.n_table_rows = n_table_rows if n_table_rows is not None else max_rows
        torch.manual_seed(seed)
        self.nets = [Network(spec, net_cfg).to(self.device).eval() for _ in range(n_nets)]
        for net in self.nets[1:]:
            net.load_state_dict(self.nets[0].state_dict())
        twin = [] if self.greedy_net is None else [self.greedy_net]
        for k in twin:
            self.nets[k].greedy = True
        self.versions = [0 if k == 0 or k in twin else -1 for k in range(n_nets)]  # the worker's: what each net holds
        # What load_net() asked for, per net (-1: never), set under _lock before load_net
        # returns. submit() checks nets against this, never against `versions` or
        # `_pending`: the worker empties _pending before it sets `versions`, so a submit
        # between the two saw a loaded net as never loaded. Any round
        # submitted after load_net() returned applies the weights before it runs (FIFO).
        self._requested = list(self.versions)
        self._pending: dict[int, tuple] = {}  # net -> (weights, version, ready event or None), applied by the worker
        self._published: dict[int, "torch.cuda.Event"] = {}  # net -> the event of its last device copy
        self._lock = threading.Lock()
        self._pin = self.device.type == "cuda"
        self._free: queue.SimpleQueue[Inputs] = queue.SimpleQueue()
        # Rounds in flight at once (w3async.learn.inference.flights): by default 2 on CUDA (graphed
        # networks), none on a CPU, where the worker's compute is the round; an eager GRU
        # network on CUDA (gru_graphs=False, the fallback) runs one round at a time.
        self.gru_graphs = gru_graphs
        eager = self._pin and net_cfg.gru and not gru_graphs
        self.n_flights = 0 if eager else (n_flights if n_flights is not None else 2 * self._pin)
        for _ in range(max(n_buffers, self.n_flights + 1)):  # a round's buffer is in use until its finish
            self._free.put(Inputs(max_rows, self._pin, spec.layout))
        # One row per table row, and a scratch row last that the CUDA graphs' padded rows use
        self._state = (
            torch.zeros(self.n_table_rows + 1, net_cfg.d_model, device=self.device) if net_cfg.gru else None
        )
        self._gen: torch.Generator | None = None
        self._pool: ThreadPoolExecutor | None = None
        self._runner: CudaRunner | None = None
        self._flights: Flights | None = None  # rounds in flight (None: one at a time)
        self._launcher: CudaRunner | _CpuLauncher | None = None  # what _launch queues rounds on
        self.rounds = 0

    # -- lifecycle ---------------------------------------------------------------------

    def start(self) -> None:
        """Start the worker thread (and, on CUDA, capture the graphs there)."""
        if self._pool is not None:
            raise RuntimeError("InferenceEngine.start() called twice: call stop() first")
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="w3s-infer", initializer=self._init_worker)
        self._pool.submit(lambda: None).result()  # the initializer's errors surface here
        if self.n_flights:
            self._launcher = self._runner if self._runner is not None else _CpuLauncher(self)
            self._flights = Flights(self.n_flights)

    def _init_worker(self) -> None:
        # With torch's OpenMP backend the thread count is per calling thread: this sets the
        # worker's own, and leaves the learner's thread to set its own.
        torch.set_num_threads(self.num_threads)
        self._gen = torch.Generator(device=self.device).manual_seed(self.seed)
        if self.device.type == "cuda":
            torch.cuda.set_device(self.device)  # the worker's own current device (a thread's is its own)
            self._runner = CudaRunner(self.nets, self.device, self.max_rows, self._state, self.seed,
                                      max(1, self.n_flights), self.gru_graphs)  # net k samples from seed + k
            self._runner.capture_all(self.spec.layout.buckets)  # never inside a round (under no_grad)

    def stop(self) -> None:
        """Finish the rounds already submitted, then end the worker thread."""
        if self._pool is not None:
            self._pool.shutdown(wait=True)  # every round launched and handed over
            self._pool = None
        if self._flights is not None:
            self._flights.close()  # every round finished
            self._flights = None

    def __enter__(self) -> InferenceEngine:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- weights -------------------------------------------------------------------------

    def publish(self, state_dict: dict, version: int) -> None:
        """New current-policy weights (net 0, and its greedy twin), in effect from the next
        round on, for both at once (one copy, staged under one lock: a round never finds
        the twin a version behind). The tensors are copied now, so the caller may go on
        training at once."""
        self._load([0] if self.greedy_net is None else [0, self.greedy_net], state_dict, version)

    def load_net(self, net: int, state_dict: dict, version: int) -> None:
        """Weights for net `net` (0 = current, 1.. = past snapshots), in effect from the
        next round on; the worker copies them into the net between rounds."""
        if not 0 <= net < self.n_nets:
            raise ValueError(f"net {net} is not in 0..{self.n_nets - 1}")
        self._load([net], state_dict, version)

    def _load(self, nets: list[int], state_dict: dict, version: int) -> None:
        for net in nets:
            check_weights(net, self.nets[net].state_dict(), state_dict)  # here, where the caller learns of it
        ready = None
        if self._runner is not None and all(v.device == self.device for v in state_dict.values()):
            # Weights already on the device (the learner's): copied device to device on the
            # engine's device's current stream of this thread, with an event the net's stream
            # waits on; no host round trip. The caller's current device may be another GPU
            # (several GPUs), so the stream and the event are the engine device's by name. The
            # learner's update ends with this stream waiting on the learner's own
            # (Learner.run_update), so the clone reads the update's last weights.
            with torch.cuda.device(self.device):
                stream = torch.cuda.current_stream(self.device)
                copy = {k: v.detach().clone() for k, v in state_dict.items()}
                if nets[0] not in self._published:  # one event per first net: a stream waits on its latest record
                    self._published[nets[0]] = torch.cuda.Event()
                ready = self._published[nets[0]]
                ready.record(stream)
        else:
            copy = {k: v.detach().to("cpu", copy=True) for k, v in state_dict.items()}
            if self._pin:  # a pageable upload would hold the CUDA driver's lock while it stages (measured in a Warcraft III harness under Wine)
                copy = {k: v.pin_memory() for k, v in copy.items()}
        with self._lock:  # the worker reads the copy, never writes it: the nets share it
            for net in nets:
                self._pending[net] = (copy, int(version), ready)
                self._requested[net] = int(version)

    def _apply_pending(self) -> None:
        """Copy every pending load into its net. One that fails does not stop the others
        (they were dropped while submit() took them as loaded); its net keeps
        its weights and version, submit() sees that version again unless a newer load
        came meanwhile, and the first error is raised after all were tried (the round
        fails with it)."""
        with self._lock:
            pending, self._pending = self._pending, {}
        first: BaseException | None = None
        for net, (sd, version, ready) in pending.items():
            try:
                if self._runner is not None:
                    self._runner.load(net, sd, ready)  # on the net's stream, ordered with its replays
                else:
                    check_weights(net, self.nets[net].state_dict(), sd)  # nothing copied unless all fit
                    self.nets[net].load_state_dict(sd)  # copy_ into the existing parameters
            except Exception as e:  # noqa: BLE001 (raised below, after the other nets' loads)
                with self._lock:
                    if net not in self._pending:
                        self._requested[net] = self.versions[net]
                first = first or e
                continue
            self.versions[net] = version
        if first is not None:
            raise first

    @property
    def running(self) -> bool:
        """Between start() and stop()."""
        return self._pool is not None

    def reset_rows(self, rows: np.ndarray) -> Future | None:
        """Forget the GRU state of these table rows (a game restarted). Queued on the
        worker (FIFO: after the rounds already submitted, before any submitted later);
        returns at once (the loop must not wait), with the future of the reset or None
        when the network has no state."""
        if self._state is None:
            return None
        rows_np = np.array(rows, np.int64)  # the device tensor is made on the worker: the loop never waits on the GPU
        if self._runner is not None and self._runner.graphed:  # ordered with the rounds in flight
            return self._call(lambda: self._runner.reset(torch.from_numpy(rows_np).pin_memory()))

        @torch.no_grad()
        def reset() -> None:
            self._state.index_fill_(0, torch.as_tensor(rows_np, device=self.device), 0.0)

        return self._call(reset)

    def _call(self, fn) -> Future:
        if self._pool is None:
            raise RuntimeError("InferenceEngine: call start() before submit()")
        return self._pool.submit(fn)

    # -- rounds --------------------------------------------------------------------------

    def submit(self, batch: Batch, net_per_row: np.ndarray | None = None) -> Future:
        """Copy the batch's first n rows (on this thread) and queue their round; the
        future resolves to a RoundResult. net_per_row (n,) says which network answers
        each row (default: all net 0). Raises (nothing queued) for a net outside
        0..n_nets-1 or one load_net() was never called for, a batch over max_rows, or
        an engine that is not running; a round that fails on the worker fails its future."""
        t0 = time.perf_counter()
        n, bucket = batch.n, batch.bucket
        if n > self.max_rows:
            raise ValueError(f"a batch of {n} rows, the engine holds max_rows={self.max_rows}: raise max_rows")
        if net_per_row is None:
            row_net = np.zeros(n, np.int16)
            used = np.zeros(1 if n else 0, np.int16)
        else:
            row_net = np.asarray(net_per_row)[:n]
            if len(row_net) != n:
                raise ValueError(f"net_per_row has {len(row_net)} entries for {n} rows")
            used = np.unique(row_net)
            with self._lock:
                requested = list(self._requested)
            bad = [int(s) for s in used if not 0 <= s < self.n_nets or requested[int(s)] < 0]
            if bad:
                raise ValueError(f"nets {bad} are out of 0..{self.n_nets - 1} or were never loaded: call load_net() first")
        try:
            buf = self._free.get_nowait()
        except queue.Empty:  # more rounds in flight than buffers: make another set
            buf = Inputs(self.max_rows, self._pin, self.spec.layout)
        a = buf.np
        a["rows"][:n] = batch.rows[:n]
        buf.obs_seq[:n] = batch.obs_seq[:n]
        a["flags"][:n] = batch.flags[:n]
        a["net"][:n] = row_net
        a["glob"][:n] = batch.glob[:n]
        f = self.spec.layout.f_ent
        a["ent"][: n * bucket * f] = batch.ent_flat[: n * bucket * f]
        a["ent_type"][: n * bucket] = batch.type_flat[: n * bucket]
        a["n_ent"][:n] = batch.n_ent[:n]
        a["mask"][:n] = batch.mask[:n]
        copy_ms = (time.perf_counter() - t0) * 1e3
        try:
            if self._flights is None:
                return self._call(lambda: self._round(buf, n, bucket, used, t0, copy_ms))
            fut: Future = Future()
            fut.set_running_or_notify_cancel()  # resolved by the finisher, never cancelled
            self._call(lambda: self._launch(fut, buf, n, bucket, used, t0, copy_ms))
            return fut
        except BaseException:  # not started, or stopped: the caller gets the error, the buffer comes back
            self._free.put(buf)
            raise

    @torch.inference_mode()
    def _round(self, buf: Inputs, n: int, bucket: int, used: np.ndarray, t_submit: float, copy_ms: float) -> RoundResult:
        """A round in one go on the worker: the CPU path and the GRU path on CUDA."""
        t0 = time.perf_counter()
        try:
            self._apply_pending()
            meta = self._meta(buf, n, used)
            out = _answers(n, self.spec.layout.n_heads)
            state_in = None
            t_net = time.perf_counter()
            if n:
                if self._runner is not None:
                    state_in = self._runner.run(buf, n, bucket, used, *out)
                else:
                    state_in = self._run_cpu(buf, n, bucket, used, *out)
            net_ms = (time.perf_counter() - t_net) * 1e3
        finally:
            self._free.put(buf)
        self.rounds += 1
        return self._result(meta, out, state_in, n, bucket, used, t_submit, copy_ms, t0, net_ms)

    @torch.inference_mode()
    def _launch(self, fut: Future, buf: Inputs, n: int, bucket: int, used: np.ndarray, t_submit: float,
                copy_ms: float) -> None:
        """A round in flight: queued on the device with a free flight's buffers (on a CPU,
        computed here), then handed to the finisher (w3async.learn.inference.flights), which resolves
        fut; the worker goes on to the next round at once. Blocks only while every flight
        is in flight."""
        flight = self._flights.acquire()
        t0 = time.perf_counter()
        try:
            self._apply_pending()
            meta = self._meta(buf, n, used)
            handle = self._launcher.launch(buf, n, bucket, used, flight) if n else []
        except BaseException as e:  # nothing of it is in flight: its future says why
            self._flights.release(flight)
            self._free.put(buf)
            fut.set_exception(e)
            return
        self.rounds += 1

        def finish() -> RoundResult:
            out = _answers(n, self.spec.layout.n_heads)
            state_in = np.zeros((n, self.net_cfg.d_model), np.float32) if self._state is not None else None
            self._launcher.finish(handle, *out, state_in)
            return self._result(meta, out, state_in, n, bucket, used, t_submit, copy_ms, t0,
                                (time.perf_counter() - t0) * 1e3)

        self._flights.hand_over(flight, fut, finish, release=lambda: self._free.put(buf))

    def _meta(self, buf: Inputs, n: int, used: np.ndarray) -> tuple:
        """What a round's result says besides the answers, read when the round starts: its
        rows, their sequence numbers, nets, and the policy version each net holds."""
        net = buf.np["net"][:n].copy()
        versions = np.zeros(n, np.uint32)
        if len(used) == 1:
            versions[:] = self.versions[int(used[0])]
        else:
            for s in used:
                versions[net == s] = self.versions[s]
        return buf.np["rows"][:n].astype(np.int32), buf.obs_seq[:n].copy(), net, versions

    @staticmethod
    def _result(meta, out, state_in, n, bucket, used, t_submit, copy_ms, t0, net_ms) -> RoundResult:
        rows, obs_seq, net, versions = meta
        t1 = time.perf_counter()
        stats = RoundStats(n, bucket, len(used), copy_ms, (t0 - t_submit) * 1e3 - copy_ms, (t1 - t0) * 1e3, net_ms,
                           (t1 - t_submit) * 1e3)
        return RoundResult(rows, obs_seq, *out, versions, net, state_in, stats)

    def _run_cpu(self, buf, n, bucket, used, actions, logp, value) -> np.ndarray | None:
        obs = buf.obs(n, bucket)
        rows = buf.rows[:n]
        first = (buf.flags[:n] & layout.FLAG_FIRST) != 0
        state_in = None
        if self._state is not None:
            state_in = self._state[rows].clone()
            state_in[first] = 0.0
        writes = []  # the GRU states, written once every net has answered (a round that fails changes nothing)
        for s in used:
            net = self.nets[int(s)]
            if len(used) == 1:  # the common case: no indexing
                idx, o, st = None, obs, state_in
            else:
                idx = torch.as_tensor(np.flatnonzero(buf.np["net"][:n] == s))
                o, st = obs.index(idx), (state_in[idx] if state_in is not None else None)
            r = net.act(o, self._gen, state=st)
            sel = slice(None) if idx is None else idx.numpy()
            actions[sel] = r.actions.numpy()
            logp[sel] = r.logp.numpy()
            value[sel] = r.value.numpy()
            if r.state is not None:
                writes.append((rows if idx is None else rows[idx], r.state))
        for at, new in writes:
            self._state[at] = new
        return state_in.numpy() if state_in is not None else None


class _CpuLauncher:
    """The CPU path behind the launcher interface of CudaRunner (launch, finish), for an
    engine made with n_flights on a CPU: launch computes the round at once (the worker's
    compute is the round there), finish hands its answers over on the finisher thread.
    The same ordering as the CUDA path's, checked on any machine (tests/learn/test_flights.py)."""

    def __init__(self, engine: InferenceEngine):
        self.engine = engine

    def launch(self, buf: Inputs, n: int, bucket: int, used: np.ndarray, flight: int) -> tuple:
        out = _answers(n, self.engine.spec.layout.n_heads)
        return out + (self.engine._run_cpu(buf, n, bucket, used, *out),)

    @staticmethod
    def finish(handle: tuple, actions: np.ndarray, logp: np.ndarray, value: np.ndarray,
               state_in: np.ndarray | None = None) -> None:
        for dst, src in zip((actions, logp, value, state_in), handle):
            if dst is not None:
                dst[:] = src


def _answers(n: int, heads: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A round's answer arrays: actions (n, heads), logp (n,), value (n,)."""
    return np.zeros((n, heads), np.int32), np.zeros(n, np.float32), np.zeros(n, np.float32)
