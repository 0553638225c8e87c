"""What a game tells the harness about its rows: their shape, type ids, action heads,
pointer head.

A row's shape (a layout.Layout: entities x features, globals, action heads) is the
game's: the table, the checks, the network and the env's spaces are sized from it. The
duel and the null game keep the default shape (layout.DEFAULT); a declared game
([spec]) has the shape it declares. Masks past a head's size are zero.
"""

from __future__ import annotations

from dataclasses import dataclass

from w3async.sync import layout


@dataclass(frozen=True)
class GameSpec:
    name: str
    n_types: int  # entity type ids are 0..n_types-1
    head_sizes: tuple[int, ...]  # choices per action head, len == layout.n_heads
    pointer_head: int | None = None  # a head whose choice c points at entity c of the row
    noop: tuple | None = None
    """Per head, the choice that means "change nothing" (None: no such choice; the whole
    tuple None: no head has one). A network may start biased towards it
    (NetConfig.noop_bias), so that a fresh policy does not re-order its army at random
    every step."""
    layout: layout.Layout = layout.DEFAULT  # the rows' shape

    def __post_init__(self) -> None:
        lay = self.layout
        if self.noop is None:
            object.__setattr__(self, "noop", (None,) * len(self.head_sizes))
        if len(self.head_sizes) != lay.n_heads:
            raise ValueError(f"{self.name}: {len(self.head_sizes)} head sizes, its rows have {lay.n_heads} heads")
        for h, n in enumerate(self.head_sizes):
            if not 1 <= n <= lay.head_max:
                raise ValueError(f"{self.name}: head {h} has {n} choices, must be 1..{lay.head_max}")
        if len(self.noop) != lay.n_heads or any(c is not None and not 0 <= c < n
                                                  for c, n in zip(self.noop, self.head_sizes)):
            raise ValueError(f"{self.name}: noop {self.noop} must give None or a choice per head")
        if self.pointer_head is not None and (lay.e_max == 0 or self.head_sizes[self.pointer_head] < lay.e_max):
            raise ValueError(f"{self.name}: pointer head {self.pointer_head} needs {lay.e_max} choices, one per "
                             f"entity of a row (and a row with entities)")
