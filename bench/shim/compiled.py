"""A torch.compile'd function (Inductor generates Triton kernels)."""
from common import deterministic, digest, profiled, report

torch = deterministic()


def f(x, w):
    y = torch.nn.functional.gelu(x @ w)
    y = torch.nn.functional.layer_norm(y, y.shape[-1:])
    return torch.softmax(y * 1.5 + torch.sin(y), dim=-1)


g = torch.compile(f)
x = torch.randn(512, 1024, device="cuda")
w = torch.randn(1024, 1024, device="cuda")
g(x, w)  # compile outside the profiled region
out, kernels, other = profiled(lambda: g(x, w))
report("torch_compile", digest=digest(out), gpu_kernels=kernels, gpu_other=other)
