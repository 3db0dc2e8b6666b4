"""Stage 1, inputs: reference problems and candidate files, found and read (never run)."""
