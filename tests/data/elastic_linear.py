"""A minimal gpuwise.elastic script for the tests: a linear regression on a fixed random dataset."""

import sys

import torch

from gpuwise import elastic

s = elastic.init(job_dir=sys.argv[1] if len(sys.argv) > 1 else None)
torch.manual_seed(0)
w_true = torch.randn(8)
x = torch.randn(256, 8)
data = list(zip(x, x @ w_true))
model = elastic.model(torch.nn.Linear(8, 1))
opt = elastic.optimizer(torch.optim.SGD(model.parameters(), lr=0.05), scaling="sqrt")
loader = elastic.DataLoader(data, batch_size=8)
SEEN = []  # (step, dataset indices of this rank's share): what the tests compare across resumes
for step in elastic.steps(total=int(sys.argv[2]) if len(sys.argv) > 2 else 6, chunk=3):
    SEEN.append((step, loader.indices().tolist()))
    xb, yb = loader.batch()
    loss = torch.nn.functional.mse_loss(model(xb).squeeze(-1), yb)
    loss.backward()
    opt.step()
    opt.zero_grad()
    elastic.report(loss=loss)
