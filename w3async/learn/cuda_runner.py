"""The inference engine's CUDA path (w3async.learn.inference): streams, CUDA graphs,
pinned buffers. Made by InferenceEngine on its worker thread when the device is "cuda"
and torch.cuda.is_available(); nothing of it runs on a CPU. It is UNCHECKED unless
docs/performance.md says a GPU check ran.

Its interface to the engine is what the constructor takes and two calls, all on the
engine's worker thread (the only thread that touches the networks):

    runner = CudaRunner(nets, device, max_rows, state, gen, flights=2, gru_graphs=True)
        nets: the engine's networks, net by net (shared: the runner copies weights into them)
        state: the GRU state per table row plus one scratch row last (shared, written in
               place), or None without GRU
        gen: the generator the eager GRU path samples from
        flights: rounds that may be in flight at once, each with its own device buffers
        gru_graphs: False runs a GRU network eagerly, one round at a time (the fallback)
    runner.load(k, state_dict, ready)  # new weights for net k, ordered with its replays (ready: the
                                       # event of a device-to-device copy, or None)
    runner.graphed                     # True: rounds go through launch and finish
    h = runner.launch(buf, n, bucket, used, flight)   # queued on the device, no host wait
    runner.finish(h, actions, logp, value, state_in)  # (the finisher thread) waits, scatters
    runner.run(buf, n, bucket, used, actions, logp, value) -> state_in | None   # in one go
    runner.reset(rows)                 # GRU: zero these rows' state, ordered with the rounds

A flight (w3async.learn.flights) is reused only after its round's finish, so the next
round's upload never overwrites a staging copy or pinned output an earlier round still
reads; on each net's stream, rounds are ordered by the stream itself.
"""

from __future__ import annotations

import numpy as np
import torch

from w3async.learn.inputs import Inputs
from w3async.learn.network import Network, Obs
from w3async.sync import layout


class CudaRunner:
    """The GPU path (UNCHECKED on this project's CPU machines; see the module docstring).

    - One upload per round: the round's rows go from the pinned input buffers to the
      device staging copy of the round's flight (one non-blocking copy per field, raw
      dtypes) on the upload stream, while earlier rounds compute.
    - Per net: a CUDA stream of its own at high priority (seeds/000: graphs captured on
      one stream keep that stream's cuBLAS workspace; two networks' graphs sharing one
      hung the GPU), a graph memory pool of its own and, per (bucket, row bucket), a CUDA
      graph captured before the first round (capture_all) over static device inputs in
      the raw dtypes (the casts are inside the graph) with pinned host outputs. A round
      gathers each net's rows from staging into the static inputs on the device, zeroes
      the static rows past them (seeds/000: stale padding crashed a run), replays, and
      copies the outputs to the flight's pinned memory; the waits are the finisher's.
    - Events are made once per net and reused (creating and destroying them takes the
      CUDA context's lock, seeds/000).
    - New weights are copied into a net on that net's stream, so they are
      ordered with its replays. Capture uses capture_error_mode="thread_local", so the
      learner's thread may use the GPU meanwhile.
    - Sampling draws from the default CUDA generator, whose offsets graphs advance.
    - A GRU network is graphed too: each graph gathers its rows' state from the engine's
      state tensor by a static row index (padded rows point at a scratch row), zeroes it
      where FIRST is set, steps, and scatters the new state back, all inside the graph.
      Rounds of different nets may write the same table row (a lane's opponent changes),
      so a GRU round's stream also waits for every other net's last round; a reset runs
      on the upload stream after every net's last round and before the next upload.
    """

    ROW_BUCKETS = (8, 32, 128, 512)
    _FIELDS = ("glob", "ent", "ent_type", "n_ent", "mask")

    def __init__(self, nets: list[Network], device: torch.device, max_rows: int, state: torch.Tensor | None,
                 gen: torch.Generator | None, flights: int = 2, gru_graphs: bool = True):
        self.nets, self.device, self.state, self.gen = nets, device, state, gen
        self.gru = state is not None
        self.graphed = not self.gru or gru_graphs
        self.scratch = state.shape[0] - 1 if self.gru else 0  # the row padded graph rows read and write
        self.last_done: dict[int, torch.cuda.Event] = {}  # net -> the event of its last round (GRU ordering)
        # Inference streams at high priority: the learner's, at the default, yields to
        # rounds (issue 13; a priority outside the device's range is clamped by CUDA).
        self.upload = torch.cuda.Stream(device=device, priority=-1)
        self.streams = [torch.cuda.Stream(device=device, priority=-1) for _ in nets]
        # One memory pool per net: its graphs replay one at a time on its stream, so they
        # may share scratch memory; nets run concurrently, so they may not.
        self.pools = [torch.cuda.graph_pool_handle() for _ in nets]
        self.max_rows, self.flights = max_rows, flights
        cap, dev = max_rows, device
        # Per flight: a staging copy of the round's rows, its upload's event, a pinned
        # index buffer (each net's rows, net by net) and one "done" event per net.
        self.staging = [{
            "glob": torch.zeros(cap, layout.G_GLOB, device=dev),
            "ent": torch.zeros(cap * layout.E_MAX * layout.F_ENT, device=dev),
            "ent_type": torch.zeros(cap * layout.E_MAX, dtype=torch.int16, device=dev),
            "n_ent": torch.zeros(cap, dtype=torch.int32, device=dev),
            "mask": torch.zeros(cap, layout.N_HEADS, layout.HEAD_MAX, dtype=torch.uint8, device=dev),
            **({"rows": torch.zeros(cap, dtype=torch.int64, device=dev),
                "flags": torch.zeros(cap, dtype=torch.int32, device=dev)} if self.gru else {}),
        } for _ in range(flights)]
        self.uploaded = [torch.cuda.Event() for _ in range(flights)]
        self.index = [torch.zeros(cap, dtype=torch.int64, pin_memory=True) for _ in range(flights)]
        self.done = [[torch.cuda.Event() for _ in nets] for _ in range(flights)]
        self.graphs: dict[tuple[int, int, int], tuple] = {}

    def capture_all(self, buckets) -> int:
        """Capture every graph a round can ask for (each net, entity bucket and row bucket
        up to max_rows) now, before the first round and before the learner starts: entering
        a capture synchronises the device and empties the caching allocator, tens of ms a
        graph that games would wait for inside a round (seeds/000 captured before its
        loop). Returns the graphs made (none for a GRU network run eagerly)."""
        if not self.graphed:
            return 0
        top = next((r for r in self.ROW_BUCKETS if r >= min(self.max_rows, self.ROW_BUCKETS[-1])), self.ROW_BUCKETS[-1])
        for k in range(len(self.nets)):
            for bucket in buckets:
                for rows in (r for r in self.ROW_BUCKETS if r <= top):
                    self._graph(k, bucket, rows)
        return len(self.graphs)

    def load(self, k: int, sd: dict, ready: torch.cuda.Event | None = None) -> None:
        """New weights for net k, on its stream (ordered with its replays, no host wait).
        Weights on the device come with the event of their copy: the stream waits on it,
        not the host, and their memory is marked in use by the stream until the copy is
        done. Weights on the host are pinned (InferenceEngine.load_net): the caching host
        allocator keeps them until the copy is done."""
        stream = self.streams[k]
        if ready is not None:
            stream.wait_event(ready)
            for t in sd.values():
                t.record_stream(stream)
        own = self.nets[k].state_dict()
        missing = sorted(set(own) ^ set(sd))
        if missing:  # load_state_dict's check, which a plain copy_ would skip
            raise ValueError(f"net {k}: weights do not match the network (keys {missing[:4]})")
        with torch.cuda.stream(stream), torch.no_grad():
            for name, t in own.items():
                t.copy_(sd[name], non_blocking=True)

    def _graph(self, k: int, bucket: int, rows: int):
        key = (k, bucket, rows)
        if key in self.graphs:
            return self.graphs[key]
        net, stream, dev = self.nets[k], self.streams[k], self.device
        st = {
            "glob": torch.zeros(rows, layout.G_GLOB, device=dev),
            "ent": torch.zeros(rows, bucket, layout.F_ENT, device=dev),
            "ent_type": torch.zeros(rows, bucket, dtype=torch.int16, device=dev),
            "n_ent": torch.zeros(rows, dtype=torch.int32, device=dev),
            "mask": torch.zeros(rows, layout.N_HEADS, layout.HEAD_MAX, dtype=torch.uint8, device=dev),
        }
        st["mask"][:, :, 0] = 1  # warm-up rows need an allowed choice per head
        if self.gru:  # warm-up and padded rows read and write the scratch row only
            st["rows"] = torch.full((rows,), self.scratch, dtype=torch.int64, device=dev)
            st["flags"] = torch.zeros(rows, dtype=torch.int32, device=dev)

        def step():
            obs = Obs(st["glob"], st["ent"], st["ent_type"].long(), st["n_ent"].long(), st["mask"].bool())
            if not self.gru:
                return net.act(obs, None), None
            keep = ((st["flags"] & layout.FLAG_FIRST) == 0).to(self.state.dtype)[:, None]
            state_in = self.state.index_select(0, st["rows"]) * keep  # a new episode starts from zeros
            r = net.act(obs, None, state=state_in)
            self.state.index_copy_(0, st["rows"], r.state)
            return r, state_in

        stream.wait_stream(torch.cuda.current_stream(dev))
        with torch.cuda.stream(stream):
            for _ in range(2):  # warm up on the capture stream (cuBLAS handles, the allocator)
                step()
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g, pool=self.pools[k], stream=stream, capture_error_mode="thread_local"):
                out = step()
        stream.synchronize()
        width = self.state.shape[1] if self.gru else 0
        host = [[torch.zeros(rows, layout.N_HEADS, dtype=torch.int64, pin_memory=True),
                 torch.zeros(rows, pin_memory=True), torch.zeros(rows, pin_memory=True),
                 torch.zeros(rows, width, pin_memory=True)] for _ in range(self.flights)]
        self.graphs[key] = (g, st, out, host)  # host: the pinned outputs, one set per flight
        return self.graphs[key]

    def launch(self, buf: Inputs, n: int, bucket: int, used: np.ndarray, flight: int) -> list:
        """Queue one round (buf's first n rows, entity bucket `bucket`, the nets in `used`)
        on the device with the buffers of `flight`, and return at once with its handle for
        finish(). No host wait: the upload and each net's gather, replay and output copy
        are ordered by streams and events. buf is read by the upload until finish."""
        stage, uploaded, done = self.staging[flight], self.uploaded[flight], self.done[flight]
        sizes = {"glob": n, "ent": n * bucket * layout.F_ENT, "ent_type": n * bucket, "n_ent": n, "mask": n}
        if self.gru:
            sizes.update(rows=n, flags=n)
        with torch.cuda.stream(self.upload):
            for name, k in sizes.items():
                stage[name][:k].copy_(getattr(buf, name)[:k], non_blocking=True)  # pinned -> device
            uploaded.record(self.upload)
        ent = stage["ent"][: sizes["ent"]].view(n, bucket, layout.F_ENT)
        ent_type = stage["ent_type"][: sizes["ent_type"]].view(n, bucket)
        src = {"glob": stage["glob"][:n], "ent": ent, "ent_type": ent_type, "n_ent": stage["n_ent"][:n],
               "mask": stage["mask"][:n]}
        fields = self._FIELDS
        if self.gru:
            src.update(rows=stage["rows"][:n], flags=stage["flags"][:n])
            fields = self._FIELDS + ("rows", "flags")
        waits = dict(self.last_done) if self.gru else {}
        net_np = buf.np["net"][:n]
        index, at = self.index[flight], 0
        handle = []
        for s in used:
            s = int(s)
            idx = np.flatnonzero(net_np == s) if len(used) > 1 else None
            m = n if idx is None else len(idx)
            rb = next((r for r in self.ROW_BUCKETS if r >= m), None)
            if rb is None:
                raise ValueError(f"{m} rows for one network; the CUDA graphs go up to {self.ROW_BUCKETS[-1]} rows")
            g, st, (out, state_in), host = self._graph(s, bucket, rb)
            stream = self.streams[s]
            stream.wait_event(uploaded)
            for other, ev in waits.items():  # GRU: another net's last round may have written our rows
                if other != s:
                    stream.wait_event(ev)
            with torch.cuda.stream(stream):
                if idx is not None:  # the indices from the host: nonzero() on the device would sync
                    index.numpy()[at : at + m] = idx
                    sel = index[at : at + m].to(self.device, non_blocking=True)
                    at += m
                for name in fields:
                    st[name][:m].copy_(src[name] if idx is None else src[name].index_select(0, sel))
                    st[name][m:].zero_()
                st["mask"][m:, :, 0] = 1  # padded rows: one allowed choice, their answers unread
                if self.gru:
                    st["rows"][m:] = self.scratch  # padded rows step the scratch row's state
                g.replay()
                outs = (out.actions, out.logp, out.value) + ((state_in,) if self.gru else ())
                for h, o in zip(host[flight], outs):
                    h[:m].copy_(o[:m], non_blocking=True)
                done[s].record(stream)
            if self.gru:
                self.last_done[s] = done[s]
            handle.append((done[s], slice(None) if idx is None else idx, host[flight], m))
        return handle

    def reset(self, rows: torch.Tensor) -> None:
        """Zero these table rows' GRU state (a game restarted): on the upload stream, after
        every net's last round, so before any later round's upload and gather."""
        with torch.cuda.stream(self.upload):
            for ev in self.last_done.values():
                self.upload.wait_event(ev)
            self.state.index_fill_(0, rows.to(self.device, non_blocking=True), 0.0)

    @staticmethod
    def finish(handle: list, actions: np.ndarray, logp: np.ndarray, value: np.ndarray,
               state_in: np.ndarray | None = None) -> None:
        """Wait for a launched round (one wait per net; the GIL is released meanwhile) and
        write its answers into actions, logp, value and (GRU) state_in (row order)."""
        for done, idx, (a, lp, v, st), m in handle:
            done.synchronize()
            actions[idx] = a[:m].numpy()
            logp[idx] = lp[:m].numpy()
            value[idx] = v[:m].numpy()
            if state_in is not None:
                state_in[idx] = st[:m].numpy()

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

    def _run_eager(self, buf, n, bucket, used, actions, logp, value):
        dev = self.device
        obs = buf.obs(n, bucket).to(dev)
        rows = buf.rows[:n].to(dev)
        first = ((buf.flags[:n] & layout.FLAG_FIRST) != 0).to(dev)
        state_in = self.state[rows].clone()
        state_in[first] = 0.0
        net_of_row = buf.net[:n].to(dev)
        for s in used:
            stream = self.streams[int(s)]
            stream.wait_stream(torch.cuda.current_stream(dev))
            with torch.cuda.stream(stream):
                idx = (net_of_row == int(s)).nonzero()[:, 0]
                r = self.nets[int(s)].act(obs.index(idx), self.gen, state=state_in[idx])
                self.state[rows[idx]] = r.state
                i = idx.cpu().numpy()
                actions[i] = r.actions.cpu().numpy()
                logp[i] = r.logp.cpu().numpy()
                value[i] = r.value.cpu().numpy()
        return state_in.cpu().numpy()
