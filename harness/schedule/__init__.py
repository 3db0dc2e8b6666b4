"""Stage 5, schedule: who does what where. Builds on a pool of cores, one evaluation lane per GPU,
locally (local.py) or on a Ray cluster (ray_cluster.py)."""
