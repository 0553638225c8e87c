"""The entity-based policy and value network, sized from a GameSpec and a NetConfig.

One observation is a set of entities (type id + f_ent features, padded to a bucket,
n_ent of them real), g_glob global features and one mask per action head: the sizes of
the game's row (GameSpec.layout), which may have no entities or no globals. The
network embeds each entity (type embedding + linear features), prepends a token made
from the global features, runs a few pre-norm attention blocks over that set with the
padding masked out, pools (the global token's output and the mean of the real
entities), optionally runs a GRU cell with a state kept per table row, and answers:

- one categorical head per action part, masked: a masked choice gets probability
  exactly 0 (its logit is -inf), so a sampled action is always allowed;
- for the spec's pointer head, logits that point at the row's entities (choice c is
  entity c: a query from the pooled state against a key per entity);
- a value.

Padding never changes an answer: padded entities are masked out of the attention,
their outputs zeroed before pooling, and pointer choices at or past n_ent are masked.
tests/learn/test_network.py checks that a row padded to 32 or to 64 gives the same
log-probabilities and value.

The heads are independent given the state (no autoregressive conditioning between
parts): the game's masks carry the dependencies it needs (a part that does not apply
has one allowed choice, which costs log-probability 0).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from w3async.games.spec import GameSpec
from w3async.recipes.learning import NetConfig  # the recipe's [network] section


class Obs(NamedTuple):
    """A batch of observations as tensors (B rows, E = the bucket)."""

    glob: Tensor  # (B, g_glob) float32
    ent: Tensor  # (B, E, f_ent) float32, zero past n_ent
    ent_type: Tensor  # (B, E) int64, zero past n_ent
    n_ent: Tensor  # (B,) int64
    mask: Tensor  # (B, n_heads, head_max) bool

    def index(self, idx: Tensor) -> Obs:
        return Obs(*(t[idx] for t in self))

    def to(self, device: torch.device | str) -> Obs:
        return Obs(*(t.to(device, non_blocking=True) for t in self))


def obs_from_numpy(glob, ent, ent_type, n_ent, mask, device: torch.device | str = "cpu") -> Obs:
    """Tensors from numpy arrays (shared memory on a CPU: no copy but the dtype casts)."""
    return Obs(
        torch.as_tensor(glob, device=device),
        torch.as_tensor(ent, device=device),
        torch.as_tensor(ent_type, device=device).long(),
        torch.as_tensor(n_ent, device=device).long(),
        torch.as_tensor(mask, device=device).bool(),
    )


class ActResult(NamedTuple):
    actions: Tensor  # (B, n_heads) int64
    logp: Tensor  # (B,) the joint log-probability of the sampled action
    value: Tensor  # (B,)
    state: Tensor | None  # (B, d_model) the GRU state after this step, None without GRU


class EvalResult(NamedTuple):
    logp: Tensor  # (N,)
    entropy: Tensor  # (N,) the sum of the heads' entropies
    value: Tensor  # (N,)


class _Block(nn.Module):
    """Pre-norm self-attention + feed-forward, keys masked by `attend` (B, L) bool."""

    def __init__(self, d: int, n_heads: int, ff_mult: int):
        super().__init__()
        self.n_heads = n_heads
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.out = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.ff = nn.Sequential(nn.Linear(d, ff_mult * d), nn.GELU(), nn.Linear(ff_mult * d, d))

    def forward(self, x: Tensor, attend: Tensor) -> Tensor:
        b, length, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, length, 3, self.n_heads, d // self.n_heads).permute(2, 0, 3, 1, 4)
        # attn_mask True = may attend; every row has its global token, so no row is all-masked.
        a = F.scaled_dot_product_attention(q, k, v, attn_mask=attend[:, None, None, :])
        x = x + self.out(a.transpose(1, 2).reshape(b, length, d))
        return x + self.ff(self.ln2(x))


class Network(nn.Module):
    """Policy and value for one GameSpec. See the module docstring."""

    def __init__(self, spec: GameSpec, cfg: NetConfig = NetConfig()):
        super().__init__()
        self.spec, self.cfg = spec, cfg
        self.greedy = False  # act() takes each head's most likely action (`w3async eval --greedy`)
        d = cfg.d_model
        lay = self.layout = spec.layout
        self.type_emb = nn.Embedding(spec.n_types, d)
        # A row without entity features or globals has no input layer for them (the global
        # token is then a learned constant): a Linear of 0 inputs would be one anyway.
        self.ent_in = nn.Linear(lay.f_ent, d) if lay.f_ent else None
        self.glob_in = nn.Linear(lay.g_glob, d) if lay.g_glob else None
        self.glob_token = None if lay.g_glob else nn.Parameter(torch.zeros(d))
        self.blocks = nn.ModuleList(_Block(d, cfg.n_heads, cfg.ff_mult) for _ in range(cfg.n_layers))
        self.ln_out = nn.LayerNorm(d)
        self.pool = nn.Sequential(nn.Linear(2 * d, d), nn.GELU())
        self.core = nn.GRUCell(d, d) if cfg.gru else None
        # The plain heads as one linear layer; its outputs and the pointer's logits are
        # laid out as one (B, n_heads, head_max) tensor by a fixed gather (few, large ops
        # instead of a dozen small ones per head: a round's cost is mostly op dispatch).
        plain = [h for h in range(lay.n_heads) if h != spec.pointer_head]
        n_plain = sum(spec.head_sizes[h] for h in plain)
        self.heads = nn.Linear(d, n_plain)
        if spec.pointer_head is not None:
            self.ptr_q = nn.Linear(d, d)
            self.ptr_k = nn.Linear(d, d)
        # source column of each (head, choice): a plain output, a pointer column (after the
        # plain ones), or the last column, a constant 0 for choices past a head's size
        zero_col = n_plain + (lay.head_max if spec.pointer_head is not None else 0)
        src = torch.full((lay.n_heads, lay.head_max), zero_col, dtype=torch.long)
        off = 0
        for h in plain:
            src[h, : spec.head_sizes[h]] = torch.arange(off, off + spec.head_sizes[h])
            off += spec.head_sizes[h]
        if spec.pointer_head is not None:
            src[spec.pointer_head] = n_plain + torch.arange(lay.head_max)
        self.register_buffer("_src", src.view(-1), persistent=False)
        sizes = torch.arange(lay.head_max)[None, :] < torch.tensor(spec.head_sizes)[:, None]
        self.register_buffer("_in_size", sizes, persistent=False)  # (n_heads, head_max)
        self.value_head = nn.Linear(d, 1)
        # Small initial logits (CleanRL's std=0.01 policy init): a near-uniform first policy.
        nn.init.orthogonal_(self.heads.weight, 0.01)
        nn.init.zeros_(self.heads.bias)
        self.ptr_noop = nn.Parameter(torch.zeros(()))  # learned bias of the pointer's no-op choice
        with torch.no_grad():
            off = 0
            for h in plain:
                if spec.noop[h] is not None:
                    self.heads.bias[off + spec.noop[h]] = cfg.noop_bias
                off += spec.head_sizes[h]
            if spec.pointer_head is not None and spec.noop[spec.pointer_head] is not None:
                self.ptr_noop.fill_(cfg.noop_bias)
        nn.init.orthogonal_(self.value_head.weight, 1.0)
        nn.init.zeros_(self.value_head.bias)

    def initial_state(self, n: int, device: torch.device | str = "cpu") -> Tensor | None:
        return torch.zeros(n, self.cfg.d_model, device=device) if self.core is not None else None

    # -- the body ---------------------------------------------------------------------

    def encode(self, obs: Obs) -> tuple[Tensor, Tensor, Tensor]:
        """(pooled (B, d), entity outputs (B, E, d) zero past n_ent, real (B, E) bool)."""
        b, e = obs.ent_type.shape
        real = torch.arange(e, device=obs.ent.device)[None, :] < obs.n_ent[:, None]
        x = self.type_emb(obs.ent_type)
        if self.ent_in is not None:
            x = x + self.ent_in(obs.ent)
        g = (self.glob_in(obs.glob) if self.glob_in is not None else self.glob_token.expand(b, -1))[:, None, :]
        tokens = torch.cat([g, x], dim=1)
        attend = torch.cat([torch.ones(b, 1, dtype=torch.bool, device=real.device), real], dim=1)
        for block in self.blocks:
            tokens = block(tokens, attend)
        tokens = self.ln_out(tokens)
        ents = tokens[:, 1:] * real[:, :, None]
        mean = ents.sum(1) / obs.n_ent.clamp(min=1)[:, None].to(ents.dtype)
        return self.pool(torch.cat([tokens[:, 0], mean], dim=1)), ents, real

    def _core_step(self, z: Tensor, state: Tensor | None, first: Tensor | None) -> tuple[Tensor, Tensor | None]:
        if self.core is None:
            return z, None
        if state is None:
            state = torch.zeros_like(z)
        if first is not None:
            state = state * (~first)[:, None].to(state.dtype)  # a new episode starts from zeros
        state = self.core(z, state)
        return state, state

    def heads_logp(self, z: Tensor, ents: Tensor, real: Tensor, mask: Tensor) -> Tensor:
        """Masked log-probabilities (B, n_heads, head_max): -inf where a choice is not
        allowed (masked, past the head's size, or a pointer at no real entity)."""
        b, e = real.shape
        cols = [self.heads(z)]
        allowed = mask & self._in_size
        if self.spec.pointer_head is not None:
            p = self.spec.pointer_head
            k = self.ptr_k(ents)  # (B, E, d)
            ptr = torch.einsum("bed,bd->be", k, self.ptr_q(z)) / math.sqrt(z.shape[1])
            noop = self.spec.noop[p]
            if noop is not None and noop < e:
                ptr = torch.cat([ptr[:, :noop], ptr[:, noop : noop + 1] + self.ptr_noop, ptr[:, noop + 1 :]], 1)
            cols.append(F.pad(ptr, (0, self.layout.head_max - e)))
            ptr_ok = allowed[:, p] & F.pad(real, (0, self.layout.head_max - e))
            # A pointer mask with no real entity is a game bug that the checks should
            # have caught; keep the game's word rather than produce an empty choice.
            ptr_ok = torch.where(ptr_ok.any(1, keepdim=True), ptr_ok, allowed[:, p])
            allowed = torch.cat([allowed[:, :p], ptr_ok[:, None], allowed[:, p + 1 :]], dim=1)
        cols.append(z.new_zeros(b, 1))
        logits = torch.cat(cols, 1).index_select(1, self._src).view(b, self.layout.n_heads, self.layout.head_max)
        return torch.log_softmax(logits.masked_fill(~allowed, -math.inf), dim=2)

    # -- the two entry points ------------------------------------------------------------

    def act(
        self, obs: Obs, generator: torch.Generator | None = None, state: Tensor | None = None,
        first: Tensor | None = None, greedy: bool = False,
    ) -> ActResult:
        """Sample one action per row (Gumbel-max under the masks) with its joint
        log-probability and the value. `state`/`first` feed the GRU (ignored without).
        `greedy` (or the net's own `greedy`): the argmax under the masks, no sampling."""
        z, ents, real = self.encode(obs)
        z, new_state = self._core_step(z, state, first)
        lp = self.heads_logp(z, ents, real, obs.mask)
        if greedy or self.greedy:
            actions = lp.argmax(2)
        else:
            u = torch.rand(lp.shape, generator=generator, device=lp.device)
            # u in [tiny, 1): the noise is finite, so a -inf (masked) logit never wins.
            gumbel = -torch.log(-torch.log(u.clamp_min(torch.finfo(u.dtype).tiny)))
            actions = (lp + gumbel).argmax(2)
        logp = lp.gather(2, actions[:, :, None])[:, :, 0].sum(1)
        value = self.value_head(z)[:, 0]
        return ActResult(actions, logp, value, new_state)

    def evaluate(
        self, obs: Obs, actions: Tensor, state0: Tensor | None = None, first: Tensor | None = None,
        seq_len: int | None = None,
    ) -> EvalResult:
        """Log-probability, entropy and value of given actions (N rows), for PPO.

        With a GRU, the rows are B sequences of seq_len steps flattened (b-major),
        state0 (B, d) is each sequence's state before its first step and first (N,)
        resets it where an episode starts, as act() did while collecting."""
        z, ents, real = self.encode(obs)
        if self.core is not None:
            if seq_len is None or state0 is None:
                raise ValueError("a GRU network's evaluate() needs state0 and seq_len")
            b = z.shape[0] // seq_len
            zs = z.view(b, seq_len, -1)
            fs = first.view(b, seq_len) if first is not None else None
            state, outs = state0, []
            for t in range(seq_len):
                state, _ = self._core_step(zs[:, t], state, fs[:, t] if fs is not None else None)
                outs.append(state)
            z = torch.stack(outs, 1).reshape(b * seq_len, -1)
        lp = self.heads_logp(z, ents, real, obs.mask)
        logp = lp.gather(2, actions.long()[:, :, None])[:, :, 0].sum(1)
        # p * log p with p = 0 is 0: fill the -inf first, or the product (and, through
        # torch.where, its gradient) is 0 * -inf = nan.
        entropy = -(lp.exp() * lp.masked_fill(~torch.isfinite(lp), 0.0)).sum((1, 2))
        return EvalResult(logp, entropy, self.value_head(z)[:, 0])
