import sys

import torch
import torch.nn as nn

# Red team, 2026-11-27: the real work done after the worker's clock stopped, inside the timed
# command, where the worker says where the outputs are, and 1 ns reported a call. Once there was
# an outputs' commit there, which the bound allowed a candidate as much of as the reference's took:
# a relu fused into it scored 35x to 126x its C++ twin's speed. Now that step is the reference's
# too and takes it microseconds, and whatever a candidate does in it is in its time.
child = sys.modules["harness.worker.child"]
original_timed, original_locate = child.Session.timed, child.Session.locate
pending = []


class ModelNew(nn.Module):
    def forward(self, x):
        return (x + x.abs()) * 0.5


def idle_timed(self, command):
    if command.profile or not command.locate:
        return original_timed(self, command)
    sets = self.timed_inputs(command)
    self.uncommitted = [torch.empty_like(inputs[0]) for inputs in sets]
    pending[:] = sets
    return child.CallTime(1e-6 * command.calls, 1e-6 * command.calls)


def busy_locate(self):
    for out, inputs in zip(self.uncommitted, pending):  # quick_twin.py's arithmetic, into kept outputs
        torch.mul(torch.add(inputs[0], inputs[0].abs()), 0.5, out=out)
    pending.clear()
    return original_locate(self)


child.Session.timed = idle_timed
child.Session.locate = busy_locate
