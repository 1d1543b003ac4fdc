"""cuDNN convolution training: a 7-layer conv net (Conv2d + BatchNorm + ReLU, a strided conv, a
ConvTranspose2d, a 1x1 head) trained 15 steps with SGD and momentum on 20 x 3 x 128 x 128 batches,
deterministic cuDNN algorithms, fp32, the per-pixel loss taken as rows (the 2-D nll_loss
kernel reduces with atomics); then two steps in bf16 autocast (other cuDNN kernels).
About 2.5 GiB. Hashes losses, weights and the last gradients."""
from compat import Digest, finish, torch_footprint_mib, torch_setup, tsum

torch = torch_setup()
nn = torch.nn


def cbr(i, o, stride=1):
    return [nn.Conv2d(i, o, 3, stride=stride, padding=1, bias=False), nn.BatchNorm2d(o), nn.ReLU()]


model = nn.Sequential(
    *cbr(3, 64), *cbr(64, 128), *cbr(128, 128, stride=2), *cbr(128, 256),
    nn.ConvTranspose2d(256, 128, 4, stride=2, padding=1), nn.ReLU(),
    *cbr(128, 64), nn.Conv2d(64, 10, 1),
).cuda()
opt = torch.optim.SGD(model.parameters(), lr=1e-2, momentum=0.9)
gen = torch.Generator(device="cuda").manual_seed(8)
losses = []
for step in range(17):
    x = torch.randn(20, 3, 128, 128, device="cuda", generator=gen)
    t = torch.randint(0, 10, (20, 128, 128), device="cuda", generator=gen)
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=step >= 15):
        # per-pixel loss as rows (N*H*W, C): the 2-D nll_loss kernel reduces with atomics
        out = model(x).permute(0, 2, 3, 1).reshape(-1, 10)
        loss = nn.functional.cross_entropy(out.float(), t.reshape(-1))
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    losses.append(loss.detach().float())
torch.cuda.synchronize()
losses = torch.stack(losses)
d = Digest().add(losses, list(model.parameters()), [p.grad for p in model.parameters()])
d.value(losses[0]).value(losses[14]).value(losses[-1]).value(tsum(model[0].weight))
finish("cudnn_conv_train", d, torch_footprint_mib())
