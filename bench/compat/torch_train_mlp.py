"""PyTorch eager training: a four-layer MLP with dropout, Adam, 40 steps on seeded random batches
(fp32, no TF32). About 2.3 GiB: 138 M parameters, their gradients and Adam's two moments.
Hashes the losses and the final weights."""
from compat import Digest, finish, torch_footprint_mib, torch_setup, tsum

torch = torch_setup()
nn = torch.nn
model = nn.Sequential(
    nn.Linear(4096, 8192), nn.ReLU(), nn.Dropout(0.1),
    nn.Linear(8192, 8192), nn.GELU(),
    nn.Linear(8192, 4096), nn.Tanh(),
    nn.Linear(4096, 1000),
).cuda()
opt = torch.optim.Adam(model.parameters(), lr=1e-4)
gen = torch.Generator(device="cuda").manual_seed(1)
losses = []
for step in range(40):
    x = torch.randn(512, 4096, device="cuda", generator=gen)
    y = torch.randint(0, 1000, (512,), device="cuda", generator=gen)
    loss = nn.functional.cross_entropy(model(x), y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    losses.append(loss.detach())
torch.cuda.synchronize()
losses = torch.stack(losses)
d = Digest().add(losses, [p for p in model.parameters()])
d.value(losses[0]).value(losses[-1]).value(tsum(model[0].weight)).value(tsum(model[7].weight))
finish("torch_train_mlp", d, torch_footprint_mib())
