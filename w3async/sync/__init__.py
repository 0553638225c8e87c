"""w3async.sync."""
