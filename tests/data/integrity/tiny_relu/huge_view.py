import sys

import torch.nn as nn

# Describe each correctness trial's output as a view of 2**40 elements with stride 0: a few bytes
# of the commit buffer to describe, 4 TB to read whole. Its shape is wrong, so it is a mismatch;
# nothing may read it whole on the way to saying so.
worker = sys.modules["harness.worker.child"]
real_send = worker.send_model


def huge_send(conn, message):
    outputs = getattr(message, "outputs", None)
    if outputs and getattr(message, "inputs", None) is not None:  # a trial's reply
        outputs[0].shape, outputs[0].stride = [2**40], [0]
    real_send(conn, message)


worker.send_model = huge_send


class ModelNew(nn.Module):
    def forward(self, x):
        return (x + x.abs()) * 0.5
