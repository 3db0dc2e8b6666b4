"""Every flag a result can carry, as one enum for the Python API (`harness.Flag`): those judge/
verdicts.py decides and every check's (judge/checks/, and each device's own, harness/cpu/checks/).
A flag is a string in a Result; this enum only names them, and grows with the checks."""

from __future__ import annotations

import enum

from .judge import verdicts
from .judge.checking import checks_in, common

DEVICE_CHECKS = ("harness.cpu.checks",)  # each device's own checks, where it has any


def all_flags() -> list[str]:
    checks = [*common(), *(check for package in DEVICE_CHECKS for check in checks_in(package))]
    found = [verdicts.NOT_PLAIN_TENSOR, verdicts.MEMORY_ERROR_FLAG, verdicts.NEAR_MISS, verdicts.BUSY_WHILE_STOPPED,
             verdicts.TAMPERED_RESULTS, *(check.flag for check in checks if check.flag)]
    return list(dict.fromkeys(found))


Flag = enum.Enum("Flag", {name: name for name in all_flags()}, type=str)
