"""torch.compile (default mode, Inductor's Triton kernels) of an 8-block GELU/LayerNorm MLP
(width 1536), trained 12 steps with SGD: the compiled forward and its compiled backward.
About 1.5 GiB. Hashes losses and the final weights."""
from compat import Digest, finish, torch_footprint_mib, torch_setup, tsum

torch = torch_setup()
nn = torch.nn


class Block(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.norm = nn.LayerNorm(d)
        self.up = nn.Linear(d, 4 * d)
        self.down = nn.Linear(4 * d, d)

    def forward(self, x):
        return x + self.down(nn.functional.gelu(self.up(self.norm(x))))


model = nn.Sequential(*[Block(1536) for _ in range(8)], nn.LayerNorm(1536)).cuda()
cmodel = torch.compile(model)
opt = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
gen = torch.Generator(device="cuda").manual_seed(3)
losses = []
for step in range(12):
    x = torch.randn(1024, 1536, device="cuda", generator=gen)
    t = torch.randn(1024, 1536, device="cuda", generator=gen)
    loss = (cmodel(x) - t).square().mean()
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    losses.append(loss.detach())
torch.cuda.synchronize()
losses = torch.stack(losses)
d = Digest().add(losses, list(model.parameters()))
d.value(losses[0]).value(losses[-1]).value(tsum(model[0].up.weight))
finish("torch_compile", d, torch_footprint_mib())
