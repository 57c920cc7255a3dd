"""The PyTorch CIFAR-10 tutorial's CNN ("Training a Classifier"), as a user has it: a plain
nn.Module. `cnncompare port` gives its Keras twin with the same weights and the proof:

    cnncompare port torch examples/tutorial_net.py:Net --out ported/net
    cnncompare compare --model ported/net/spec.py --init-weights ported/net/weights.npz

62,006 parameters: two 5x5 convolutions with max pooling, three dense layers.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 6, 5)
        self.pool = nn.MaxPool2d(2, 2)
        self.conv2 = nn.Conv2d(6, 16, 5)
        self.fc1 = nn.Linear(16 * 5 * 5, 120)
        self.fc2 = nn.Linear(120, 84)
        self.fc3 = nn.Linear(84, 10)

    def forward(self, x):
        x = self.pool(F.relu(self.conv1(x)))
        x = self.pool(F.relu(self.conv2(x)))
        x = torch.flatten(x, 1)  # flatten all dimensions except batch
        x = F.relu(self.fc1(x))
        x = F.relu(self.fc2(x))
        return self.fc3(x)
