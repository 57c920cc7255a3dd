"""PyTorch networks written for the port tests (tests/test_port.py): two that port (a residual
CNN, a depthwise CNN; the PyTorch tutorial's CNN is examples/tutorial_net.py) and some the spec
cannot express."""

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


class WithSigmoid(nn.Module):
    """A layer the spec has no kind for."""
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)
        self.gate = nn.Sigmoid()
        self.fc = nn.Linear(4 * 30 * 30, 10)

    def forward(self, x):
        return self.fc(torch.flatten(self.gate(self.conv(x)), 1))


class WithConcat(nn.Module):
    """A functional op in forward the spec cannot express."""
    def __init__(self):
        super().__init__()
        self.a = nn.Conv2d(3, 4, 3, padding=1)
        self.b = nn.Conv2d(3, 4, 3, padding=1)
        self.fc = nn.Linear(8, 10)

    def forward(self, x):
        x = torch.cat([self.a(x), self.b(x)], dim=1)
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


class WithDropout(nn.Module):
    """Dropout in training mode."""
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)
        self.drop = nn.Dropout(0.5)
        self.fc = nn.Linear(4, 10)

    def forward(self, x):
        return self.fc(self.drop(torch.flatten(F.adaptive_max_pool2d(self.conv(x), 1), 1)))


class WithOverlappingPool(nn.Module):
    """A pool the spec's windows cannot express (3x3 at stride 2, padded)."""
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)
        self.pool = nn.MaxPool2d(3, 2, 1)
        self.fc = nn.Linear(4 * 15 * 15, 10)

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
