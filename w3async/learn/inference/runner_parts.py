"""The pieces of the inference engine's CUDA runner (w3async.learn.inference.cuda_runner) that are
the same on any device: the step each graph captures, the weights' check, and a CPU's
stand-ins for streams, events and graphs, with which tests run the runner's own code on a
CPU (tests/learn/test_cuda_runner.py)."""

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
        for o, t in zip(self.out, self.step()):
            if o is not None:
                o.copy_(t)


def graph_step(net: Network, src: dict, sel: torch.Tensor, state: torch.Tensor | None, scratch: int,
               gen: torch.Generator) -> tuple:
    """What each graph captures: gather the net's rows from the staging views `src` by
    the static index `sel` (the graph's row bucket of staging rows, then the count of
    real ones; padded rows repeat a real row, so they hold valid inputs and their answers
    are not read), step, sample from `gen`, and pack the answers into one tensor per row
    (actions as floats, log-probability, value, and with GRU the state each row had) for
    one copy to the host. With GRU, the rows' state is gathered from `state` by their
    table rows (padded rows by the scratch row), zeroed where FIRST is set, stepped, and
    scattered back in place. Returns (the packed answers, the table rows stepped or None,
    their state before FIRST zeroed it (the rollback's) or None). Under no_grad: nothing
    here may keep autograd state."""
    rb = sel.shape[0] - 1
    idx = sel[:rb]
    obs = Obs(src["glob"].index_select(0, idx), src["ent"].index_select(0, idx),
              src["ent_type"].index_select(0, idx).long(), src["n_ent"].index_select(0, idx).long(),
              src["mask"].index_select(0, idx).bool())
    if state is None:
        r = net.act(obs, gen)
        return torch.cat([r.actions.float(), r.logp[:, None], r.value[:, None]], 1), None, None
    real = torch.arange(rb, device=sel.device) < sel[rb]
    rows = torch.where(real, src["rows"].index_select(0, idx), scratch)
    prev = state.index_select(0, rows)
    keep = ((src["flags"].index_select(0, idx) & layout.FLAG_FIRST) == 0).to(state.dtype)[:, None]
    state_in = prev * keep  # a new episode starts from zeros
    r = net.act(obs, gen, state=state_in)
    state.index_copy_(0, rows, r.state)
    return torch.cat([r.actions.float(), r.logp[:, None], r.value[:, None], state_in], 1), rows, prev


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
