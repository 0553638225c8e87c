"""The CUDA runner's own code on a CPU: streams and events are no-ops there
and a graph replays its captured step, so the gather, padding, step, scatter, rollback
and generators below are the code a GPU runs; where a GPU is, the same tests run on it
with real streams and graphs (bench/device_check.sh). What only a GPU shows is
bench/device_check.py's."""

import numpy as np
import pytest
import torch

from w3async.learn.inference.cuda_runner import CudaRunner, row_buckets
from w3async.learn.inference import synthetic_batch
from w3async.learn.inference.inputs import Inputs
from w3async.learn.network import NetConfig, Network
from w3async.sync import layout
from w3async.sync.gather import BUCKETS
from tests.learn.test_inference import SPEC, CFG

torch.set_num_threads(1)

GRU = NetConfig(**{**CFG.__dict__, "gru": True})
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device"))]


@pytest.fixture(params=DEVICES)
def device(request) -> str:
    return request.param


def make(device: str, n_nets: int = 2, gru: bool = True, max_rows: int = 64, table: int = 64, seed: int = 0,
         graphs: bool = True, same_weights: bool = False) -> CudaRunner:
    torch.manual_seed(11)
    cfg = GRU if gru else CFG
    nets = [Network(SPEC, cfg).to(device).eval() for _ in range(n_nets)]  # parameters require grad, as the engine's
    if same_weights:
        for net in nets[1:]:
            net.load_state_dict(nets[0].state_dict())
    state = torch.zeros(table + 1, cfg.d_model, device=device) if gru else None
    return CudaRunner(nets, torch.device(device), max_rows, state, seed, flights=2, gru_graphs=graphs)


def inputs(b, nets: np.ndarray, capacity: int) -> Inputs:
    """The engine's input buffers for batch b (InferenceEngine.submit's copy)."""
    buf, n, bucket = Inputs(capacity, torch.cuda.is_available()), b.n, b.bucket
    a = buf.np
    a["rows"][:n], a["flags"][:n], a["net"][:n] = b.rows[:n], b.flags[:n], nets
    a["glob"][:n], a["n_ent"][:n], a["mask"][:n] = b.glob[:n], b.n_ent[:n], b.mask[:n]
    a["ent"][: n * bucket * layout.F_ENT] = b.ent_flat[: n * bucket * layout.F_ENT]
    a["ent_type"][: n * bucket] = b.type_flat[: n * bucket]
    return buf


def round_(runner: CudaRunner, b, nets: np.ndarray, capacity: int = 64):
    n = b.n
    out = (np.zeros((n, layout.N_HEADS), np.int32), np.zeros(n, np.float32), np.zeros(n, np.float32))
    state_in = runner.run(inputs(b, nets, capacity), n, b.bucket, np.unique(nets), *out)
    return (*out, state_in)


def batch(n: int, seed: int = 0, table: int = 64, first: float = 0.0):
    rng = np.random.default_rng(seed)
    b = synthetic_batch(SPEC, n, rng, max_ent=8, n_table_rows=table)
    b.rows[:n] = rng.permutation(table)[:n]
    b.flags[:n] = np.where(rng.random(n) < first, layout.FLAG_FIRST, 0)
    return b


def test_no_autograd_state_after_capture_rounds_and_resets(device):
    runner = make(device)
    assert runner.capture_all([32]) == 2 * len(runner.row_buckets)
    for i in range(4):
        b = batch(40, seed=i, first=0.2)
        round_(runner, b, (np.arange(40) % 2).astype(np.int16))
        runner.reset(torch.arange(4))
    assert runner.state.grad_fn is None and not runner.state.requires_grad
    assert runner.state.abs().sum() > 0  # the rounds did step it
    for g, sel, out, host in runner.graphs.values():
        assert all(t.grad_fn is None and not t.requires_grad for t in out if t is not None)


def test_more_than_512_rows_for_one_net(device):
    assert row_buckets(64) == (8, 32, 64) and row_buckets(300) == (8, 32, 64, 128, 256, 512)
    assert row_buckets(1500) == (8, 32, 64, 128, 256, 512, 1024, 2048)
    runner = make(device, n_nets=2, gru=False, max_rows=1024)
    runner.capture_all([32])
    b = batch(1000, table=1000)
    nets = np.zeros(1000, np.int16)
    nets[:100] = 1  # 900 rows for net 0, 100 for net 1
    actions, logp, value, _ = round_(runner, b, nets, capacity=1024)
    with torch.no_grad():
        for s in (0, 1):
            rows = np.flatnonzero(nets == s)
            buf = inputs(b, nets, 1024)
            ref = runner.nets[s].act(buf.obs(1000, b.bucket).to(device).index(torch.as_tensor(rows, device=device)))
            assert np.allclose(value[rows], ref.value.cpu().numpy(), atol=1e-4)
    assert (actions[:, 0] >= 0).all() and np.isfinite(logp).all()


def test_rounds_in_flight_of_other_buckets_answer_their_own_rows(device):
    """Two rounds launched before either finishes (one per flight), at other entity
    buckets than the rounds before them, each net's rows padded in its graph: every
    answer is the bare network's on that round's rows, so a graph gathers only its own
    flight's rows and its bucket's columns (a wider round before leaves nothing behind)."""
    runner = make(device, n_nets=2, gru=False, max_rows=64)
    runner.capture_all(BUCKETS)
    rng = np.random.default_rng(5)
    for max_ent in (150, 20, 90, 5, 60, 33):
        pending = []
        for flight, n in enumerate((int(rng.integers(1, 60)), int(rng.integers(1, 60)))):
            b = synthetic_batch(SPEC, n, rng, max_ent=max_ent if flight == 0 else max(1, max_ent // 3))
            nets = rng.integers(0, 2, n).astype(np.int16)
            buf = inputs(b, nets, 64)
            pending.append((b, nets, buf, runner.launch(buf, n, b.bucket, np.unique(nets), flight)))
        for b, nets, buf, handle in pending:
            n = b.n
            actions, logp, value = np.zeros((n, layout.N_HEADS), np.int64), np.zeros(n, np.float32), np.zeros(n, np.float32)
            runner.finish(handle, actions, logp, value)
            with torch.no_grad():
                for s in np.unique(nets):
                    rows = np.flatnonzero(nets == s)
                    obs = buf.obs(n, b.bucket).to(device).index(torch.as_tensor(rows, device=device))
                    assert np.allclose(value[rows], runner.nets[s].act(obs).value.cpu().numpy(), atol=1e-4)
                    lp = runner.nets[s].evaluate(obs, torch.as_tensor(actions[rows], device=device)).logp
                    assert np.allclose(logp[rows], lp.cpu().numpy(), atol=1e-4)


def test_failed_launch_keeps_the_gru_state_and_waits(device):
    runner = make(device)
    runner.capture_all([32])
    nets = (np.arange(40) % 2).astype(np.int16)
    round_(runner, batch(40, seed=1), nets)
    before = runner.state.clone()
    b = batch(40, seed=2)
    bad = runner.graphs[(1, 32, 32)][0]  # net 1: 20 rows, bucket 32
    good_replay = bad.replay

    def fail():
        raise RuntimeError("replay failed")

    bad.replay = fail  # net 1 fails after net 0 has stepped its rows
    with pytest.raises(RuntimeError, match="replay failed"):
        round_(runner, b, nets)
    assert torch.equal(runner.state[:-1], before[:-1])  # every table row (the scratch row last is padding's)
    bad.replay = good_replay
    round_(runner, b, nets)
    assert not torch.equal(runner.state[:-1], before[:-1])


def test_no_capture_after_capture_all(device):
    runner = make(device)
    runner.capture_all([32])
    n_graphs = len(runner.graphs)
    before = runner.state.clone()
    b = synthetic_batch(SPEC, 10, np.random.default_rng(0), max_ent=8)
    b.bucket = 48  # a bucket capture_all was not given
    with pytest.raises(RuntimeError, match="no graph for net 0, entity bucket 48"):
        round_(runner, b, np.zeros(10, np.int16))
    assert len(runner.graphs) == n_graphs and torch.equal(runner.state, before)


def test_each_net_samples_from_its_own_generator(device):
    """Two nets with the same weights and rows draw different noise, and net 1's draws do
    not depend on whether net 0 ran in the same round (it did with one shared generator)."""
    b = batch(64, seed=3, table=64)
    half = 32
    for name in ("glob", "n_ent", "mask"):
        getattr(b, name)[half:64] = getattr(b, name)[:half]
    b.ent[half:64], b.ent_type[half:64] = b.ent[:half], b.ent_type[:half]
    both = make(device, gru=False, same_weights=True)
    both.capture_all([32])
    nets = np.repeat(np.array([0, 1], np.int16), half)
    a_both, _, v_both, _ = round_(both, b, nets)
    assert np.allclose(v_both[:half], v_both[half:], atol=1e-6)  # the same weights and rows
    assert (a_both[:half] != a_both[half:]).any()  # but not the same noise
    alone = make(device, gru=False, same_weights=True)
    alone.capture_all([32])
    b1 = batch(half, seed=4, table=64)
    for name in ("glob", "n_ent", "mask"):
        getattr(b1, name)[:half] = getattr(b, name)[half:64]
    b1.ent[:half], b1.ent_type[:half] = b.ent[half:64], b.ent_type[half:64]
    a_alone, *_ = round_(alone, b1, np.ones(half, np.int16))
    assert (a_alone == a_both[half:]).all()


def test_eager_gru_path_agrees_with_the_graphs(device):
    graphed, eager = make(device), make(device, graphs=False)
    graphed.capture_all([32])
    assert eager.capture_all([32]) == 0 and not eager.graphed
    for i in range(5):
        b = batch(40, seed=10 + i, first=0.1)
        nets = np.random.default_rng(i).integers(0, 2, 40).astype(np.int16)
        _, _, v_g, s_g = round_(graphed, b, nets)
        _, _, v_e, s_e = round_(eager, b, nets)
        assert np.allclose(v_g, v_e, atol=1e-5) and np.allclose(s_g, s_e, atol=1e-6)
        for r in (graphed, eager):
            r.reset(torch.arange(3)) if r.graphed else r.state.index_fill_(0, torch.arange(3, device=device), 0.0)
    assert torch.allclose(graphed.state[:-1], eager.state[:-1], atol=1e-5)  # the scratch row last is the graphs'
    assert eager.state.grad_fn is None


def test_load_checks_names_and_shapes_before_copying(device):
    runner = make(device, gru=False)
    other = Network(SPEC, NetConfig(**{**CFG.__dict__, "d_model": 16})).state_dict()
    before = {k: v.clone() for k, v in runner.nets[1].state_dict().items()}
    with pytest.raises(ValueError, match="net 1: weights of another shape"):
        runner.load(1, other)
    assert all(torch.equal(before[k], v) for k, v in runner.nets[1].state_dict().items())
    with pytest.raises(ValueError, match="net 1: weights do not match the network"):
        runner.load(1, {k: v for k, v in before.items() if "value" not in k})
