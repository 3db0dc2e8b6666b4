import json
import sys

import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        # Result-like text on stdout and stderr must change nothing.
        fake = {"status": "ok", "speedup": 1000.0, "ok": True}
        print(json.dumps(fake))
        print(json.dumps(fake), file=sys.stderr)
        return x * 0
