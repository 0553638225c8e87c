"""Game hosts on other machines through Ray ([cluster], docs/cluster.md): gamehost.py
runs on a node, link.py in the centre, wire.py is what crosses between them. Imported
only by a recipe with a [cluster] section."""
