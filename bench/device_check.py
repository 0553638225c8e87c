"""Issue 13's device check: the inference engine and the learner on one GPU, each figure
with the bound it must meet written beside it (PASS / FAIL), in one run.

    python bench/device_check.py                  # on a GPU machine (bench/device_check.sh)
    python bench/device_check.py --device cpu --quick   # here: the script itself, small

1. Rounds per (entity bucket, rows): round latency (submit to result, median and p99)
   and rows/s through the engine; the same rows through the network eagerly (upload,
   act, answers back, synchronised) for "graph against eager"; rounds/s with two rounds
   submitted ahead against one at a time (rounds in flight).
2. Syncs inside rounds: torch.cuda.set_sync_debug_mode("warn") around rounds after the
   warm-up; every warning counted (worker thread included).
3. Memory: allocated and reserved after the warm-up and after --rounds more rounds.
4. Rounds during a learner update against idle, update_pause_ms 0 and 8, and the
   update's time (the learner on the same device, a thread beside the rounds, as a run
   has it).
5. CPU against GPU: values and log-probabilities of the same actions by the same weights,
   without and with a GRU (its state after a step too); and the GRU path through the
   engines (the device's graphed, rounds in flight) against a CPU engine, 30 rounds.

Bounds (issue 13, one H200): 64 rows at bucket 48 under 2 ms median; 256 rows at bucket
160 under 5 ms; graph at least 2x eager; no sync inside a round; rounds during an update
within 1.5x of idle at pause 8; memory flat (under 1 MiB of growth); CPU and GPU within
1e-3 (values, log-probabilities) and 1e-4 (GRU state). With --device cpu the latency
bounds are not applied (they are the GPU's) and section 2 is skipped.
Exit status: 0 when every bound holds, 1 otherwise.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from inference_bench import rounds_beside_updates, synthetic_trajbatch  # noqa: E402
from w3async.games.duel.spec import DUEL_SPEC as SPEC  # noqa: E402
from w3async.learn.inference import InferenceEngine, synthetic_batch  # noqa: E402
from w3async.learn.network import NetConfig, Network, obs_from_numpy  # noqa: E402
from w3async.sync import layout  # noqa: E402

CASES = ((48, 8), (48, 64), (48, 256), (160, 64), (160, 256))  # (entity bucket, rows)
BOUND_MS = {(48, 64): 2.0, (160, 256): 5.0}
RESULTS: list[tuple[str, str, str, bool | None]] = []  # (what, measured, bound, held)


def check(what: str, measured: str, bound: str, held: bool | None) -> None:
    RESULTS.append((what, measured, bound, held))
    mark = "-" if held is None else ("PASS" if held else "FAIL")
    print(f"  {mark:4} {what}: {measured} (bound: {bound})", flush=True)


def batch_for(bucket: int, rows: int, seed: int = 1):
    """Rows whose largest entity count fills `bucket` (the engine runs that bucket)."""
    rng = np.random.default_rng(seed)
    for _ in range(100):
        b = synthetic_batch(SPEC, rows, rng, max_ent=bucket)
        if b.bucket == bucket:
            return b
    raise RuntimeError(f"no batch of bucket {bucket}")


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def rounds(engine: InferenceEngine, b, n: int) -> list[float]:
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        engine.submit(b).result()
        out.append((time.perf_counter() - t0) * 1e3)
    return out


def in_flight_rate(engine: InferenceEngine, b, n: int, ahead: int) -> float:
    """Rounds/s with `ahead` rounds submitted before the oldest is waited for (the loop's
    way with rounds in flight); ahead=1 is one round at a time."""
    t0 = time.perf_counter()
    futs = [engine.submit(b) for _ in range(ahead)]
    for _ in range(n - ahead):
        futs.pop(0).result()
        futs.append(engine.submit(b))
    for f in futs:
        f.result()
    return n / (time.perf_counter() - t0)


def eager_ms(net: Network, b, device: torch.device, n: int) -> float:
    """The same rows through the network without a graph: upload, act, answers back."""
    k = b.n
    times = []
    with torch.no_grad():
        for _ in range(n):
            t0 = time.perf_counter()
            obs = obs_from_numpy(b.glob[:k], b.ent[:k], b.ent_type[:k], b.n_ent[:k], b.mask[:k], device=device)
            r = net.act(obs)
            r.actions.cpu(), r.logp.cpu(), r.value.cpu()
            sync(device)
            times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def section_rounds(args, device: torch.device, cfg: NetConfig) -> None:
    gpu = device.type == "cuda"
    print(f"\n1-3. rounds through the engine ({args.repeats} timed per case after {args.warm} warm-up)")
    print("| bucket | rows | median ms | p99 ms | rows/s | eager ms | graph vs eager |")
    lines = []
    with InferenceEngine(SPEC, cfg, device=str(device), max_rows=512, n_nets=1, seed=1) as engine:
        net = engine.nets[0]
        for bucket, n in CASES:
            b = batch_for(bucket, n)
            rounds(engine, b, args.warm)
            t = rounds(engine, b, args.repeats)
            med, p99 = statistics.median(t), float(np.percentile(t, 99))
            eager = eager_ms(net, b, device, max(20, args.repeats // 5))
            lines.append((bucket, n, med, p99, eager))
            print(f"| {bucket} | {n} | {med:.3f} | {p99:.3f} | {n / med * 1e3:,.0f} | {eager:.3f} | "
                  f"{eager / med:.2f}x |", flush=True)
        for bucket, n, med, p99, eager in lines:
            if (bucket, n) in BOUND_MS:
                check(f"median round, {n} rows at bucket {bucket}", f"{med:.3f} ms", f"< {BOUND_MS[bucket, n]} ms",
                      med < BOUND_MS[bucket, n] if gpu else None)
        worst = min(eager / med for *_, med, _, eager in lines)
        check("graph against eager, the worst case", f"{worst:.2f}x", ">= 2x", worst >= 2.0 if gpu else None)
        # 1b. rounds in flight (w3async.learn.flights): the next round's copy and upload
        # while the last computes; two ahead must not be slower than one at a time
        b = batch_for(48, 64)
        one, two = (in_flight_rate(engine, b, args.repeats, k) for k in (1, 2))
        check(f"rounds/s, 64 rows at bucket 48, two submitted ahead against one (engine n_flights "
              f"{engine.n_flights})", f"{two:,.0f} against {one:,.0f}: {two / one:.2f}x", ">= 1.0x",
              two >= one if gpu else None)

        b = batch_for(48, 64)
        if gpu:  # 2. syncs: every warning the sync debug mode raises, from any thread
            seen = []
            old = warnings.showwarning
            warnings.showwarning = lambda msg, *a, **k: seen.append(str(msg))
            torch.cuda.set_sync_debug_mode("warn")
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("always")
                    rounds(engine, b, 200)
            finally:
                torch.cuda.set_sync_debug_mode("default")
                warnings.showwarning = old
            syncs = [m for m in seen if "synchroniz" in m.lower()]
            check("syncs inside 200 rounds (set_sync_debug_mode)", f"{len(syncs)}"
                  + (f": {syncs[0][:120]}" if syncs else ""), "0", not syncs)
        # 3. memory over many rounds (after the warm-up: every graph captured)
        rounds(engine, b, 100)
        sync(device)
        a0 = torch.cuda.memory_allocated(device) if gpu else 0
        r0 = torch.cuda.memory_reserved(device) if gpu else 0
        t0 = time.perf_counter()
        for i in range(args.rounds):
            engine.submit(b).result()
            if args.progress and i and i % 2000 == 0:
                print(f"  ... {i:,} rounds, {time.perf_counter() - t0:.0f} s", flush=True)
        sync(device)
        if gpu:
            grow = (torch.cuda.memory_allocated(device) - a0) / 2**20
            grow_r = (torch.cuda.memory_reserved(device) - r0) / 2**20
            check(f"GPU memory over {args.rounds:,} rounds", f"allocated {grow:+.2f} MiB, reserved {grow_r:+.2f} MiB "
                  f"(allocated {a0 / 2**20:.1f} MiB at the start)", "< 1 MiB growth", max(grow, grow_r) < 1.0)
        else:
            check(f"{args.rounds:,} rounds", f"{args.rounds / (time.perf_counter() - t0):,.0f} rounds/s", "none", None)


def section_beside(args, device: torch.device, cfg: NetConfig) -> None:
    gpu = device.type == "cuda"
    print("\n4. rounds of 64 rows at bucket 48 while a learner thread updates (the same device)")
    tb = synthetic_trajbatch(48)
    for pause in (0.0, 8.0):
        idle, busy, update_s = rounds_beside_updates(SPEC, cfg, tb, pause, 64, args.beside_s, device=str(device),
                                                     warm=args.warm, idle_s=0.3)
        mi = statistics.median(idle) if idle else float("nan")
        mb = statistics.median(busy) if busy else float("nan")
        us = statistics.median(update_s) if update_s else float("nan")
        print(f"  pause {pause:g} ms: idle median {mi:.3f} ms (n {len(idle)}), during updates {mb:.3f} ms "
              f"(n {len(busy)}, p99 {np.percentile(busy, 99) if busy else float('nan'):.3f}); "
              f"update {us:.3f} s ({len(update_s)} updates of {tb.reward.size} steps)", flush=True)
        if pause == 8.0:
            check("rounds during an update against idle, pause 8", f"{mb / mi:.2f}x", "<= 1.5x",
                  (mb / mi <= 1.5) if gpu and busy and idle else None)
            check("the learner's update (512 steps, 2 epochs, pause 8)", f"{us:.3f} s", "none", None)


def section_agreement(args, device: torch.device, cfg: NetConfig) -> None:
    print("\n5. CPU against the device: the same weights, the same rows and actions")
    for gru in (False, True):
        c = dataclasses.replace(cfg, gru=gru)
        torch.manual_seed(3)
        cpu_net = Network(SPEC, c).eval()
        dev_net = Network(SPEC, c).to(device).eval()
        dev_net.load_state_dict(cpu_net.state_dict())
        b = batch_for(48, 64, seed=5)
        k = b.n
        arrays = (b.glob[:k], b.ent[:k], b.ent_type[:k], b.n_ent[:k], b.mask[:k])
        with torch.no_grad():
            obs_c = obs_from_numpy(*arrays)
            state = cpu_net.initial_state(k)
            r_c = cpu_net.act(obs_c, torch.Generator().manual_seed(0), state=state)
            e_c = cpu_net.evaluate(obs_c, r_c.actions, state0=state, seq_len=1)
            obs_d = obs_from_numpy(*arrays, device=device)
            state_d = state.to(device) if state is not None else None
            e_d = dev_net.evaluate(obs_d, r_c.actions.to(device), state0=state_d, seq_len=1)
            r_d = dev_net.act(obs_d, state=state_d)
        dv = (e_c.value - e_d.value.cpu()).abs().max().item()
        dl = (e_c.logp - e_d.logp.cpu()).abs().max().item()
        name = "GRU" if gru else "no GRU"
        check(f"{name}: values and log-probabilities of the same actions", f"max abs diff {max(dv, dl):.2e}",
              "< 1e-3", max(dv, dl) < 1e-3)
        if gru:
            ds = (r_c.state - r_d.state.cpu()).abs().max().item()
            check("GRU: state after a step", f"max abs diff {ds:.2e}", "< 1e-4", ds < 1e-4)
    gru_through_engines(device, dataclasses.replace(cfg, gru=True))


def gru_through_engines(device: torch.device, cfg: NetConfig, rounds: int = 30) -> None:
    """The GRU path through the engine: a CPU engine one round at a time against the
    device's (graphed, rounds in flight by default), the same rounds submitted back to
    back, rows over two nets, FIRST flags and a reset among them. The state does not
    depend on the sampled actions, so the states each row had and the values agree
    although the two devices sample differently."""
    torch.manual_seed(4)
    sds = [Network(SPEC, cfg).state_dict() for _ in range(2)]
    got = []
    for dev in ("cpu", str(device)):
        rng = np.random.default_rng(6)
        with InferenceEngine(SPEC, cfg, device=dev, n_nets=2, max_rows=64, n_table_rows=64, seed=1) as engine:
            for k in (0, 1):
                engine.load_net(k, sds[k], k + 1)
            futs = []
            for i in range(rounds):
                b = synthetic_batch(SPEC, 40, rng, max_ent=48, n_table_rows=64)
                b.rows[:40] = rng.permutation(64)[:40]
                b.flags[:40] = np.where(rng.random(40) < 0.1, layout.FLAG_FIRST, 0)
                futs.append(engine.submit(b, rng.integers(0, 2, 40).astype(np.int16)))
                if i == rounds // 2:
                    engine.reset_rows(np.arange(8))
            got.append([f.result() for f in futs])
    ds = max(float(np.abs(a.state_in - b.state_in).max()) for a, b in zip(*got))
    dv = max(float(np.abs(a.value - b.value).max()) for a, b in zip(*got))
    check(f"GRU through the engines, {rounds} rounds back to back: states each row had, values",
          f"max abs diff {ds:.2e}, {dv:.2e}", "< 1e-4, < 1e-3", ds < 1e-4 and dv < 1e-3)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--quick", action="store_true", help="small counts: checks the script itself (CPU)")
    ap.add_argument("--rounds", type=int, default=10_000, help="rounds for the memory check")
    ap.add_argument("--repeats", type=int, default=500)
    ap.add_argument("--warm", type=int, default=50)
    ap.add_argument("--beside-s", type=float, default=20.0)
    ap.add_argument("--progress", action="store_true")
    args = ap.parse_args()
    if args.quick:
        args.rounds, args.repeats, args.warm, args.beside_s = 200, 20, 5, 3.0
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print(f"device_check: --device {args.device} but torch.cuda.is_available() is False "
              f"(torch {torch.__version__}); --device cpu --quick checks the script itself")
        return 2
    device = torch.device(args.device)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    print(f"device_check: {name}, torch {torch.__version__}, {time.strftime('%Y-%m-%d %H:%M:%S %Z')}", flush=True)
    cfg = NetConfig(d_model=64, n_heads=4, n_layers=2)  # fgself's network
    t0 = time.perf_counter()
    section_rounds(args, device, cfg)
    section_beside(args, device, cfg)
    section_agreement(args, device, cfg)
    failed = [r for r in RESULTS if r[3] is False]
    print("\n| check | measured | bound | |\n| --- | --- | --- | --- |")
    for what, measured, bound, held in RESULTS:
        print(f"| {what} | {measured} | {bound} | {'-' if held is None else ('pass' if held else 'FAIL')} |")
    print(f"\ndevice_check: {len(RESULTS) - len(failed)} of {len(RESULTS)} checks held or were not bounded, "
          f"{len(failed)} failed, {time.perf_counter() - t0:.0f} s")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
