"""Bottom layer: internal keys and entry kinds, shared by every other layer."""
