class ModelNew(nn.Module):
    def forward(self, x):
        return x.clamp_min(0)
