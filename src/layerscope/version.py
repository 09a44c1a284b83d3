"""The package version (also in pyproject.toml; a test checks that they agree)."""

__version__ = "0.1.0"
