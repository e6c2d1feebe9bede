"""The bottom layer: notes, codes, codec, topics, control bus, peer runtime.

Every other package may import it; it imports none of them.
"""
