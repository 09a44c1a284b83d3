import not_an_installed_package  # noqa: F401
from torch import nn

model = nn.Linear(4, 4)
