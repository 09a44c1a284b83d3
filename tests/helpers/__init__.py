"""Test helpers, by topic: ``models``, ``snapshots``, ``records``, ``distributed``,
``browser``."""
