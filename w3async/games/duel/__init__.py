"""w3async.games.duel."""
