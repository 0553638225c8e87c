"""Issues 13 and 26's device check: the inference engine and the learner on one GPU in the
run's own configuration, each figure with the bound it must meet written beside it (PASS /
FAIL), in one run of under 4 minutes on one H200.

    python bench/device_check.py                  # on a GPU machine (bench/device_check.sh)
    python bench/device_check.py --device cpu --quick   # here: the script itself, small

0. Versions: the device, torch and CUDA beside the project's torch pin (pyproject.toml).
1. Per configuration (one net; three nets, rows spread over them, as fgself runs; three
   nets with GRU): the graphs captured, capture time, GPU memory after capture and per
   graph; round latency per (entity bucket, rows) (median, p99) against the same rows
   through the networks eagerly; syncs inside 200 rounds (set_sync_debug_mode); no graph
   captured after start; memory over --rounds rounds; the eager GRU fallback's syncs.
2. The finisher thread's CPU per second of rounds in flight (a spinning wait shows here),
   and rounds/s with two submitted ahead against one at a time.
3. Noise: two nets with the same weights answer the same rows in the same rounds, each
   on its stream; the share of rows whose sampled actions are all the same.
4. A publish during rounds in flight: a learner thread updates and publishes while rounds
   are submitted two ahead; every answer finite, versions never going back, and the
   engine's values after the last publish equal to the learner's (the clone saw the
   update's last weights).
5. Rounds of 64 rows at bucket 48 while a learner thread updates, pause 0 and 8, at the
   GIL's switch interval by default (5 ms) and at 0.5 ms.
6. CPU against the device: values, log-probabilities and GRU states.

Bounds (one H200): 64 rows at bucket 48 under 2 ms median; 256 rows at
bucket 160 under 5 ms; graph at least 2x eager; no sync inside a round; no capture after
start; memory flat (under 1 MiB of growth); finisher CPU under 0.3 s a second; two
rounds ahead not slower than one; identical
action rows under 50% (one shared noise gives 100%); publish: values within 1e-4; rounds
during an update within 1.5x of idle at pause 8; CPU and GPU within 1e-3 (values,
log-probabilities) and 1e-4 (GRU state). With --device cpu the GPU's bounds are shown,
not applied, and the sync and memory checks are skipped. Exit status: 0 when every bound
holds, 1 otherwise.
"""

from __future__ import annotations

import argparse
import dataclasses
import re
import statistics
import sys
import threading
import time
import warnings
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from inference_bench import rounds_beside_updates, synthetic_trajbatch  # noqa: E402
from w3async.games.duel.spec import DUEL_SPEC as SPEC  # noqa: E402
from w3async.learn.inference import InferenceEngine, synthetic_batch  # noqa: E402
from w3async.learn.learner import Learner, LearnerConfig  # noqa: E402
from w3async.learn.network import NetConfig, Network, obs_from_numpy  # noqa: E402
from w3async.sync import layout  # noqa: E402

CASES = ((48, 8), (48, 64), (48, 256), (160, 64), (160, 256))  # (entity bucket, rows)
BOUND_MS = {(48, 64): 2.0, (160, 256): 5.0}
RESULTS: list[tuple[str, str, str, bool | None]] = []  # (what, measured, bound, held)


def check(what: str, measured: str, bound: str, held: bool | None) -> None:
    RESULTS.append((what, measured, bound, held))
    mark = "-" if held is None else ("PASS" if held else "FAIL")
    print(f"  {mark:4} {what}: {measured} (bound: {bound})", flush=True)


def batch_for(bucket: int, rows: int, seed: int = 1, table: int | None = None):
    """Rows whose largest entity count fills `bucket` (the engine runs that bucket)."""
    rng = np.random.default_rng(seed)
    for _ in range(100):
        b = synthetic_batch(SPEC, rows, rng, max_ent=bucket, n_table_rows=table)
        if b.bucket == bucket:
            return b
    raise RuntimeError(f"no batch of bucket {bucket}")


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def mem(device: torch.device) -> tuple[float, float]:
    """GPU memory allocated and reserved, MiB (0 on a CPU)."""
    if device.type != "cuda":
        return 0.0, 0.0
    sync(device)
    return torch.cuda.memory_allocated(device) / 2**20, torch.cuda.memory_reserved(device) / 2**20


def rounds(engine: InferenceEngine, b, nets, n: int) -> list[float]:
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        engine.submit(b, nets).result()
        out.append((time.perf_counter() - t0) * 1e3)
    return out


def in_flight(engine: InferenceEngine, b, nets, n: int, ahead: int) -> float:
    """Seconds for n rounds with `ahead` submitted before the oldest is waited for."""
    t0 = time.perf_counter()
    futs = [engine.submit(b, nets) for _ in range(ahead)]
    for _ in range(n - ahead):
        futs.pop(0).result()
        futs.append(engine.submit(b, nets))
    for f in futs:
        f.result()
    return time.perf_counter() - t0


def eager_ms(nets: list[Network], b, per_row: np.ndarray, device: torch.device, n: int, gru: bool) -> float:
    """The same rows through the networks without graphs: upload, act per net, answers
    back, synchronised (with GRU, from a zero state)."""
    k = b.n
    times = []
    with torch.no_grad():
        for _ in range(n):
            t0 = time.perf_counter()
            obs = obs_from_numpy(b.glob[:k], b.ent[:k], b.ent_type[:k], b.n_ent[:k], b.mask[:k], device=device)
            for s in np.unique(per_row):
                idx = torch.as_tensor(np.flatnonzero(per_row == s), device=device)
                o = obs.index(idx)
                r = nets[int(s)].act(o, state=torch.zeros(len(idx), nets[0].cfg.d_model, device=device) if gru else None)
                r.actions.cpu(), r.logp.cpu(), r.value.cpu()
            sync(device)
            times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def count_syncs(device: torch.device, fn) -> list[str]:
    """Every synchronising call set_sync_debug_mode reports while fn() runs (any thread)."""
    seen: list[str] = []
    old = warnings.showwarning
    warnings.showwarning = lambda msg, *a, **k: seen.append(str(msg))
    torch.cuda.set_sync_debug_mode("warn")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("always")
            fn()
    finally:
        torch.cuda.set_sync_debug_mode("default")
        warnings.showwarning = old
    # torch's own notice that the mode is a prototype (once, on the first switch) is no sync
    return [m for m in seen if "synchroniz" in m.lower() and "prototype feature" not in m]


def section_versions(device: torch.device) -> None:
    pin = re.search(r'"torch([^"]*)"', (ROOT / "pyproject.toml").read_text())
    pin_s = pin.group(1) if pin else "(no pin found)"
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    print(f"0. {name}; torch {torch.__version__}, CUDA {torch.version.cuda}, cuDNN "
          f"{torch.backends.cudnn.version()}; the project pins torch{pin_s}")
    inside = True
    have = tuple(int(x) for x in re.findall(r"\d+", torch.__version__.split("+")[0])[:3])
    for op, v in re.findall(r"(>=|<=|==|<|>)\s*([\d.]+)", pin_s):  # the pin's clauses, e.g. >=2.13,<2.15
        want = tuple(int(x) for x in v.split("."))
        cut = have[: len(want)]
        inside &= {">=": cut >= want, "<=": cut <= want, "==": cut == want, "<": cut < want, ">": cut > want}[op]
    check("torch against the project's pin", f"{torch.__version__} against torch{pin_s}"
          + ("" if inside else ": OUTSIDE the pin, the figures are this torch's"), "reported", None)


CONFIGS = (("1 net", 1, False), ("3 nets", 3, False), ("3 nets, GRU", 3, True))


def section_configs(args, device: torch.device, cfg: NetConfig) -> None:
    gpu = device.type == "cuda"
    for name, n_nets, gru in CONFIGS:
        c = dataclasses.replace(cfg, gru=gru)
        print(f"\n1. {name}: rounds through the engine ({args.repeats} timed per case after {args.warm} warm-up)")
        a0, r0 = mem(device)
        t0 = time.perf_counter()
        engine = InferenceEngine(SPEC, c, device=str(device), max_rows=512, n_table_rows=512, n_nets=n_nets, seed=1)
        engine.start()
        start_s = time.perf_counter() - t0
        try:
            for k in range(1, n_nets):
                engine.load_net(k, engine.nets[0].state_dict(), 0)
            runner = engine._runner
            n_graphs = len(runner.graphs) if runner else 0
            a1, r1 = mem(device)
            cap_s = runner.capture_s if runner else 0.0
            check(f"{name}: graphs at start, capture time, memory after capture",
                  f"{n_graphs} graphs in {cap_s:.1f} s (start {start_s:.1f} s); allocated {a1 - a0:+.1f} MiB, reserved "
                  f"{r1 - r0:+.1f} MiB, {(r1 - r0) / max(n_graphs, 1):.2f} MiB reserved a graph", "reported", None)
            print("| bucket | rows | median ms | p99 ms | rows/s | eager ms | graph vs eager |")
            worst = float("inf")
            for bucket, n in args.cases:
                b = batch_for(bucket, n, table=512)
                per_row = (np.arange(n) % n_nets).astype(np.int16)
                rounds(engine, b, per_row, args.warm)
                t = rounds(engine, b, per_row, args.repeats)
                med, p99 = statistics.median(t), float(np.percentile(t, 99))
                eager = eager_ms(engine.nets, b, per_row, device, args.eager_repeats, gru)
                worst = min(worst, eager / med)
                print(f"| {bucket} | {n} | {med:.3f} | {p99:.3f} | {n / med * 1e3:,.0f} | {eager:.3f} | "
                      f"{eager / med:.2f}x |", flush=True)
                if (bucket, n) in BOUND_MS:
                    check(f"{name}: median round, {n} rows at bucket {bucket}", f"{med:.3f} ms (p99 {p99:.3f})",
                          f"< {BOUND_MS[bucket, n]} ms", med < BOUND_MS[bucket, n] if gpu else None)
            check(f"{name}: graph against eager, the worst case", f"{worst:.2f}x", ">= 2x",
                  worst >= 2.0 if gpu else None)
            b = batch_for(48, 64, table=512)
            per_row = (np.arange(64) % n_nets).astype(np.int16)
            if gpu:
                syncs = count_syncs(device, lambda: rounds(engine, b, per_row, 200))
                check(f"{name}: syncs inside 200 rounds (set_sync_debug_mode)",
                      f"{len(syncs)}" + (f": {syncs[0][:120]}" if syncs else ""), "0", not syncs)
            rounds(engine, b, per_row, 100)
            m0 = mem(device)
            t0 = time.perf_counter()
            for i in range(args.rounds):
                engine.submit(b, per_row).result()
                if args.progress and i and i % 5000 == 0:
                    print(f"  ... {i:,} rounds, {time.perf_counter() - t0:.0f} s", flush=True)
            m1 = mem(device)
            rate = args.rounds / (time.perf_counter() - t0)
            if gpu:
                grow = max(m1[0] - m0[0], m1[1] - m0[1])
                check(f"{name}: GPU memory over {args.rounds:,} rounds ({rate:,.0f} rounds/s)",
                      f"allocated {m1[0] - m0[0]:+.2f} MiB, reserved {m1[1] - m0[1]:+.2f} MiB", "< 1 MiB growth",
                      grow < 1.0)
            after = len(runner.graphs) if runner else 0
            check(f"{name}: graphs captured after start", f"{after - n_graphs}", "0",
                  after == n_graphs if gpu else None)
        finally:
            engine.stop()
        if gru and gpu:  # the eager GRU fallback (gru_graphs=False): one wait per net a round, no other sync
            with InferenceEngine(SPEC, c, device=str(device), max_rows=512, n_table_rows=512, n_nets=n_nets,
                                 seed=1, gru_graphs=False) as eager_engine:
                for k in range(1, n_nets):
                    eager_engine.load_net(k, eager_engine.nets[0].state_dict(), 0)
                rounds(eager_engine, b, per_row, 20)
                syncs = count_syncs(device, lambda: rounds(eager_engine, b, per_row, 100))
                med = statistics.median(rounds(eager_engine, b, per_row, args.repeats))
            check(f"{name}, eager fallback: syncs inside 100 rounds", f"{len(syncs)}"
                  + (f": {syncs[0][:120]}" if syncs else "") + f"; median round {med:.3f} ms", "0", not syncs)


def section_finisher(args, device: torch.device, cfg: NetConfig) -> None:
    gpu = device.type == "cuda"
    print("\n2. the finisher thread's CPU while rounds of 256 rows at bucket 160 fly two ahead")
    with InferenceEngine(SPEC, cfg, device=str(device), max_rows=512, n_nets=1, seed=1, n_flights=2) as engine:
        b = batch_for(160, 256)
        per_row = np.zeros(256, np.int16)
        in_flight(engine, b, per_row, args.warm, 2)
        c0 = engine._flights.cpu_s
        wall = in_flight(engine, b, per_row, args.repeats, 2)
        cpu = engine._flights.cpu_s - c0
        one = in_flight(engine, b, per_row, args.repeats, 1)
    check("finisher CPU per second of rounds in flight", f"{cpu / wall:.3f} s/s ({args.repeats} rounds in {wall:.2f} s)",
          "< 0.3", cpu / wall < 0.3 if gpu else None)
    check("rounds/s, 256 rows at bucket 160, two submitted ahead against one",
          f"{args.repeats / wall:,.0f} against {args.repeats / one:,.0f}: {one / wall:.2f}x", ">= 1.0x",
          one >= wall if gpu else None)


def section_noise(args, device: torch.device, cfg: NetConfig) -> None:
    print("\n3. noise: two nets, the same weights, the same 64 rows each, in the same rounds")
    b = batch_for(48, 128, seed=7)
    for name in ("glob", "ent", "ent_type", "n_ent", "mask"):
        getattr(b, name)[64:128] = getattr(b, name)[:64]
    per_row = np.repeat(np.array([0, 1], np.int16), 64)
    same = total = 0
    dv = 0.0
    with InferenceEngine(SPEC, cfg, device=str(device), max_rows=512, n_nets=2, seed=1) as engine:
        engine.load_net(1, engine.nets[0].state_dict(), 0)
        for _ in range(args.noise_rounds):
            r = engine.submit(b, per_row).result()
            same += int((r.actions[:64] == r.actions[64:]).all(1).sum())
            total += 64
            dv = max(dv, float(np.abs(r.value[:64] - r.value[64:]).max()))
    check(f"identical action rows between the two nets over {args.noise_rounds} rounds",
          f"{same / total:.1%} (values differ by at most {dv:.1e})", "< 50%", same / total < 0.5 and dv < 1e-4)


def section_publish(args, device: torch.device, cfg: NetConfig) -> None:
    print("\n4. a publish during rounds in flight: a learner thread updates and publishes, rounds two ahead")
    tb = synthetic_trajbatch(48)
    b = batch_for(48, 64, seed=9)
    per_row = np.zeros(64, np.int16)
    with InferenceEngine(SPEC, cfg, device=str(device), max_rows=512, n_nets=1, seed=1, n_flights=2) as engine:
        learner = Learner(Network(SPEC, cfg), LearnerConfig(minibatch_seqs=8, update_epochs=1), device=str(device))
        learner.net.load_state_dict(engine.nets[0].state_dict())
        stop, errors = threading.Event(), []

        def learn() -> None:
            if device.type == "cuda":
                torch.cuda.set_device(engine.device)  # as LearnerThread does
            try:
                while not stop.is_set():
                    learner.run_update(tb)
                    engine.publish(learner.net.state_dict(), learner.version)
            except Exception as e:  # noqa: BLE001 (reported below)
                errors.append(repr(e))

        th = threading.Thread(target=learn)
        th.start()
        t_end, seen, bad, back, n = time.perf_counter() + args.publish_s, 0, 0, 0, 0
        futs = [engine.submit(b, per_row) for _ in range(2)]
        while time.perf_counter() < t_end:
            r = futs.pop(0).result()
            futs.append(engine.submit(b, per_row))
            bad += int(not (np.isfinite(r.value).all() and np.isfinite(r.logp).all()))
            back += int(r.versions[0] < seen)
            seen, n = max(seen, int(r.versions[0])), n + 1
        for f in futs:
            f.result()
        stop.set()
        th.join()
        res = engine.submit(b, per_row).result()  # after the last publish
        with torch.no_grad():
            k = b.n
            obs = obs_from_numpy(b.glob[:k], b.ent[:k], b.ent_type[:k], b.n_ent[:k], b.mask[:k], device=device)
            ref = learner.net.eval().act(obs).value.cpu().numpy()
    diff = float(np.abs(res.value - ref).max())
    check(f"publish during rounds in flight ({n} rounds, {learner.version} updates)",
          f"non-finite {bad}, versions back {back}, errors {errors[:1]}; last publish's values off by {diff:.1e} "
          f"(version {int(res.versions[0])} of {learner.version})", "0, 0, none; < 1e-4 at the last version",
          not bad and not back and not errors and diff < 1e-4 and int(res.versions[0]) == learner.version)


def section_beside(args, device: torch.device, cfg: NetConfig) -> None:
    gpu = device.type == "cuda"
    print("\n5. rounds of 64 rows at bucket 48 while a learner thread updates (the same device)")
    tb = synthetic_trajbatch(48)
    default = sys.getswitchinterval()
    try:
        for interval in (default, 0.0005):
            sys.setswitchinterval(interval)
            for pause in args.pauses:
                idle, busy, update_s = rounds_beside_updates(SPEC, cfg, tb, pause, 64, args.beside_s,
                                                             device=str(device), warm=args.warm, idle_s=0.3)
                mi = statistics.median(idle) if idle else float("nan")
                mb = statistics.median(busy) if busy else float("nan")
                us = statistics.median(update_s) if update_s else float("nan")
                print(f"  switch {interval * 1e3:g} ms, pause {pause:g} ms: idle median {mi:.3f} ms (n {len(idle)}), "
                      f"during updates {mb:.3f} ms (n {len(busy)}); update {us:.3f} s ({len(update_s)} updates)",
                      flush=True)
                if pause == 8.0:
                    check(f"rounds during an update against idle, pause 8, switch interval {interval * 1e3:g} ms",
                          f"{mb / mi:.2f}x (update {us:.3f} s)", "<= 1.5x",
                          (mb / mi <= 1.5) if gpu and busy and idle else None)
    finally:
        sys.setswitchinterval(default)


def section_agreement(args, device: torch.device, cfg: NetConfig) -> None:
    print("\n6. CPU against the device: the same weights, the same rows and actions")
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
    ap.add_argument("--rounds", type=int, default=10_000, help="rounds for the memory check, per configuration")
    ap.add_argument("--repeats", type=int, default=500)
    ap.add_argument("--warm", type=int, default=50)
    ap.add_argument("--beside-s", type=float, default=10.0)
    ap.add_argument("--publish-s", type=float, default=8.0)
    ap.add_argument("--noise-rounds", type=int, default=100)
    ap.add_argument("--progress", action="store_true")
    args = ap.parse_args()
    args.cases, args.eager_repeats, args.pauses = CASES, max(20, args.repeats // 5), (0.0, 8.0)
    if args.quick:  # every section and table, with counts a shared CPU runs in about a minute
        args.rounds, args.repeats, args.warm, args.beside_s, args.publish_s, args.noise_rounds = 20, 3, 1, 1.0, 1.0, 3
        args.cases, args.eager_repeats, args.pauses = ((48, 8), (48, 64)), 2, (8.0,)
    if args.device == "cpu":
        torch.set_num_threads(1)  # the engine's own count: eager against graph compares like with like
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print(f"device_check: --device {args.device} but torch.cuda.is_available() is False "
              f"(torch {torch.__version__}); --device cpu --quick checks the script itself")
        return 2
    device = torch.device(args.device)
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    print(f"device_check: {time.strftime('%Y-%m-%d %H:%M:%S %Z')}", flush=True)
    cfg = NetConfig(d_model=64, n_heads=4, n_layers=2)  # fgself's network
    t0 = time.perf_counter()
    section_versions(device)
    section_configs(args, device, cfg)
    section_finisher(args, device, cfg)
    section_noise(args, device, cfg)
    section_publish(args, device, cfg)
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
