"""cuBLAS and cuDNN calls through PyTorch: fp32 GEMM, batched GEMM, a convolution forward and
backward, with deterministic algorithms."""
from common import deterministic, digest, profiled, report

torch = deterministic()
a = torch.randn(2048, 2048, device="cuda")
b = torch.randn(2048, 2048, device="cuda")
ba = torch.randn(16, 256, 512, device="cuda")
bb = torch.randn(16, 512, 128, device="cuda")
x = torch.randn(16, 64, 56, 56, device="cuda", requires_grad=True)
w = torch.randn(128, 64, 3, 3, device="cuda", requires_grad=True)


def run():
    c = a @ b
    d = torch.bmm(ba, bb)
    y = torch.nn.functional.conv2d(x, w, padding=1)
    y.square().mean().backward()
    return c, d, y, x.grad, w.grad


outs, kernels, other = profiled(run)
report("cublas_cudnn", digest=digest(*outs), gpu_kernels=kernels, gpu_other=other)
