"""The inference engine: gathered rows in, one action per row out, on a worker thread.

engine.py is its face (InferenceEngine: submit, publish, load_net; the CPU path);
cuda_runner.py its CUDA path (streams, graphs, pinned buffers), runner_parts.py the
pieces of that runner any device runs (tests run them on a CPU), flights.py the rounds
in flight and their finisher thread, inputs.py the round's input buffers and
synthetic_batch for tests and benchmarks."""

from w3async.learn.inference.engine import InferenceEngine
from w3async.learn.inference.inputs import synthetic_batch

__all__ = ["InferenceEngine", "synthetic_batch"]
