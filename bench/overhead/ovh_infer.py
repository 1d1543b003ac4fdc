"""ovh_infer.py [SECONDS] - PyTorch inference for the overhead benchmark: torchvision ResNet-50
(weights=None), eval mode, batches of 128 x 3 x 224 x 224 in bf16 autocast; about 4 GiB.
Throughput in images/s."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ovh import seconds_arg, steady  # noqa: E402

import torch  # noqa: E402
import torchvision  # noqa: E402

torch.manual_seed(0)
model = torchvision.models.resnet50(weights=None).cuda().eval()
x = torch.randn(128, 3, 224, 224, device="cuda")


def step():
    with torch.inference_mode(), torch.autocast("cuda", dtype=torch.bfloat16):
        model(x)


steady("infer_resnet50", step, seconds_arg(), "images", x.shape[0])
