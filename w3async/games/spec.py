"""What a game tells the harness about its rows: type ids, action heads, pointer head.

The table's layout is fixed (layout.py); a game uses a part of it. The network sizes
its embeddings and heads from a GameSpec, the checks use n_types, and masks past a
head's size are zero.
"""

from __future__ import annotations

from dataclasses import dataclass

from w3async.sync import layout


@dataclass(frozen=True)
class GameSpec:
    name: str
    n_types: int  # entity type ids are 0..n_types-1
    head_sizes: tuple[int, ...]  # choices per action head, len == layout.N_HEADS
    pointer_head: int | None = None  # a head whose choice c points at entity c of the row
    noop: tuple = (None, None, None, None)
    """Per head, the choice that means "change nothing" (None: no such choice). A network
    may start biased towards it (NetConfig.noop_bias), so that a fresh policy does not
    re-order its army at random every step."""

    def __post_init__(self) -> None:
        if len(self.head_sizes) != layout.N_HEADS:
            raise ValueError(f"{self.name}: {len(self.head_sizes)} head sizes, the table has {layout.N_HEADS} heads")
        for h, n in enumerate(self.head_sizes):
            if not 1 <= n <= layout.HEAD_MAX:
                raise ValueError(f"{self.name}: head {h} has {n} choices, must be 1..{layout.HEAD_MAX}")
        if len(self.noop) != layout.N_HEADS or any(c is not None and not 0 <= c < n
                                                     for c, n in zip(self.noop, self.head_sizes)):
            raise ValueError(f"{self.name}: noop {self.noop} must give None or a choice per head")
        if self.pointer_head is not None and self.head_sizes[self.pointer_head] < layout.E_MAX:
            raise ValueError(f"{self.name}: pointer head {self.pointer_head} needs {layout.E_MAX} choices")

