"""The network: masks respected, padding invisible, the pointer head on real entities."""

import pytest
import torch
import torch.nn.functional as F

from w3async.sync import layout
from w3async.learn.network import NetConfig, Network, Obs
from w3async.games.spec import GameSpec

# One thread: on a shared 2-core machine, OpenMP's spinning threads make small calls slow.
torch.set_num_threads(1)

SPEC = GameSpec("t", n_types=5, head_sizes=(6, 3, 2, layout.E_MAX), pointer_head=3)


def random_obs(n: int, bucket: int, seed: int = 0, spec: GameSpec = SPEC) -> Obs:
    g = torch.Generator().manual_seed(seed)
    lay = spec.layout
    n_ent = torch.randint(0, bucket + 1, (n,), generator=g)
    real = torch.arange(bucket)[None, :] < n_ent[:, None]
    ent = torch.randn(n, bucket, lay.f_ent, generator=g) * real[:, :, None]
    ent_type = torch.randint(0, spec.n_types, (n, bucket), generator=g) * real
    mask = torch.zeros(n, lay.n_heads, lay.head_max, dtype=torch.bool)
    for h, size in enumerate(spec.head_sizes):
        width = bucket if h == spec.pointer_head else size
        m = torch.rand(n, width, generator=g) < 0.5
        if h == spec.pointer_head:
            m &= real
        m[torch.arange(n), 0] = True  # at least one choice (entity 0 even where n_ent = 0)
        mask[:, h, :width] = m
    return Obs(torch.randn(n, lay.g_glob, generator=g), ent, ent_type.long(), n_ent, mask)


def pad_to(obs: Obs, bucket: int) -> Obs:
    extra = bucket - obs.ent.shape[1]
    return obs._replace(ent=F.pad(obs.ent, (0, 0, 0, extra)), ent_type=F.pad(obs.ent_type, (0, extra)))


@pytest.fixture(params=[False, True], ids=["mlp", "gru"])
def net(request):
    torch.manual_seed(0)
    return Network(SPEC, NetConfig(d_model=32, n_heads=4, n_layers=2, gru=request.param)).eval()


def test_sampled_actions_are_always_allowed_and_masked_choices_have_zero_probability(net):
    obs = random_obs(64, 32, seed=1)
    gen = torch.Generator().manual_seed(2)
    with torch.no_grad():
        for _ in range(20):
            r = net.act(obs, gen)
            for h, size in enumerate(SPEC.head_sizes):
                a = r.actions[:, h]
                assert (a < size).all()
                assert obs.mask[torch.arange(64), h, a].all(), f"head {h} sampled a masked choice"
        z, ents, real = net.encode(obs)
        lp = net.heads_logp(z, ents, real, obs.mask)
        assert lp.shape == (64, layout.N_HEADS, layout.HEAD_MAX)
        assert (lp.exp()[~obs.mask] == 0).all()  # exactly zero
        assert torch.allclose(lp.exp().sum(2), torch.ones(64, layout.N_HEADS))


def test_logp_of_sampled_action_matches_evaluate(net):
    obs = random_obs(16, 48, seed=3)
    with torch.no_grad():
        r = net.act(obs, torch.Generator().manual_seed(0))
        first = torch.ones(16, dtype=torch.bool)
        e = net.evaluate(obs, r.actions, state0=net.initial_state(16), first=first, seq_len=1)
    assert torch.allclose(r.logp, e.logp, atol=1e-5)
    assert torch.allclose(r.value, e.value, atol=1e-5)
    assert (e.entropy >= 0).all() and torch.isfinite(e.entropy).all()


def test_padding_does_not_change_outputs(net):
    obs32 = random_obs(8, 32, seed=4)
    obs64 = pad_to(obs32, 64)
    with torch.no_grad():
        a, b = (net.encode(o) for o in (obs32, obs64))
        assert torch.allclose(a[0], b[0], atol=1e-5)
        lps32 = net.heads_logp(a[0], a[1], a[2], obs32.mask)
        lps64 = net.heads_logp(b[0], b[1], b[2], obs64.mask)
        for x, y in zip(lps32.unbind(1), lps64.unbind(1)):
            assert torch.equal(torch.isfinite(x), torch.isfinite(y))
            assert torch.allclose(x[torch.isfinite(x)], y[torch.isfinite(y)], atol=1e-5)
        gen = torch.Generator()
        v32 = net.act(obs32, gen.manual_seed(5)).value
        v64 = net.act(obs64, gen.manual_seed(5)).value
    assert torch.allclose(v32, v64, atol=1e-5)


def test_pointer_head_only_picks_real_entities(net):
    obs = random_obs(64, 32, seed=6)
    # Let the game's mask allow every entity slot, real or not: the network must still
    # point only at entities below n_ent (where a row has any).
    obs.mask[:, 3, :] = True
    gen = torch.Generator().manual_seed(7)
    with torch.no_grad():
        for _ in range(30):
            a = net.act(obs, gen).actions[:, 3]
            has = obs.n_ent > 0
            assert (a[has] < obs.n_ent[has]).all()


def test_gradients_are_finite_with_masks(net):
    obs = random_obs(8, 32, seed=8)
    net.train()
    r = net.act(obs, torch.Generator().manual_seed(1))
    e = net.evaluate(obs, r.actions.detach(), state0=net.initial_state(8), first=torch.ones(8, dtype=torch.bool), seq_len=1)
    (e.logp.sum() + e.entropy.sum() + e.value.sum()).backward()
    for name, p in net.named_parameters():
        if p.grad is not None:
            assert torch.isfinite(p.grad).all(), name


def test_gru_state_resets_on_first():
    torch.manual_seed(0)
    net = Network(SPEC, NetConfig(d_model=16, n_heads=2, n_layers=1, gru=True)).eval()
    obs = random_obs(4, 32, seed=9)
    with torch.no_grad():
        s = torch.randn(4, 16)
        fresh = net.act(obs, torch.Generator().manual_seed(0), state=None).value
        reset = net.act(obs, torch.Generator().manual_seed(0), state=s, first=torch.ones(4, dtype=torch.bool)).value
        kept = net.act(obs, torch.Generator().manual_seed(0), state=s, first=torch.zeros(4, dtype=torch.bool)).value
    assert torch.allclose(fresh, reset)
    assert not torch.allclose(fresh, kept)


def test_config_errors_name_the_values():
    with pytest.raises(ValueError, match="n_heads=3"):
        NetConfig(d_model=32, n_heads=3)


def test_a_spec_without_pointer_head():
    spec = GameSpec("np", n_types=2, head_sizes=(3, 1, 5, 2))
    net = Network(spec, NetConfig(d_model=16, n_heads=2, n_layers=1)).eval()
    obs = random_obs(32, 32, seed=10, spec=GameSpec("np", 2, (3, 1, 5, 2)))
    with torch.no_grad():
        for _ in range(10):
            a = net.act(obs, torch.Generator().manual_seed(_)).actions
            assert obs.mask[torch.arange(32)[:, None], torch.arange(4)[None, :], a].all()
            assert (a < torch.tensor(spec.head_sizes)).all()


def test_parameter_count_is_small():
    n = sum(p.numel() for p in Network(SPEC, NetConfig()).parameters())
    assert n < 200_000, n


@pytest.mark.parametrize("shape, sizes, pointer", [
    ((0, 0, 8, 1, 3), (3,), None),  # a flat row: one Discrete(3) head over 8 floats
    ((7, 5, 0, 8, 200), (2, 3, 4, 5, 6, 7, 8, 200), None),  # no globals, eight heads
    ((40, 3, 2, 2, 40), (5, 40), 1),  # a pointer head at the row's 40 entities
])
def test_a_network_is_built_from_the_rows_shape(shape, sizes, pointer):
    """The network of a spec's shape: inputs of its features and globals (none where the
    row has none), one logit column per choice of its heads; its actions are allowed, its
    log-probabilities finite, padding past n_ent changes nothing."""
    lay = layout.Layout(*shape)
    spec = GameSpec("s", n_types=3, head_sizes=sizes, pointer_head=pointer, layout=lay)
    net = Network(spec, NetConfig(d_model=32, n_heads=4, n_layers=1)).eval()
    assert (net.ent_in is None) == (lay.f_ent == 0) and (net.glob_in is None) == (lay.g_glob == 0)
    assert net.heads.out_features == sum(n for h, n in enumerate(sizes) if h != pointer)
    bucket = lay.buckets[0]
    obs = random_obs(16, bucket, 3, spec)
    with torch.no_grad():
        r = net.act(obs, torch.Generator().manual_seed(1))
        assert r.actions.shape == (16, len(sizes)) and torch.isfinite(r.logp).all()
        assert obs.mask.gather(2, r.actions[:, :, None]).all()  # every choice allowed
        ev = net.evaluate(obs, r.actions)
        torch.testing.assert_close(ev.logp, r.logp, atol=1e-5, rtol=0)
        if lay.e_max > bucket:
            ev2 = net.evaluate(pad_to(obs, lay.e_max), r.actions)
            torch.testing.assert_close(ev2.logp, ev.logp, atol=1e-5, rtol=0)
