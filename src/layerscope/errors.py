"""The exceptions layerscope raises: one root, a few precise subclasses."""

from __future__ import annotations


class LayerscopeError(Exception):
    """Root of every error layerscope raises on purpose."""


class InvalidInputError(LayerscopeError, ValueError):
    """The arguments given to layerscope are wrong (bad option, bad shape, bad file)."""


class ConfigError(InvalidInputError):
    """The display config (a YAML file or a mapping) is wrong.

    The one-line message names the file (when there is one), the dotted key and what is
    allowed there; ``source`` and ``key`` hold the same two for code ("" for the whole file).
    """

    def __init__(self, message: str, source: str | None = None, key: str = ""):
        super().__init__(message)
        self.source = source
        self.key = key


class ModelError(LayerscopeError):
    """The user's model raised while layerscope ran it.

    The original exception is chained as ``__cause__``; ``path`` names the innermost
    module that was running when it was raised ("" for the root).
    """

    def __init__(self, message: str, path: str | None = None, module_type: str | None = None):
        super().__init__(message)
        self.path = path
        self.module_type = module_type


class SchemaError(LayerscopeError, ValueError):
    """A saved profile cannot be read: unknown schema version or malformed content."""


class ProfileCheckError(LayerscopeError, AssertionError):
    """A profile violates an invariant (inclusive = self + sum of children)."""


class ExportError(LayerscopeError, OSError):
    """A profile cannot be written: an unknown format, an unwritable path, a value that
    cannot be serialised. The message names the path and the reason."""


class MissingDependencyError(LayerscopeError, ImportError):
    """An optional dependency is not installed; the message names the extra to install."""


class FlopFormulaError(InvalidInputError):
    """A user's FLOP formula failed: it raised, or returned something other than a
    ``Cost`` of non-negative integer ``macs`` and ``flops``.

    ``op`` names the aten op and ``formula`` the formula (its ``__qualname__``); the
    original exception, if any, is chained as ``__cause__``.
    """

    def __init__(self, message: str, op: str = "", formula: str = ""):
        super().__init__(message)
        self.op = op
        self.formula = formula


class ObserverError(LayerscopeError):
    """An observer (``layerscope.collect.observer.Observer``) raised in one of its
    callbacks: the fault is the measurement's, not the model's.

    ``observer`` names its class and ``callback`` the method (``on_op``, ``on_enter``,
    ...); the original exception is chained as ``__cause__``.
    """

    def __init__(self, message: str, observer: str = "", callback: str = ""):
        super().__init__(message)
        self.observer = observer
        self.callback = callback
