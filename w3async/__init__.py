"""w3async: a single-host orchestrator for self-play reinforcement learning on real game processes."""

import os as _os

# torch's OpenMP threads spin while they wait; next to the games on a small machine they
# steal the cores the rounds and the learner need (an update: 1.37 s spinning, 0.82 s
# passive, docs/performance.md). Read once, when OpenMP starts: set before torch runs.
_os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

__version__ = "0.1.0"
