"""Messaging clients behind one interface, chosen by URL scheme (the load-generation issue)."""
