"""w3async.learn."""
