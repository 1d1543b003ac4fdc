"""ovh_train.py [SECONDS] - PyTorch training for the overhead benchmark: Hugging Face GPT-2
small's shape (12 layers, 768 wide, random weights from GPT2Config, no download), AdamW, fp32
with TF32 matmuls, batches of 8 x 512 tokens; about 6 GiB. Throughput in tokens/s."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ovh import seconds_arg, steady  # noqa: E402

import torch  # noqa: E402
from transformers import GPT2Config, GPT2LMHeadModel  # noqa: E402

torch.manual_seed(0)
torch.backends.cuda.matmul.allow_tf32 = True
cfg = GPT2Config(vocab_size=50257, n_positions=512, n_embd=768, n_layer=12, n_head=12,
                 use_cache=False)
with torch.device("cuda"):
    model = GPT2LMHeadModel(cfg)
model.train()
opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
B, T = 8, 512
ids = torch.randint(0, cfg.vocab_size, (B, T), device="cuda")


def step():
    loss = model(input_ids=ids, labels=ids).loss
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()


steady("train_gpt2", step, seconds_arg(), "tokens", B * T)
