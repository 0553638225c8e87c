"""The pieces of the inference engine's CUDA runner (w3async.learn.cuda_runner) that are
the same on any device: the step each graph captures, the weights' check, and a CPU's
stand-ins for streams, events and graphs, with which tests run the runner's own code on a
CPU (tests/test_cuda_runner.py)."""

from __future__ import annotations

import torch

from w3async.learn.network import Network, Obs
from w3async.sync import layout


class NoStream:
    """A CPU device's stand-in for a CUDA stream or event: its work is done when queued."""

    def wait_event(self, *_) -> None: ...
    wait_stream = record = synchronize = wait_event


class EagerGraph:
    """A CPU device's stand-in for a CUDA graph: replay() runs the captured step again
    and copies its results into the outputs of the capture (static, as a graph's are)."""

    def __init__(self, step, out):
        self.step, self.out = step, out

    def replay(self) -> None:
        (r, *rest), (r2, *rest2) = self.out, self.step()
        for o, t in zip([*r, *rest], [*r2, *rest2]):
            if o is not None:
                o.copy_(t)


def graph_step(net: Network, st: dict, state: torch.Tensor | None, gen: torch.Generator):
    """What each graph captures: the net's step over the static inputs `st`, sampling from
    `gen`. With GRU, the rows' state is gathered from `state` by st["rows"], zeroed where
    FIRST is set, stepped, and scattered back in place. Returns (the ActResult, the state
    each row had before the step or None, the state as gathered before FIRST zeroed it
    (the rollback's) or None). Called under no_grad: nothing here may keep autograd state."""
    obs = Obs(st["glob"], st["ent"], st["ent_type"].long(), st["n_ent"].long(), st["mask"].bool())
    if state is None:
        return net.act(obs, gen), None, None
    prev = state.index_select(0, st["rows"])
    keep = ((st["flags"] & layout.FLAG_FIRST) == 0).to(state.dtype)[:, None]
    state_in = prev * keep  # a new episode starts from zeros
    r = net.act(obs, gen, state=state_in)
    state.index_copy_(0, st["rows"], r.state)
    return r, state_in, prev


def check_weights(k: int, own: dict, sd: dict) -> None:
    """Raise ValueError (one line: the net, what differs, the fix) unless sd has exactly
    own's names and shapes: load_state_dict's check, which a plain copy_ skips, made
    before anything is copied (load_state_dict itself copies the matching ones first)."""
    missing, extra = sorted(set(own) - set(sd)), sorted(set(sd) - set(own))
    if missing or extra:
        raise ValueError(f"net {k}: weights do not match the network (missing {missing[:4]}, unexpected "
                         f"{extra[:4]}): load a state_dict of the same NetConfig")
    bad = [name for name, t in own.items() if tuple(sd[name].shape) != tuple(t.shape)]
    if bad:
        raise ValueError(f"net {k}: weights of another shape for {bad[:4]} (e.g. {tuple(sd[bad[0]].shape)} for "
                         f"{tuple(own[bad[0]].shape)}): load a state_dict of the same NetConfig")
