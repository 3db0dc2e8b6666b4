"""Timing, the same on every device: the protocol (protocol.py), its statistics (stats.py), the
parent's clock bound (bound.py), and the hooks a device's measurement fills in (measurement.py)."""
