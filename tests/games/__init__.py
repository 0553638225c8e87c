"""Games that exist only for the tests: each registers itself with w3async.games from
here, with no edit of the package (docs/games.md)."""
