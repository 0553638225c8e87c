"""w3async: a single-host orchestrator for self-play reinforcement learning on real game processes."""

__version__ = "0.1.0"
