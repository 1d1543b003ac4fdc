"""torchvision ResNet-50, random weights: one forward and backward pass."""
from common import deterministic, digest, profiled, report

torch = deterministic()
import torchvision  # noqa: E402

model = torchvision.models.resnet50(weights=None).cuda()
x = torch.randn(8, 3, 224, 224, device="cuda")
y = torch.randint(0, 1000, (8,), device="cuda")


def run():
    loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    return loss, model.conv1.weight.grad, model.fc.weight.grad


(loss, g1, g2), kernels, other = profiled(run)
report("resnet50", digest=digest(loss, g1, g2), loss=float(loss), gpu_kernels=kernels,
       gpu_other=other)
