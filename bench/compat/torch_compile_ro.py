"""torch.compile(mode="reduce-overhead"): Inductor's kernels replayed through CUDA graphs
(cudagraph trees) for a 6-layer GELU MLP (2048 -> 8192 -> 2048 per layer, fp32), inference on
30 batches of 256, each output cloned before the next replay overwrites it. About 1 GiB. Hashes
every output."""
from compat import Digest, finish, torch_footprint_mib, torch_setup, tsum

torch = torch_setup()
nn = torch.nn
layers = []
for _ in range(6):
    layers += [nn.Linear(2048, 8192), nn.GELU(), nn.Linear(8192, 2048), nn.LayerNorm(2048)]
model = nn.Sequential(*layers).cuda().eval()
f = torch.compile(model, mode="reduce-overhead")
gen = torch.Generator(device="cuda").manual_seed(4)
d = Digest()
with torch.no_grad():
    for i in range(30):
        torch.compiler.cudagraph_mark_step_begin()
        x = torch.randn(256, 2048, device="cuda", generator=gen)
        y = f(x).clone()
        d.add(y)
torch.cuda.synchronize()
d.value(tsum(y))
finish("torch_compile_ro", d, torch_footprint_mib())
