"""A bare PyTorch training loop of the lenet recipe against `cnncompare run --framework torch`.

The baseline is what a PyTorch user writes: the tutorial's Net, optim.SGD, cross-entropy,
a shuffling DataLoader (2 workers) whose collate function normalises each batch, batch 32,
2 epochs; no augmentation, as in the recipe; on the GPU when PyTorch sees one (pinned
batches, non-blocking copies), as the tool. Its train time is the wall time of the two
epochs' loops, synchronised with the device (no evaluation).

    python benchmarks/torch_loop_vs_tool.py --data-dir /tmp/cifar10-jpeg [--repeats 3]
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from common import arguments, arrays, compare  # noqa: E402


class Normalise:
    """Collate: uint8 NHWC samples -> normalised float NCHW batch."""

    def __init__(self, mean, std):
        import torch
        self.mean = torch.tensor(mean * 255.0).view(1, 3, 1, 1)
        self.std = torch.tensor(std * 255.0).view(1, 3, 1, 1)

    def __call__(self, samples):
        import torch
        images = torch.stack([s[0] for s in samples]).permute(0, 3, 1, 2).float()
        labels = torch.stack([s[1] for s in samples])
        return (images - self.mean) / self.std, labels


def bare(args) -> dict:
    import torch
    from torch import nn
    torch.manual_seed(0)
    train_x, train_y, test_x, test_y, mean, std = arrays(args)

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
            x = self.pool(torch.relu(self.conv1(x)))
            x = self.pool(torch.relu(self.conv2(x)))
            x = torch.flatten(x, 1)
            x = torch.relu(self.fc1(x))
            x = torch.relu(self.fc2(x))
            return self.fc3(x)

    dataset = torch.utils.data.TensorDataset(torch.from_numpy(train_x), torch.from_numpy(train_y))
    gpu = torch.cuda.is_available()
    device = torch.device("cuda" if gpu else "cpu")
    loader = torch.utils.data.DataLoader(dataset, batch_size=32, shuffle=True, drop_last=True,
                                         num_workers=2, persistent_workers=True, prefetch_factor=4,
                                         pin_memory=gpu, collate_fn=Normalise(mean, std))
    net = Net().to(device)
    optimizer = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    criterion = nn.CrossEntropyLoss()
    start = time.perf_counter()
    for _ in range(2):
        for images, labels in loader:
            images = images.to(device, non_blocking=True)
            labels = labels.to(device, non_blocking=True)
            optimizer.zero_grad()
            loss = criterion(net(images), labels)
            loss.backward()
            optimizer.step()
    if gpu:
        torch.cuda.synchronize()
    train_time = time.perf_counter() - start
    net.eval()
    with torch.no_grad():
        x, y = Normalise(mean, std)([(torch.from_numpy(a), torch.tensor(b))
                                     for a, b in zip(test_x, test_y)])
        accuracy = (net(x.to(device)).argmax(1).cpu() == y).float().mean().item()
    return {"train_time_s": train_time, "test_accuracy": accuracy}


if __name__ == "__main__":
    args = arguments(__doc__.splitlines()[0])
    if args.bare:
        print(json.dumps(bare(args)))
    else:
        compare("torch", __file__, args, "bare PyTorch loop")
