"""Scaled dot-product attention (torch.nn.functional.scaled_dot_product_attention) on
4 x 16 x 2048 x 128 bf16 tensors under each backend forced in turn: flash (causal), memory-
efficient (with an additive mask), cuDNN attention where this build has it, and the math
backend, whose backward pass gives q, k and v gradients (the fused backends' backward passes
accumulate with atomics, so only forward passes use them). About 2.5 GiB. Hashes every output
and which backends ran."""
import sys

from compat import Digest, finish, torch_footprint_mib, torch_setup, tsum

torch = torch_setup()
from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: E402

F = torch.nn.functional
gen = torch.Generator(device="cuda").manual_seed(9)
shape = (4, 16, 2048, 128)
q, k, v = (torch.randn(shape, device="cuda", generator=gen, dtype=torch.bfloat16)
           for _ in range(3))
mask = torch.randn(4, 1, 2048, 2048, device="cuda", generator=gen, dtype=torch.bfloat16)
d = Digest()
ran = []
for name, backend, kw in [("flash", SDPBackend.FLASH_ATTENTION, {"is_causal": True}),
                          ("efficient", SDPBackend.EFFICIENT_ATTENTION, {"attn_mask": mask}),
                          ("cudnn", getattr(SDPBackend, "CUDNN_ATTENTION", None), {"is_causal": True})]:
    if backend is None:
        continue
    try:
        with sdpa_kernel([backend]):
            o = F.scaled_dot_product_attention(q, k, v, **kw)
        torch.cuda.synchronize()
    except RuntimeError as e:
        print(f"sdpa_attention: backend {name} not run: {str(e).splitlines()[0]}", file=sys.stderr)
        ran.append(f"{name}:no")
        continue
    ran.append(f"{name}:yes")
    d.add(o)
    d.value(tsum(o))
qg, kg, vg = (t.detach().clone().requires_grad_(True) for t in (q, k, v))
with sdpa_kernel([SDPBackend.MATH]):
    o = F.scaled_dot_product_attention(qg, kg, vg, is_causal=True)
o.float().square().mean().backward()
torch.cuda.synchronize()
d.add(o, qg.grad, kg.grad, vg.grad, ran)
d.value(tsum(o)).value(tsum(qg.grad))
finish("sdpa_attention", d, torch_footprint_mib(), tol=1e-3, backends=",".join(ran))
