import sys

import torch.nn as nn

# Patch the worker's reply so every timed call reports 0 ms: a median of zero, an infinite speedup,
# a chart whose log scale has no place for it. The parent must refuse the message instead.
worker = sys.modules["harness.worker.child"]
real_send = worker.send_model


def zero_send(conn, message):
    if getattr(message, "elapsed_ms", None) is not None:
        message.elapsed_ms = 0.0
    real_send(conn, message)


worker.send_model = zero_send


class ModelNew(nn.Module):
    def forward(self, x):
        return (x + x.abs()) * 0.5
