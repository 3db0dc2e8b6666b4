"""The CPU's own integrity checks (judge/checking.py says how checks are found and asked): they read
what only a CPU run gathers, its sampling of the worker's threads and the load of the machine."""
