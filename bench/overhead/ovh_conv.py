"""ovh_conv.py [SECONDS] - a cuDNN convolution net trained for the overhead benchmark: eight
Conv2d + BatchNorm + ReLU layers (64-256 channels, two strided) and a 1x1 head, SGD with
momentum, fp32, batches of 64 x 3 x 224 x 224; over 10 GiB of activations. Throughput in
images/s."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ovh import seconds_arg, steady  # noqa: E402

import torch  # noqa: E402

nn = torch.nn
torch.manual_seed(0)


def cbr(i, o, stride=1):
    return [nn.Conv2d(i, o, 3, stride=stride, padding=1, bias=False), nn.BatchNorm2d(o), nn.ReLU()]


model = nn.Sequential(*cbr(3, 64), *cbr(64, 64), *cbr(64, 128, 2), *cbr(128, 128),
                      *cbr(128, 256, 2), *cbr(256, 256), *cbr(256, 256), *cbr(256, 256),
                      nn.Conv2d(256, 10, 1)).cuda()
opt = torch.optim.SGD(model.parameters(), lr=1e-2, momentum=0.9)
x = torch.randn(64, 3, 224, 224, device="cuda")
t = torch.randint(0, 10, (64, 56, 56), device="cuda")


def step():
    loss = nn.functional.cross_entropy(model(x), t)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()


steady("conv_train", step, seconds_arg(), "images", x.shape[0])
