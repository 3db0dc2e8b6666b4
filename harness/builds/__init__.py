"""Stage 2, builds: the build cache, build workers ahead of evaluation, and compiler logs read as data."""
