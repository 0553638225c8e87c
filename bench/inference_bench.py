"""Inference rounds against batch size: rows/s, round latency, and the round's overhead
beyond the network's own compute (submit's copy + the hand-off to the worker thread +
the answer's assembly), on this machine's CPU.

    .venv/bin/python bench/inference_bench.py [--sizes 1,4,16,64,256] [--max-ent 48]
        [--d-model 64 --layers 2 --heads 4] [--threads 1] [--repeats 200]

"bare" is net.act() on tensors already made, on the calling thread, with the same
torch thread count: the network's own compute. "round" is engine.submit(batch) to
future.result() from the caller's side. Two overheads (medians): round-bare (paired
runs; noisy where other processes share the cores) and in-round overhead = round
latency - the time inside the network in that same round (RoundStats.net_ms): copy
out of the Batch + hand-off to the worker + answer assembly and the caller's wake-up.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import torch

from w3async.learn.inference import InferenceEngine, synthetic_batch
from w3async.learn.network import NetConfig, Network, obs_from_numpy
from w3async.games.null import NULL_SPEC

try:  # the reference game's spec when it exists; the null game's otherwise
    from w3async.games.duel.spec import DUEL_SPEC as SPEC
except ImportError:
    SPEC = NULL_SPEC


def median_ms(fn, repeats: int, warmup: int = 20) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="1,4,16,64,256")
    ap.add_argument("--max-ent", type=int, default=48, help="entities per row drawn from 0..max-ent")
    ap.add_argument("--d-model", type=int, default=64)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--threads", type=int, default=1, help="torch threads of the worker (and of the bare run)")
    ap.add_argument("--repeats", type=int, default=200)
    ap.add_argument("--device", default="cpu", help="cpu, or cuda (the graphed path)")
    ap.add_argument("--beside", default="",
                    help="update_pause_ms values (e.g. 0,8): rounds of 16 rows while a learner thread updates")
    ap.add_argument("--learner-nice", type=int, default=0, help="nice of the learner thread in --beside")
    ap.add_argument("--gil", default="",
                    help="update_pause_ms values (e.g. 0,8): the GIL's cost, rounds of 16 rows beside a learner in a "
                         "thread of their process against the same learner in a process of its own")
    ap.add_argument("--learner", action="store_true",
                    help="also time a PPO update (32 sequences x 16 steps, 2 epochs) with 1 and 2 torch threads")
    args = ap.parse_args()
    sizes = [int(x) for x in args.sizes.split(",")]
    cfg = NetConfig(d_model=args.d_model, n_heads=args.heads, n_layers=args.layers)
    torch.set_num_threads(args.threads)
    params = sum(p.numel() for p in Network(SPEC, cfg).parameters())
    print(f"spec {SPEC.name}, network d_model={cfg.d_model} layers={cfg.n_layers} heads={cfg.n_heads} "
          f"({params / 1e3:.0f}k parameters), torch threads {args.threads}, entities 0..{args.max_ent}, "
          f"torch {torch.__version__}")
    print(f"{'rows':>5} {'bucket':>6} {'bare ms':>8} {'round ms':>9} {'rows/s':>8} {'round-bare':>10} "
          f"{'in-round overhead':>17} {'copy':>6} {'handoff':>7} {'worker':>6} {'wake':>6}")
    rng = np.random.default_rng(0)
    cuda = args.device.startswith("cuda")
    with InferenceEngine(SPEC, cfg, max_rows=max(sizes), num_threads=args.threads, device=args.device) as engine:
        net = engine.nets[0]
        for n in sizes:
            b = synthetic_batch(SPEC, n, rng, max_ent=args.max_ent)
            obs = obs_from_numpy(b.glob[:n], b.ent, b.ent_type, b.n_ent[:n], b.mask[:n], device=args.device)
            gen = torch.Generator(device=args.device).manual_seed(0)
            bare, rounds, stats = [], [], []
            # Bare and round alternate, so both see the same load from other processes.
            for i in range(args.repeats + 20):
                t0 = time.perf_counter()
                with torch.inference_mode():
                    net.act(obs, gen)  # on CUDA: eager, not graphed (the round replays a graph)
                if cuda:
                    torch.cuda.synchronize()
                t1 = time.perf_counter()
                st = engine.submit(b).result().stats
                t2 = time.perf_counter()
                if i >= 20:
                    bare.append((t1 - t0) * 1e3)
                    rounds.append((t2 - t1) * 1e3)
                    stats.append(st)
            med = statistics.median
            t_bare, t_round = med(bare), med(rounds)
            paired = med(r - x for r, x in zip(rounds, bare))
            # what a round costs beyond the network, measured inside each round
            inround = med(r - st.net_ms for r, st in zip(rounds, stats))
            copy, handoff = med(x.copy_ms for x in stats), med(x.queue_ms for x in stats)
            worker = med(x.compute_ms - x.net_ms for x in stats)  # weights check, answers, stats
            wake = med(r - x.latency_ms for r, x in zip(rounds, stats))  # the caller's wake-up
            print(f"{n:>5} {b.bucket:>6} {t_bare:>8.3f} {t_round:>9.3f} {n / t_round * 1e3:>8.0f} {paired:>10.3f} "
                  f"{inround:>17.3f} {copy:>6.3f} {handoff:>7.3f} {worker:>6.3f} {wake:>6.3f}")
    if args.learner:
        learner_line(SPEC, cfg, args.max_ent, args.device)
    for pause in [float(x) for x in args.beside.split(",") if x]:
        beside_line(SPEC, cfg, args.max_ent, pause, nice=args.learner_nice, device=args.device)
    if args.gil:
        gil_table(SPEC, cfg, args.max_ent, [float(x) for x in args.gil.split(",") if x], args.learner_nice)


def gil_table(spec, cfg: NetConfig, max_ent: int, pauses: list[float], nice: int, rows: int = 16,
              seconds: float = 8.0, repeats: int = 2) -> None:
    """The GIL's cost on the rounds: the same learner loop beside the rounds in
    a thread of their process (a run's layout: the GIL shared) and in a process of its
    own (the same cores, no GIL shared), interleaved `repeats` times per pause. What the
    thread costs beyond the process is the GIL's."""
    q = lambda xs, p: float(np.percentile(xs, p)) if xs else float("nan")  # noqa: E731
    print(f"\nthe GIL's cost: rounds of {rows} rows while a learner updates, learner nice {nice}, {seconds:g} s each, "
          f"interleaved x{repeats}")
    print("| update_pause_ms | learner in | idle median ms | during updates median ms | p90 ms | rounds/s | update s |")
    print("| ---: | --- | ---: | ---: | ---: | ---: | ---: |")
    tb = synthetic_trajbatch(max_ent)
    for pause in pauses:
        got: dict[str, list] = {"thread": [[], [], [], 0], "process": [[], [], [], 0]}
        for _ in range(repeats):
            for where in ("thread", "process"):
                idle, busy, upd = rounds_beside_updates(spec, cfg, tb, pause, rows, seconds, nice=nice, max_ent=max_ent,
                                                        learner_in=where)
                g = got[where]
                g[0] += idle
                g[1] += busy
                g[2] += upd
                g[3] += len(idle) + len(busy)
        for where, (idle, busy, upd, n) in got.items():
            print(f"| {pause:g} | {where} | {q(idle, 50):.2f} | {q(busy, 50):.2f} | {q(busy, 90):.2f} | "
                  f"{n / (seconds * repeats):.0f} | {statistics.median(upd) if upd else float('nan'):.2f} |")


def _learner_process(spec, cfg: NetConfig, pause_ms: float, nice: int, idle_s: float, max_ent: int, ready, updating,
                     stop, times) -> None:
    """rounds_beside_updates' learner in a process of its own (spawned: no GIL shared)."""
    from w3async.learn.learner import Learner, LearnerConfig

    torch.set_num_threads(1)
    learner = Learner(Network(spec, cfg), LearnerConfig(minibatch_seqs=8, update_epochs=2, update_pause_ms=pause_ms,
                                                        thread_nice=nice))
    tb = synthetic_trajbatch(max_ent)
    ready.set()
    while not stop.is_set():
        time.sleep(idle_s)
        updating.set()
        times.put(learner.run_update(tb).update_s)
        updating.clear()


def beside_line(spec, cfg: NetConfig, max_ent: int, pause_ms: float, rows: int = 16, seconds: float = 8.0,
                nice: int = 0, device: str = "cpu") -> None:
    """Rounds of `rows` rows back to back (as a busy supervisor would run them) while a
    learner thread runs updates with update_pause_ms = pause_ms: round latency while the
    learner is idle and while it updates, and the update's time."""
    idle, busy, update_s = rounds_beside_updates(spec, cfg, synthetic_trajbatch(max_ent), pause_ms, rows, seconds,
                                                 nice=nice, device=device, max_ent=max_ent)
    q = lambda xs, p: float(np.percentile(xs, p)) if xs else float("nan")  # noqa: E731
    print(f"update_pause_ms {pause_ms:g}, learner nice {nice}: rounds of {rows} rows idle median {q(idle, 50):.2f} ms (p90 {q(idle, 90):.2f}, "
          f"n {len(idle)}), during updates median {q(busy, 50):.2f} ms (p90 {q(busy, 90):.2f}, n {len(busy)}); "
          f"update {statistics.median(update_s) if update_s else float('nan'):.2f} s ({len(update_s)} updates)")


def rounds_beside_updates(spec, cfg: NetConfig, tb, pause_ms: float, rows: int, seconds: float, nice: int = 0,
                          device: str = "cpu", max_ent: int = 48, warm: int = 0, idle_s: float = 0.5,
                          learner_in: str = "thread"):
    """Rounds of `rows` rows back to back while a learner thread on the same device runs
    an update of `tb`, waits `idle_s` (as for data), and again: the round latencies (ms)
    while it is idle, those while it updates, and the updates' times (s). learner_in
    "process": the same learner in a spawned process instead (the CPU only; a synthetic
    batch of max_ent), for the GIL's cost (gil_table)."""
    import threading

    from w3async.learn.learner import Learner, LearnerConfig

    b = synthetic_batch(spec, rows, np.random.default_rng(1), max_ent=max_ent)
    if learner_in == "process":
        import multiprocessing as mp

        ctx = mp.get_context("spawn")
        ready, updating, stop, times = ctx.Event(), ctx.Event(), ctx.Event(), ctx.Queue()
        proc = ctx.Process(target=_learner_process,
                           args=(spec, cfg, pause_ms, nice, idle_s, max_ent, ready, updating, stop, times))
        proc.start()
        idle, busy = _rounds_while(spec, cfg, b, rows, seconds, device, warm, updating, lambda: ready.wait(120))
        stop.set()
        proc.join(120)
        update_s = []
        while not times.empty():
            update_s.append(times.get())
        return idle, busy, update_s
    learner = Learner(Network(spec, cfg), LearnerConfig(minibatch_seqs=8, update_epochs=2, update_pause_ms=pause_ms,
                                                        thread_nice=nice), device=device)
    if warm:
        learner.run_update(tb)  # kernels, the allocator, the learner's stream
    updating, stop, update_s = threading.Event(), threading.Event(), []

    def learn():
        while not stop.is_set():
            time.sleep(idle_s)
            updating.set()
            update_s.append(learner.run_update(tb).update_s)
            updating.clear()

    th = threading.Thread(target=learn)
    idle, busy = _rounds_while(spec, cfg, b, rows, seconds, device, warm, updating, th.start)
    stop.set()
    th.join()
    return idle, busy, update_s


def _rounds_while(spec, cfg, b, rows, seconds, device, warm, updating, start) -> tuple[list, list]:
    """Rounds of b back to back for `seconds` after start(): latencies (ms) while
    `updating` was clear, and while it was set before and after the round."""
    idle, busy = [], []
    with InferenceEngine(spec, cfg, max_rows=max(rows, 64), device=device) as engine:
        for _ in range(warm):
            engine.submit(b).result()
        start()
        t_end = time.perf_counter() + seconds
        while time.perf_counter() < t_end:
            was = updating.is_set()
            t0 = time.perf_counter()
            engine.submit(b).result()
            (busy if was and updating.is_set() else idle).append((time.perf_counter() - t0) * 1e3)
    return idle, busy


def synthetic_trajbatch(max_ent: int, n_seq: int = 32, t: int = 16, bucket: int = 48, n_ent: np.ndarray | None = None):
    """A batch of random values; entity counts uniform in 1..max_ent a step, or n_ent's."""
    from w3async.learn.trajectories import TrajBatch

    rng = np.random.default_rng(0)
    if n_ent is None:
        n_ent = rng.integers(1, max_ent + 1, (n_seq, t)).astype(np.int32)
    real = np.arange(bucket) < n_ent[..., None]
    mask = np.zeros((n_seq, t, 4, 192), np.uint8)
    mask[..., 0] = 1
    z = np.zeros((n_seq, t), np.float32)
    return TrajBatch(glob=rng.standard_normal((n_seq, t, 32), dtype=np.float32),
                     ent=rng.standard_normal((n_seq, t, bucket, 16), dtype=np.float32) * real[..., None],
                     ent_type=np.zeros((n_seq, t, bucket), np.int16), n_ent=n_ent, mask=mask,
                     action=np.zeros((n_seq, t, 4), np.int32), logp=z, value=z, next_value=z, reward=z + 1,
                     done=z > 0, truncated=z > 0, first=z > 0, version=np.zeros((n_seq, t), np.uint32),
                     rows=np.arange(n_seq, dtype=np.int32), state0=None, bucket=bucket)


def learner_line(spec, cfg: NetConfig, max_ent: int, device: str = "cpu") -> None:
    """An update's time on a synthetic batch, 1 vs 2 torch threads (set OMP_WAIT_POLICY
    in the environment to compare OpenMP's waiting)."""
    import os

    from w3async.learn.learner import Learner, LearnerConfig

    tb = synthetic_trajbatch(max_ent)
    print(f"learner (OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY', 'unset')}): update of {tb.reward.size} steps, "
          f"2 epochs, minibatches of 8 sequences")
    for threads in (1, 2):
        learner = Learner(Network(spec, cfg), LearnerConfig(minibatch_seqs=8, update_epochs=2, num_threads=threads),
                          device=device)
        learner.run_update(tb)
        times = []
        for _ in range(3):
            times.append(learner.run_update(tb).update_s)
        print(f"  {threads} thread(s): {statistics.median(times):.2f} s an update, "
              f"{tb.reward.size / statistics.median(times):.0f} steps/s")


if __name__ == "__main__":
    main()
