"""A small CNN trained on random data with mlprof: per-layer zones and FLOPs,
the data/forward/backward/optimizer breakdown, DataLoader workers.

    make python-test          # installs the package into build/python
    PYTHONPATH=build/python /usr/bin/python3 examples/train_cnn.py
    build/mlprof report train-run      # the same run from the command line
"""
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import mlprof
import mlprof.torch as mt


class SmallCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
            nn.MaxPool2d(2), nn.Conv2d(16, 32, 3, padding=1), nn.ReLU())
        self.head = nn.Sequential(nn.Flatten(), nn.Linear(32 * 16 * 16, 64),
                                  nn.ReLU(), nn.Linear(64, 10))

    def forward(self, x):
        return self.head(self.features(x))


def main():
    torch.manual_seed(0)
    ds = TensorDataset(torch.randn(512, 3, 32, 32),
                       torch.randint(0, 10, (512,)))
    loader = DataLoader(ds, batch_size=32, num_workers=2)
    model = SmallCNN()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with mlprof.Profiler(output="train-run/") as prof:
        prof.meta("model", "SmallCNN")
        with mt.profile_model(model, prof) as layers:
            res = mt.profile_training(model, loader, opt,
                                      nn.CrossEntropyLoss(), 12, prof=prof,
                                      model_profile=layers)
    print(mt.format_training(res))
    print("exported:", prof.export("train-run/", formats=["text", "trace"]))


if __name__ == "__main__":
    main()
