"""The views of a Profile: table, tree, repr, top, ops and roofline.

``build(profile, options)`` does the width-independent work once (fold, filter, sort,
values, cells; ``render.context``) and returns a function of the width that lays the view
out as lines (``render.layout``): the tree views in ``render.treeviews``, the flat ones in
``render.flatviews``. Views see only the Profile, fresh or loaded from JSON.
"""

from __future__ import annotations

from collections.abc import Callable

from layerscope.profile import Profile
from layerscope.render.context import Builder, ViewContext
from layerscope.render.flatviews import ops_view, top_view
from layerscope.render.layout import MIN_WIDTH, Line, too_narrow
from layerscope.render.options import ViewOptions
from layerscope.render.roofline import roofline_view
from layerscope.render.treeviews import repr_view, table_parts, table_view, tree_view

__all__ = ["BUILDERS", "MIN_WIDTH", "build", "table_parts"]

#: View name -> its builder: ``(ViewContext) -> (width -> lines)``; each name is also in
#: ``render.options.VIEWS``, which the option checks and the CLI's choices read.
BUILDERS: dict[str, Callable[[ViewContext], Callable[[int], list[Line]]]] = {
    "table": table_view,
    "tree": tree_view,
    "repr": repr_view,
    "top": top_view,
    "ops": ops_view,
    "roofline": roofline_view,
}


def build(profile: Profile, options: ViewOptions) -> Builder:
    """The view ``options.view`` of ``profile``, as a function of the width."""
    view = BUILDERS[options.view](ViewContext(profile, options))

    def lay_out(width: int) -> list[Line]:
        return too_narrow(width) or view(width)

    return lay_out
