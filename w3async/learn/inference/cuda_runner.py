"""The inference engine's CUDA path (w3async.learn.inference): streams, CUDA graphs,
pinned buffers. Made by InferenceEngine on its worker thread when the device is "cuda"
and torch.cuda.is_available(). Checked on an H200 by bench/device_check.sh (2026-12-04:
docs/performance.md, "The GPU path"); rerun it there after a change here.

Its interface to the engine is what the constructor takes and these calls, all on the
engine's worker thread (the only thread that touches the networks):

    runner = CudaRunner(nets, device, max_rows, state, seed, flights=2, gru_graphs=True)
        nets: the engine's networks, net by net (shared: the runner copies weights into them)
        state: the GRU state per table row plus one scratch row last (shared, written in
               place), or None without GRU
        seed: net k samples from a generator of its own seeded seed + k (never the default one)
        flights: rounds that may be in flight at once, each with its own rows of the staging
                 copy, index and pinned outputs
        gru_graphs: False runs a GRU network eagerly, one round at a time (the fallback)
    runner.capture_all(buckets)        # every graph, before the first round; none after
    runner.load(k, state_dict, ready)  # new weights for net k, ordered with its replays (ready: the
                                       # event of a device-to-device copy, or None)
    runner.graphed                     # True: rounds go through launch and finish
    h = runner.launch(buf, n, bucket, used, flight)   # queued on the device, no host wait
    runner.finish(h, actions, logp, value, state_in)  # (the finisher thread) waits, scatters
    runner.run(buf, n, bucket, used, actions, logp, value) -> state_in | None   # in one go
    runner.reset(rows)                 # GRU: zero these rows' state, ordered with the rounds

A flight (w3async.learn.inference.flights) is reused only after its round's finish, so the next
round's upload never overwrites a staging copy or pinned output an earlier round still
reads; on each net's stream, rounds are ordered by the stream itself.

On a CPU device (tests only: the engine never makes a runner there) streams and events
are no-ops and a "graph" replays its captured step eagerly, copying the results into its
static outputs: the same gather, padding, step, scatter, rollback and generator code runs,
so tests/learn/test_cuda_runner.py checks it on any machine. What only a GPU shows (memory per
graph, noise across streams, syncs, the finisher's CPU) is bench/device_check.py's.
"""

from __future__ import annotations

import contextlib
import time

import numpy as np
import torch

from w3async.learn.inference.inputs import Inputs
from w3async.learn.network import Network, Obs
from w3async.learn.inference.runner_parts import EagerGraph, NoStream, check_weights, graph_step
from w3async.sync import layout

BASE_ROW_BUCKETS = (8, 32, 64, 128, 256, 512)


def row_buckets(max_rows: int) -> tuple[int, ...]:
    """The row counts graphs are captured for: 8, 32, 64, 128, 256, 512 (on the H200, 256 rows
    at entity bucket 160 in the 512-row graph ran 0.64x as fast as eagerly), then doubling until one
    holds max_rows (one network may be asked for every row of a round: rounds of more than
    512 rows failed on CUDA only)."""
    b = list(BASE_ROW_BUCKETS)
    while b[-1] < max_rows:
        b.append(b[-1] * 2)
    return tuple(r for r in b if r < max_rows) + (next(r for r in b if r >= max_rows),)


class CudaRunner:
    """The GPU path (see the module docstring).

    - One upload per round: the round's rows go from the pinned input buffers to the
      device staging copy of the round's flight (one non-blocking copy per field, raw
      dtypes) on the upload stream, while earlier rounds compute.
    - Per net: a CUDA stream of its own at high priority (measured in a Warcraft III harness under Wine: graphs captured on
      one stream keep that stream's cuBLAS workspace; two networks' graphs sharing one
      hung the GPU), a graph memory pool of its own, a generator of its own registered
      with each of its graphs (graphs drawing from the default generator could
      give two nets' replays the same noise), and, per (bucket, row bucket), a CUDA graph
      captured before the first round (capture_all) under no_grad (with
      autograd on, each graph kept its saved activations and the GRU state grew an
      autograd chain), with pinned host outputs. The gather is inside the graph: it reads each net's rows from the staging
      copy by a static index (padded rows repeat a real row, never stale memory: stale
      padding crashed a run of a Warcraft III harness under Wine) and packs its answers
      into one tensor, so a net's part of a round is four calls (the index's upload, the
      replay, one copy of the answers to the flight's pinned memory, an event): on the
      H200 the gather outside the graph (about 30 calls a net) cost more than the step.
    - A round is planned (row buckets, graphs) before anything is queued; one that fails
      after is waited for before the engine reuses its buffers, and the GRU rows its
      nets already stepped get their state back.
    - Events are made once per net and reused (creating and destroying them takes the
      CUDA context's lock, measured in a Warcraft III harness under Wine); `done` events block (the finisher thread sleeps
      in the driver instead of spinning a core the games need).
    - New weights are copied into a net on that net's stream, so they are ordered with
      its replays. Capture uses capture_error_mode="thread_local", so the learner's
      thread may use the GPU meanwhile.
    - GRU: each graph gathers its rows' state from the engine's state tensor by a static
      row index (padded rows point at a scratch row), zeroes it where FIRST is set,
      steps, and scatters the new state back, all inside the graph. Rounds of different
      nets may write the same table row (a lane's opponent changes), so a GRU round's
      stream also waits for every other net's last round; a reset runs on the upload
      stream after every net's last round and before the next upload.
    """

    def __init__(self, nets: list[Network], device: torch.device, max_rows: int, state: torch.Tensor | None,
                 seed: int = 0, flights: int = 2, gru_graphs: bool = True):
        self.nets, self.device, self.state = nets, torch.device(device), state
        lay = self.layout = nets[0].layout  # every net plays the run's game
        self.cuda = self.device.type == "cuda"
        self.gru = state is not None
        self.graphed = not self.gru or gru_graphs
        self.scratch = state.shape[0] - 1 if self.gru else 0  # the row padded graph rows read and write
        self.row_buckets = row_buckets(max_rows)
        self.sealed = False  # capture_all ran: a graph missing now is an error, never a capture in a round
        self.capture_s = 0.0  # capture_all's time (device_check prints it)
        self.last_done: dict[int, object] = {}  # net -> the event of its last round (GRU ordering)
        # One generator per net: its graphs replay one at a time on its stream, so they
        # may share it; nets replay concurrently on their own streams, so they may not.
        self.gens = [torch.Generator(device=self.device).manual_seed(seed + k) for k in range(len(nets))]
        # Inference streams at high priority: the learner's, at the default, yields to
        # rounds (a priority outside the device's range is clamped by CUDA).
        self.upload = self._stream()
        self.streams = [self._stream() for _ in nets]
        # One memory pool per net: its graphs replay one at a time on its stream, so they
        # may share scratch memory; nets run concurrently, so they may not.
        self.pools = [torch.cuda.graph_pool_handle() if self.cuda else None for _ in nets]
        self.max_rows, self.flights = max_rows, flights
        cap, dev, pin = max_rows, self.device, self.cuda
        # One staging copy of the rounds' rows, flight f's at rows [f * cap, f * cap + n)
        # (one address for every graph to gather from), each entity field at E_MAX wide (a
        # round fills its bucket's first columns). Every row starts with an allowed choice
        # per head (the graphs' warm-up reads rows no round wrote).
        rows_all = cap * flights
        self.staging = {
            "glob": torch.zeros(rows_all, lay.g_glob, device=dev),
            "ent": torch.zeros(rows_all, lay.e_max, lay.f_ent, device=dev),
            "ent_type": torch.zeros(rows_all, lay.e_max, dtype=torch.int16, device=dev),
            "n_ent": torch.zeros(rows_all, dtype=torch.int32, device=dev),
            "mask": torch.zeros(rows_all, lay.n_heads, lay.head_max, dtype=torch.uint8, device=dev),
            **({"rows": torch.full((rows_all,), self.scratch, dtype=torch.int64, device=dev),
                "flags": torch.zeros(rows_all, dtype=torch.int32, device=dev)} if self.gru else {}),
        }
        self.staging["mask"][:, :, 0] = 1
        # Per flight: its upload's event, a pinned buffer of each net's graph index (row
        # bucket + 1 entries, net by net) and one "done" event per net.
        self.uploaded = [self._event() for _ in range(flights)]
        self.index = [torch.zeros(len(nets) * (self.row_buckets[-1] + 1), dtype=torch.int64, pin_memory=pin)
                      for _ in range(flights)]
        self.done = [[self._event(blocking=True) for _ in nets] for _ in range(flights)]
        self.graphs: dict[tuple[int, int, int], tuple] = {}
        self.eager_out = None  # the eager GRU path's pinned outputs, made on its first round

    # -- the device's primitives (a CPU's stand-ins for tests) --------------------------

    def _stream(self):
        return torch.cuda.Stream(device=self.device, priority=-1) if self.cuda else NoStream()

    def _event(self, blocking: bool = False):
        return torch.cuda.Event(blocking=blocking) if self.cuda else NoStream()

    def _on(self, stream):
        return torch.cuda.stream(stream) if self.cuda else contextlib.nullcontext()

    def _current(self):
        return torch.cuda.current_stream(self.device) if self.cuda else NoStream()

    # -- graphs and weights ------------------------------------------------------------

    @torch.no_grad()
    def capture_all(self, buckets) -> int:
        """Capture every graph a round can ask for (each net, entity bucket and row bucket)
        now, before the first round and before the learner starts: entering a capture
        synchronises the device and empties the caching allocator, tens of ms a graph
        that games would wait for inside a round (captured before the loop, as a Warcraft III harness under Wine found necessary).
        After this a round that needs a graph not made here fails (nothing queued).
        Returns the graphs made (none for a GRU network run eagerly)."""
        t0 = time.perf_counter()
        if self.graphed:
            for k in range(len(self.nets)):
                for bucket in buckets:
                    for rows in self.row_buckets:
                        self._graph(k, bucket, rows)
        self.sealed = True
        self.capture_s = time.perf_counter() - t0
        return len(self.graphs)

    @torch.no_grad()
    def load(self, k: int, sd: dict, ready=None) -> None:
        """New weights for net k, on its stream (ordered with its replays, no host wait).
        Weights on the device come with the event of their copy: the stream waits on it,
        not the host, and their memory is marked in use by the stream until the copy is
        done. Weights on the host are pinned (InferenceEngine.load_net): the caching host
        allocator keeps them until the copy is done. Raises (nothing copied) for weights
        whose names or shapes do not match the network."""
        own = self.nets[k].state_dict()
        check_weights(k, own, sd)
        stream = self.streams[k]
        if ready is not None:
            stream.wait_event(ready)
            for t in sd.values():
                t.record_stream(stream)
        with self._on(stream):
            for name, t in own.items():
                t.copy_(sd[name], non_blocking=True)

    def _graph(self, k: int, bucket: int, rows: int):
        key = (k, bucket, rows)
        if key in self.graphs:
            return self.graphs[key]
        net, stream, gen = self.nets[k], self.streams[k], self.gens[k]
        src = self._src(bucket)
        sel = torch.zeros(rows + 1, dtype=torch.int64, device=self.device)  # rows 0 for warm-up, count 0

        def step():
            return graph_step(net, src, sel, self.state, self.scratch, gen)

        stream.wait_stream(self._current())
        with self._on(stream):
            for _ in range(2):  # warm up on the capture stream (cuBLAS handles, the allocator)
                step()
            if self.cuda:
                g = torch.cuda.CUDAGraph()
                g.register_generator_state(gen)  # each replay advances the net's own generator
                with torch.cuda.graph(g, pool=self.pools[k], stream=stream, capture_error_mode="thread_local"):
                    out = step()
            else:
                out = step()
                g = EagerGraph(step, out)
        stream.synchronize()
        host = [torch.zeros(rows, out[0].shape[1], pin_memory=self.cuda) for _ in range(self.flights)]
        self.graphs[key] = (g, sel, out, host)  # host: the pinned answers, one per flight
        return self.graphs[key]

    def _src(self, bucket: int) -> dict:
        """The staging copy as a graph of this entity bucket reads it (every flight's rows)."""
        st = self.staging
        return {**st, "ent": st["ent"][:, :bucket], "ent_type": st["ent_type"][:, :bucket]}

    # -- rounds --------------------------------------------------------------------------

    def plan(self, net_np: np.ndarray, n: int, bucket: int, used) -> list[tuple[int, np.ndarray | None, int, int]]:
        """Each net's part of a round, checked before anything is queued: (net, its rows'
        indices or None for all, their count, the row bucket). Raises for more rows than
        the runner was made for, or (after capture_all) a graph that was not captured."""
        parts = []
        for s in used:
            s = int(s)
            idx = np.flatnonzero(net_np[:n] == s) if len(used) > 1 else None
            m = n if idx is None else len(idx)
            rb = next((r for r in self.row_buckets if r >= m), None)
            if rb is None:
                raise ValueError(f"{m} rows for net {s}, the runner holds max_rows={self.max_rows}: raise max_rows")
            if self.graphed and self.sealed and (s, bucket, rb) not in self.graphs:
                raise RuntimeError(f"no graph for net {s}, entity bucket {bucket}, {rb} rows: capture_all() was "
                                   f"not given this bucket (a capture inside a round would stall every game)")
            parts.append((s, idx, m, rb))
        return parts

    @torch.no_grad()
    def launch(self, buf: Inputs, n: int, bucket: int, used: np.ndarray, flight: int) -> list:
        """Queue one round (buf's first n rows, entity bucket `bucket`, the nets in `used`)
        on the device with the buffers of `flight`, and return at once with its handle for
        finish(). No host wait: the upload and each net's gather, replay and output copy
        are ordered by streams and events. buf is read by the upload until finish. If it
        raises, nothing of the round is still queued and the GRU state is as before."""
        parts = self.plan(buf.np["net"], n, bucket, used)
        uploaded, done, lo = self.uploaded[flight], self.done[flight], flight * self.max_rows
        stepped: list[tuple] = []  # GRU: the graph outputs and m of the nets replayed, for a rollback
        try:
            with self._on(self.upload):
                self._upload(buf, n, bucket, lo)
                uploaded.record(self.upload)
            waits = dict(self.last_done) if self.gru else {}
            index, at = self.index[flight], 0
            handle = []
            for s, idx, m, rb in parts:
                g, sel, out, host = self._graph(s, bucket, rb)
                stream = self.streams[s]
                stream.wait_event(uploaded)
                for other, ev in waits.items():  # GRU: another net's last round may have written our rows
                    if other != s:
                        stream.wait_event(ev)
                with self._on(stream):
                    part = index.numpy()[at : at + rb + 1]  # this flight's, free since its last finish
                    part[:m] = lo + (np.arange(m) if idx is None else idx)
                    part[m:rb] = part[0]  # padded rows repeat a real row
                    part[rb] = m
                    sel.copy_(index[at : at + rb + 1], non_blocking=True)
                    at += rb + 1
                    g.replay()
                    if self.gru:
                        stepped.append((out, m))
                    host[flight][:m].copy_(out[0][:m], non_blocking=True)
                    done[s].record(stream)
                handle.append((done[s], slice(None) if idx is None else idx, host[flight], m))
        except BaseException:
            self._abandon(stepped)
            raise
        if self.gru:
            for s, *_ in parts:
                self.last_done[s] = done[s]
        return handle

    def _upload(self, buf: Inputs, n: int, bucket: int, lo: int) -> None:
        """buf's first n rows into staging rows [lo, lo + n), on the current (upload)
        stream: one non-blocking copy per field from pinned memory, raw dtypes."""
        st, b = self.staging, bucket
        f = self.layout.f_ent
        st["ent"][lo : lo + n, :b].copy_(buf.ent[: n * b * f].view(n, b, f), non_blocking=True)
        st["ent_type"][lo : lo + n, :b].copy_(buf.ent_type[: n * b].view(n, b), non_blocking=True)
        for name in ("glob", "n_ent", "mask") + (("rows", "flags") if self.gru else ()):
            st[name][lo : lo + n].copy_(getattr(buf, name)[:n], non_blocking=True)

    def _abandon(self, stepped: list[tuple]) -> None:
        """A launch that failed part-way: wait for what it queued (the engine frees the
        round's buffers next), then give the rows of each net already stepped the state
        they had (newest first; a round's nets hold distinct rows)."""
        for s in (self.upload, *self.streams):
            s.synchronize()
        for (_, rows, prev), m in reversed(stepped):
            self.state.index_copy_(0, rows[:m], prev[:m])
        if self.cuda:
            torch.cuda.current_stream(self.device).synchronize()

    @torch.no_grad()
    def reset(self, rows: torch.Tensor) -> None:
        """Zero these table rows' GRU state (a game restarted): on the upload stream, after
        every net's last round, so before any later round's upload and gather."""
        with self._on(self.upload):
            for ev in self.last_done.values():
                self.upload.wait_event(ev)
            self.state.index_fill_(0, rows.to(self.device, non_blocking=True), 0.0)

    @staticmethod
    def finish(handle: list, actions: np.ndarray, logp: np.ndarray, value: np.ndarray,
               state_in: np.ndarray | None = None) -> None:
        """Wait for a launched round (one blocking wait per net; the GIL is released
        meanwhile) and write its answers into actions, logp, value and (GRU) state_in
        (a graph's packed answers: the heads' actions as floats, exact below 2**24, then
        log-probability, value, state)."""
        h = actions.shape[1]  # the heads
        for done, idx, packed, m in handle:
            done.synchronize()
            a = packed[:m].numpy()
            actions[idx] = a[:, :h]
            logp[idx] = a[:, h]
            value[idx] = a[:, h + 1]
            if state_in is not None:
                state_in[idx] = a[:, h + 2 :]

    def run(self, buf: Inputs, n: int, bucket: int, used: np.ndarray, actions: np.ndarray, logp: np.ndarray,
            value: np.ndarray) -> np.ndarray | None:
        """One round in one go, on the worker (eager GRU; or flight 0 of a graphed runner,
        for an engine that keeps one round at a time). Returns the GRU state each row had
        before the round, None without GRU."""
        if not self.graphed:
            return self._run_eager(buf, n, bucket, used, actions, logp, value)
        state_in = np.zeros((n, self.state.shape[1]), np.float32) if self.gru else None
        self.finish(self.launch(buf, n, bucket, used, 0), actions, logp, value, state_in)
        return state_in

    @torch.no_grad()
    def _run_eager(self, buf, n, bucket, used, actions, logp, value):
        """The GRU network without graphs, one round at a time: the same upload as a graphed
        round, the nets' indices from the host, outputs copied to pinned memory and one
        blocking wait per net at the end (it used to sync about ten times a
        round, on boolean masks, nonzero() and .cpu())."""
        parts = self.plan(buf.np["net"], n, bucket, used)
        if self.eager_out is None:
            pin, cap = self.cuda, self.max_rows
            self.eager_out = (torch.zeros(cap, self.layout.n_heads, dtype=torch.int64, pin_memory=pin),
                              torch.zeros(cap, pin_memory=pin), torch.zeros(cap, pin_memory=pin),
                              torch.zeros(cap, self.state.shape[1], pin_memory=pin))
        stage, uploaded, done, index = self.staging, self.uploaded[0], self.done[0], self.index[0]
        self.upload.wait_stream(self._current())  # a reset_rows() of the eager path runs on the worker's stream
        with self._on(self.upload):
            self._upload(buf, n, bucket, 0)
            obs = Obs(stage["glob"][:n], stage["ent"][:n, :bucket], stage["ent_type"][:n, :bucket].long(),
                      stage["n_ent"][:n].long(), stage["mask"][:n].bool())
            rows = stage["rows"][:n]
            keep = ((stage["flags"][:n] & layout.FLAG_FIRST) == 0).to(self.state.dtype)[:, None]
            state_in = self.state.index_select(0, rows) * keep  # a new episode starts from zeros
            uploaded.record(self.upload)
        a, lp, v, si = self.eager_out
        index.numpy()[:n] = np.concatenate([np.arange(n) if idx is None else idx for _, idx, _, _ in parts])
        at, waits = 0, []
        for s, idx, m, _ in parts:
            stream = self.streams[s]
            stream.wait_event(uploaded)
            with self._on(stream):
                sel = index[at : at + m].to(self.device, non_blocking=True)
                r = self.nets[s].act(obs.index(sel), self.gens[s], state=state_in.index_select(0, sel))
                self.state.index_copy_(0, rows.index_select(0, sel), r.state)
                for h, o in zip((a, lp, v, si), (r.actions, r.logp, r.value, state_in.index_select(0, sel))):
                    h[at : at + m].copy_(o, non_blocking=True)
                done[s].record(stream)
            waits.append((done[s], slice(None) if idx is None else idx, slice(at, at + m)))
            at += m
        out_state = np.zeros((n, self.state.shape[1]), np.float32)
        for ev, idx, part in waits:
            ev.synchronize()
            actions[idx], logp[idx], value[idx] = a[part].numpy(), lp[part].numpy(), v[part].numpy()
            out_state[idx] = si[part].numpy()
        return out_state
