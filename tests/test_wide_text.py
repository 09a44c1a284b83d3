"""Text in wide characters (CJK, emoji) in the console views: each character counts as
the columns a terminal gives it."""

from __future__ import annotations

import torch
from rich.cells import cell_len

import layerscope as ls
from layerscope.render.layout import slice_line, width_of


def test_wide_characters_count_as_the_columns_they_take() -> None:
    """A module name in CJK characters (two columns each) or with an emoji fits the
    width in every view, its row's numbers aligned with the others'."""

    class Named(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.d = torch.nn.ModuleDict(
                {"注意力层": torch.nn.Linear(8, 8), "emoji🙂": torch.nn.Identity()}
            )

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            out: torch.Tensor = self.d["emoji🙂"](self.d["注意力层"](x))
            return out

    prof = ls.profile(Named(), torch.randn(2, 8))
    for view in ("table", "tree", "top", "ops"):
        for width in (80, 60, 40):
            lines = prof.render(view=view, width=width).splitlines()
            assert max(cell_len(line) for line in lines) <= width, (view, width)
    rows = [line for line in prof.render(width=60).splitlines() if "%" in line]
    assert len({cell_len(line) for line in rows if "Linear" in line or "Identity" in line}) == 1
    # cut to a narrow column, a wide character is never split in two
    assert slice_line([("注意力层", "")], 1, 5) == [("意", "")]
    assert width_of([("注意", ""), ("ab", "")]) == 6
