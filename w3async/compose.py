"""The composition root: what a run is made of, chosen in one place.

The runtime package (w3async.runtime) runs games and answers them through whatever
answerer it is handed; it imports nothing of the learner (w3async.learn) nor of the
cluster (w3async.cluster), which sit above it. This module, above all three, picks for a
recipe:

- the answerer: a given one, a given fixed policy, the learner (`policy = "network"`:
  learn.training.Training, which loads the latest checkpoint or refuses the run), or the
  recipe's fixed policy ("check", "random"), whose episodes an EpisodeBook (learn/tallies.py)
  writes as the learner's are;
- the cluster link (cluster.link.ClusterLink) for a recipe with a [cluster] section;

and hands them to the Supervisor. Every entry point makes its run here (supervisor()):
`python -m w3async run` with the recipe's choice, `w3async eval` (learn/evaluate.py) and
the env's supervisor thread (env/bridge.py) with an answerer of their own: they differ only
in that answerer and the thread that hosts the run. A game host (cluster/gamehost.py), below
this module, hands the Supervisor its RemoteAnswerer itself (it has no cluster link).
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from w3async.runtime.answerer import Answerer, RunControl
from w3async.runtime.policies import PolicyAnswerer, policy_answerer
from w3async.runtime.supervisor import Supervisor

MakeAnswerer = Callable[[RunControl], Answerer]


def answerer_for(recipe, policy: Callable | None = None, answerer: MakeAnswerer | None = None) -> MakeAnswerer:
    """What makes the run's answerer from its RunControl (called in the supervisor's
    set-up, after the slots and before any game starts)."""
    if answerer is not None:
        return answerer
    if recipe.supervisor.policy == "network" and policy is None:
        from w3async.learn.training import Training  # noqa: PLC0415 (torch only where a network answers)

        return Training
    from w3async.learn.tallies import EpisodeBook  # noqa: PLC0415 (numpy only: no torch)

    def book(control: RunControl) -> EpisodeBook:  # every policy's episodes in episodes.jsonl
        return EpisodeBook(recipe, control.games, control.n_rows)

    if policy is not None:
        return lambda control: PolicyAnswerer(control, policy, book(control))
    return lambda control: policy_answerer(control, recipe.supervisor.policy, book(control))


def cluster_link_for(recipe) -> Callable | None:
    """The class that links a run to its game hosts, for a recipe with [cluster] (Ray
    imported only then)."""
    if recipe.cluster is None:
        return None
    from w3async.cluster.link import ClusterLink  # noqa: PLC0415

    return ClusterLink


def supervisor(recipe, run_dir: Path, *, policy: Callable | None = None, answerer: MakeAnswerer | None = None,
               **kw) -> Supervisor:
    """The run of `recipe` in `run_dir`: a Supervisor with its answerer (answerer_for) and
    cluster link chosen here; `kw` as the Supervisor's (signals, keep_signals, cluster to
    replace the recipe's link)."""
    kw.setdefault("cluster", cluster_link_for(recipe))
    return Supervisor(recipe, run_dir, answerer=answerer_for(recipe, policy, answerer), **kw)
