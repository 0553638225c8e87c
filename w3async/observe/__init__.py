"""w3async.observe."""
