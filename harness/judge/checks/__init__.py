"""The integrity checks of every device, one module each (judge/checking.py says how they are found
and asked). A device's own checks are in its package (harness/cpu/checks/)."""
