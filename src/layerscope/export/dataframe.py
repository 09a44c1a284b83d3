"""A pandas DataFrame of the profile: the CSV's columns and rows (``export.csv``)."""

from __future__ import annotations

from typing import Any

from layerscope.errors import MissingDependencyError
from layerscope.export.csv import columns, rows
from layerscope.profile import Profile

__all__ = ["to_dataframe"]


def to_dataframe(profile: Profile) -> Any:
    """One row per node in pre-order, numbers in base units (``pandas.DataFrame``)."""
    try:
        import pandas as pd
    except ImportError as e:
        raise MissingDependencyError(
            "Profile.to_dataframe needs pandas: pip install 'layerscope[pandas]'"
        ) from e
    return pd.DataFrame(rows(profile), columns=columns(profile))
