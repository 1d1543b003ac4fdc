"""torchvision.models.resnet18(weights=None): 8 training steps (SGD, momentum) on seeded
64 x 3 x 224 x 224 batches with deterministic cuDNN, then inference in eval mode. About 2 GiB.
Hashes losses, weights and the eval logits."""
import torchvision

from compat import Digest, finish, torch_footprint_mib, torch_setup, tsum

torch = torch_setup()
model = torchvision.models.resnet18(weights=None).cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=1e-4)
gen = torch.Generator(device="cuda").manual_seed(10)
losses = []
for step in range(8):
    x = torch.randn(64, 3, 224, 224, device="cuda", generator=gen)
    y = torch.randint(0, 1000, (64,), device="cuda", generator=gen)
    loss = torch.nn.functional.cross_entropy(model(x), y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    losses.append(loss.detach())
model.eval()
with torch.no_grad():
    logits = model(torch.randn(64, 3, 224, 224, device="cuda", generator=gen))
torch.cuda.synchronize()
losses = torch.stack(losses)
d = Digest().add(losses, list(model.parameters()), logits)
d.value(losses[0]).value(losses[-1]).value(tsum(logits))
finish("torchvision_resnet18", d, torch_footprint_mib())
