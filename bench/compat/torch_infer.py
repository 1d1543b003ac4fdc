"""PyTorch eager inference: a 12-layer nn.TransformerEncoder (d_model 1024, 16 heads, fp32) in
eval mode under inference_mode (PyTorch's fused encoder fast path), 6 batches of 16 x 512, then
the same batches through the bf16 model under autocast. About 1 GiB. Hashes every output."""
from compat import Digest, finish, torch_footprint_mib, torch_setup, tsum

torch = torch_setup()
nn = torch.nn
layer = nn.TransformerEncoderLayer(d_model=1024, nhead=16, dim_feedforward=4096, dropout=0.1,
                                   batch_first=True, norm_first=False)
model = nn.TransformerEncoder(layer, num_layers=12, enable_nested_tensor=False).cuda().eval()
gen = torch.Generator(device="cuda").manual_seed(2)
xs = [torch.randn(16, 512, 1024, device="cuda", generator=gen) for _ in range(6)]
d = Digest()
with torch.inference_mode():
    for x in xs:
        y = model(x)
        d.add(y)
    d.value(tsum(y))
    with torch.autocast("cuda", dtype=torch.bfloat16):
        for x in xs:
            y = model(x)
            d.add(y)
    d.value(tsum(y))
torch.cuda.synchronize()
finish("torch_infer", d, torch_footprint_mib(), tol=1e-4)
