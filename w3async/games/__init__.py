"""w3async.games."""
