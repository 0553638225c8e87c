"""w3async.runtime."""
