"""hf_gpt2_train.py [NAME] - Hugging Face transformers training: GPT-2 small's shape (12 layers,
768 wide, 12 heads, 50257-token vocabulary) built from GPT2Config with random weights (seeded),
20 AdamW steps on random token batches of 4 x 256, fp32, attention through SDPA's math backend
(the fused backends' backward passes accumulate with atomics). About 3 GiB. Hashes the losses
and final weights. NAME (default hf_gpt2_train) names the RESULT line: run_compat.sh runs this
program a second time with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True as
hf_gpt2_train_expandable; both should give the same digest."""
import os
import sys

from compat import Digest, finish, torch_footprint_mib, torch_setup, tsum

name = sys.argv[1] if len(sys.argv) > 1 else "hf_gpt2_train"
torch = torch_setup()
from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: E402
from transformers import GPT2Config, GPT2LMHeadModel  # noqa: E402

cfg = GPT2Config(vocab_size=50257, n_positions=512, n_embd=768, n_layer=12, n_head=12,
                 use_cache=False)
with torch.device("cuda"):
    model = GPT2LMHeadModel(cfg)
model.train()
opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.01)
gen = torch.Generator(device="cuda").manual_seed(12)
losses = []
with sdpa_kernel([SDPBackend.MATH]):
    for step in range(20):
        ids = torch.randint(0, cfg.vocab_size, (4, 256), device="cuda", generator=gen)
        loss = model(input_ids=ids, labels=ids).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.detach())
torch.cuda.synchronize()
losses = torch.stack(losses)
d = Digest().add(losses, list(model.parameters()))
d.value(losses[0]).value(losses[-1]).value(tsum(model.transformer.wte.weight))
finish(name, d, torch_footprint_mib(),
       alloc_conf=os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "-"))
