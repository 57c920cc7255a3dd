"""PyTorch networks written for the port tests (tests/test_port.py,
tests/test_port_torchvision.py): some that port (a residual CNN, a depthwise CNN, a
ConvNeXt-like block with a gate; the PyTorch tutorial's CNN is examples/tutorial_net.py) and
some the spec cannot express."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, cin, cout, stride=1):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.shortcut = nn.Sequential()
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                          nn.BatchNorm2d(cout))
        self.relu = nn.ReLU(inplace=True)

    def forward(self, x):
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        out += self.shortcut(x)
        return self.relu(out)


class ResidualNet(nn.Module):
    def __init__(self, width=8, classes=10):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, width, 3, padding=1, bias=False),
                                  nn.BatchNorm2d(width), nn.ReLU())
        self.layer1 = Block(width, width)
        self.layer2 = Block(width, 2 * width, stride=2)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(2 * width, classes)

    def forward(self, x):
        x = self.layer2(self.layer1(self.stem(x)))
        return self.fc(self.pool(x).view(x.size(0), -1))


class Depthwise(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 16, 3, 2, 1, bias=False), nn.BatchNorm2d(16), nn.ReLU6(inplace=True),
            nn.Conv2d(16, 16, 3, 1, 1, groups=16, bias=False), nn.BatchNorm2d(16), nn.ReLU6(),
            nn.Conv2d(16, 32, 1, bias=False), nn.BatchNorm2d(32), nn.ReLU6(),
            nn.Conv2d(32, 32, 3, 2, 1, groups=4, bias=False), nn.BatchNorm2d(32), nn.ReLU6(),
            nn.Dropout(0.0))
        self.classifier = nn.Linear(32, 10)

    def forward(self, x):
        x = F.adaptive_avg_pool2d(self.features(x), 1)
        return self.classifier(torch.flatten(x, 1))


class WithPReLU(nn.Module):
    """A layer the spec has no kind for."""
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)
        self.gate = nn.PReLU()
        self.fc = nn.Linear(4 * 30 * 30, 10)

    def forward(self, x):
        return self.fc(torch.flatten(self.gate(self.conv(x)), 1))


class WithChunk(nn.Module):
    """A functional op in forward the spec cannot express (splitting the channels)."""
    def __init__(self):
        super().__init__()
        self.a = nn.Conv2d(3, 8, 3, padding=1)
        self.fc = nn.Linear(4, 10)

    def forward(self, x):
        left, right = self.a(x).chunk(2, dim=1)
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(left + right, 1), 1))


class WithFunctionalDropout(nn.Module):
    """Dropout as a function: the proof cannot switch it off."""
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)
        self.fc = nn.Linear(4, 10)

    def forward(self, x):
        x = torch.flatten(F.adaptive_max_pool2d(self.conv(x), 1), 1)
        return self.fc(F.dropout(x, 0.5, self.training))


class WithDilatedPool(nn.Module):
    """A pool the spec's windows cannot express (dilated)."""
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)
        self.pool = nn.MaxPool2d(3, 2, 1, dilation=2)
        self.fc = nn.Linear(4 * 14 * 14, 10)

    def forward(self, x):
        return self.fc(torch.flatten(self.pool(self.conv(x)), 1))


class WithFullFlatten(nn.Module):
    """x.view(-1): flattens the batch too."""
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)
        self.fc = nn.Linear(4 * 30 * 30, 10)

    def forward(self, x):
        return self.fc(self.conv(x).view(-1))


class LayerScaleBlock(nn.Module):
    """ConvNeXt's block: a depthwise conv, channels-last LayerNorm, Linear, GELU, Linear, a
    layer scale read as a parameter, stochastic depth as a per-sample dropout, the residual."""
    def __init__(self, dim):
        super().__init__()
        self.dwconv = nn.Conv2d(dim, dim, 7, padding=3, groups=dim)
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.up, self.act, self.down = nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim)
        self.layer_scale = nn.Parameter(torch.rand(dim, 1, 1) + 0.5)
        self.drop = nn.Dropout(0.3)

    def forward(self, x):
        y = self.dwconv(x).permute(0, 2, 3, 1)
        y = self.down(self.act(self.up(self.norm(y)))).permute(0, 3, 1, 2)
        return x + self.drop(self.layer_scale * y)


class GatedNet(nn.Module):
    """A squeeze-and-excitation gate (x * sigmoid(...)), hard-swish, a concat, a ceil-mode
    pool and a mean over the map, around a LayerScaleBlock."""
    def __init__(self, width=8):
        super().__init__()
        self.stem = nn.Conv2d(3, width, 3, padding=1)
        self.block = LayerScaleBlock(width)
        self.squeeze = nn.Conv2d(width, 4, 1)
        self.excite = nn.Conv2d(4, width, 1)
        self.side = nn.Conv2d(width, width, 1)
        self.pool = nn.MaxPool2d(3, 2, ceil_mode=True)
        self.fc = nn.Linear(2 * width, 10)

    def forward(self, x):
        x = F.hardswish(self.block(self.stem(x)))
        gate = torch.sigmoid(self.excite(F.silu(self.squeeze(x.mean((2, 3), keepdim=True)))))
        x = self.pool(torch.cat([x * gate, F.leaky_relu(self.side(x), 0.2)], dim=1))
        return self.fc(x.mean([2, 3]))


def gated_net():
    """The network from a function (FILE.py:NAME naming a function)."""
    torch.manual_seed(4321)
    return GatedNet()
