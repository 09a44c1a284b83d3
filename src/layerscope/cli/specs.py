"""Model specs: resolve the CLI's TARGET into a model (and the inputs that came with it).

Forms: ``examples:NAME``, ``package.module:attr``, ``path/to/file.py:attr``,
``transformers:NAME`` (a model type or a model class) and ``transformers:config.json``.
Every mistake is an ``InvalidInputError`` with a one-line message that names what was
wrong and what to do; the original exception is chained for ``--debug``.
"""

from __future__ import annotations

import difflib
import importlib
import importlib.util
import inspect
import itertools
import json
import os
import re
import sys
import traceback
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from types import ModuleType, TracebackType
from typing import Any

import torch
from torch import nn

from layerscope.cli.attrs import resolve
from layerscope.cli.common import close_names
from layerscope.collect.meta import to_meta
from layerscope.errors import InvalidInputError, MissingDependencyError

FORMS = (
    "examples:NAME, package.module:attr, path/to/file.py:attr, transformers:NAME "
    "or transformers:config.json"
)

#: Numbers the unique module names of loaded files (two ``models.py`` never clash).
_FILE_COUNTER = itertools.count()
_HERE = os.path.abspath(__file__)


@dataclass
class LoadedModel:
    """A model built from a TARGET spec, with the inputs the spec brought (if any)."""

    model: nn.Module
    args: tuple[Any, ...] | None
    kwargs: dict[str, Any] | None
    #: One line for humans, e.g. "transformers GPT2LMHeadModel (gpt2 config, n_layer=2)".
    description: str


def load_model(
    spec: str, model_args: Mapping[str, Any] | None = None, *, meta: bool = False
) -> LoadedModel:
    """Build the model that ``spec`` names.

    ``model_args`` are keyword arguments of a factory, or config fields of a
    ``transformers:`` spec. With ``meta=True`` the model (and any input tensors that came
    with it) is on the meta device: transformers models are constructed there directly,
    every other model is built and then copied with ``to_meta`` (tied weights stay tied).
    Nothing is seeded here; the caller seeds.
    """
    spec = spec.strip()
    kind, sep, rest = spec.partition(":")
    if not sep:
        raise InvalidInputError(
            f"TARGET {spec!r} has no colon; use {FORMS} (e.g. {_example_fix(spec)})"
        )
    args = dict(model_args or {})
    if kind == "transformers":
        if not rest:
            raise _empty(spec, "model type, class or config file after 'transformers:'")
        return _load_transformers(rest, spec, args, meta)
    if kind == "examples":
        if not rest:
            raise _empty(spec, "example name after 'examples:'")
        loaded = _load_example(rest, spec, args)
    else:
        loaded = _load_python(spec, args)
    if meta:
        loaded = LoadedModel(
            to_meta(loaded.model),
            _inputs_to_meta(loaded.args),
            _inputs_to_meta(loaded.kwargs),
            loaded.description,
        )
    return loaded


# ---------------------------------------------------------------- examples


def _load_example(name: str, spec: str, model_args: dict[str, Any]) -> LoadedModel:
    from layerscope.examples import get

    ex = get(name)
    if model_args:
        raise InvalidInputError(
            f"{spec} builds a fixed model and takes no --model-args; drop them (or use "
            "your own factory, file.py:attr)"
        )
    return LoadedModel(
        ex.build(), (ex.example_input(),), None, f"example {ex.name}: {ex.description}"
    )


# ---------------------------------------------------------------- python objects


def _load_python(spec: str, model_args: dict[str, Any]) -> LoadedModel:
    where, _, attr = spec.rpartition(":")
    if not where:
        raise _empty(spec, "module or file before the colon")
    if not attr:
        raise _empty(spec, "attribute after the colon")
    if not all(part.isidentifier() for part in attr.split(".")):
        raise InvalidInputError(
            f"TARGET {spec!r}: {attr!r} is not an attribute name; give attr or Outer.attr "
            f"after the colon (e.g. {where}:build)"
        )
    if where.endswith(".py") or "/" in where or os.sep in where:
        module = _import_file(where, spec)
        label = where
    else:
        module = _import_module(where)
        label = where
    obj = resolve(module, attr, label)
    user_dir = os.path.dirname(os.path.abspath(module.__file__)) if module.__file__ else None
    model, args, kwargs = _build(obj, spec, model_args, user_dir)
    call = ""
    if model_args:
        call = "(" + ", ".join(f"{k}={v!r}" for k, v in model_args.items()) + ")"
    return LoadedModel(model, args, kwargs, f"{type(model).__name__} from {spec}{call}")


def _import_file(path: str, spec: str) -> ModuleType:
    """Load ``path`` under a unique module name, its directory first on ``sys.path``."""
    if not os.path.isfile(path):
        what = "no such file" if not os.path.exists(path) else "not a file"
        raise InvalidInputError(
            f"{what}: {path} (TARGET {spec}); give the path of a Python file, relative to "
            "the current directory, or package.module:attr for an importable module"
        )
    full = os.path.abspath(path)
    directory = os.path.dirname(full)
    if directory not in sys.path:
        sys.path.insert(0, directory)
    stem = re.sub(r"\W", "_", os.path.splitext(os.path.basename(full))[0])
    name = f"_layerscope_model_{next(_FILE_COUNTER)}_{stem}"
    module_spec = importlib.util.spec_from_file_location(name, full)
    if module_spec is None or module_spec.loader is None:
        raise InvalidInputError(f"cannot load {path} as a Python module; give a .py file")
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[name] = module
    try:
        module_spec.loader.exec_module(module)
    except Exception as e:
        sys.modules.pop(name, None)
        raise _import_error(path, e) from e
    return module


def _import_module(name: str) -> ModuleType:
    """Import ``name`` as ``python -m`` would: the current directory is importable."""
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.insert(0, cwd)
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as e:
        missing = e.name or ""
        if missing and (name == missing or name.startswith(missing + ".")):
            top = missing.split(".")[0]
            raise InvalidInputError(
                f"cannot import {name}: no module named {missing!r}; run from the "
                f"directory that holds {top}/ (or install it), or give path/to/file.py:attr"
            ) from e
        raise _import_error(name, e) from e
    except Exception as e:
        raise _import_error(name, e) from e


def _import_error(what: str, e: Exception) -> InvalidInputError:
    """The one-line error for ``e`` raised while importing ``what``."""
    if isinstance(e, SyntaxError):
        where = f"{_short(e.filename)}, line {e.lineno}" if e.filename else "unknown place"
        return InvalidInputError(
            f"syntax error while importing {what}: {where}: {e.msg}; fix the file"
        )
    at = _location(e.__traceback__, None)
    if isinstance(e, ImportError):
        return InvalidInputError(
            f"importing {what} failed: {_first_line(e)}{at}; install the missing package "
            "or fix the import"
        )
    return InvalidInputError(
        f"importing {what} raised {type(e).__name__}: {_first_line(e)}{at}; fix the module"
    )


def _build(
    obj: Any, spec: str, model_args: dict[str, Any], user_dir: str | None
) -> tuple[nn.Module, tuple[Any, ...] | None, dict[str, Any] | None]:
    """The model (and inputs) that ``obj`` is or returns when called with ``model_args``."""
    if isinstance(obj, nn.Module):
        if model_args:
            raise InvalidInputError(
                f"{spec} is a module already ({type(obj).__name__}) and takes no "
                "--model-args; drop them or name a factory that takes them"
            )
        return obj, None, None
    if not callable(obj):
        raise InvalidInputError(
            f"{spec} is {_describe(obj)}, not an nn.Module or a callable that returns one; "
            "name a module, a module class or a factory function"
        )
    _check_signature(obj, spec, model_args)
    try:
        result = obj(**model_args)
    except Exception as e:
        raise InvalidInputError(
            f"the factory {spec} raised {type(e).__name__}: {_first_line(e)}"
            f"{_location(e.__traceback__, user_dir)}"
        ) from e
    if isinstance(result, nn.Module):
        return result, None, None
    if isinstance(result, (tuple, list)) and len(result) == 2 and isinstance(result[0], nn.Module):
        model, inputs = result
        if isinstance(inputs, torch.Tensor):
            return model, (inputs,), None
        if isinstance(inputs, (tuple, list)):
            return model, tuple(inputs), None
        if isinstance(inputs, Mapping) and all(isinstance(k, str) for k in inputs):
            return model, None, dict(inputs)
        raise InvalidInputError(
            f"the factory {spec} returned (module, {_describe(inputs)}); the inputs must be "
            "a tensor, a tuple or list (positional) or a dict with str keys (keyword inputs)"
        )
    raise InvalidInputError(
        f"the factory {spec} returned {_describe(result)}, not an nn.Module or a "
        "(module, inputs) pair; return the model"
    )


def _check_signature(obj: Any, spec: str, model_args: dict[str, Any]) -> None:
    """Refuse a call that cannot bind before making it, so that a TypeError raised inside
    the factory is reported as the factory's own."""
    try:
        sig = inspect.signature(obj)
    except (TypeError, ValueError):
        return
    try:
        sig.bind(**model_args)
        return
    except TypeError as e:
        error = e
    params = sig.parameters.values()
    if not any(p.kind is p.VAR_KEYWORD for p in params):
        takes = [p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
        unknown = [k for k in model_args if k not in takes]
        if unknown:
            close = difflib.get_close_matches(unknown[0], takes, n=1)
            hint = f"did you mean {close[0]!r}?" if close else f"it takes: {', '.join(takes)}"
            if not takes:
                hint = "it takes no arguments; drop --model-args"
            raise InvalidInputError(
                f"the factory {spec} has no argument {unknown[0]!r}; {hint}"
            ) from error
    required = [
        p
        for p in params
        if p.default is p.empty
        and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
        and p.name not in model_args
    ]
    if any(p.kind is p.POSITIONAL_ONLY for p in required):
        raise InvalidInputError(
            f"the factory {spec} needs positional-only arguments, which --model-args cannot "
            "pass; give them defaults or wrap the factory in a function"
        ) from error
    if required:
        names = ", ".join(p.name for p in required)
        example = json.dumps({p.name: _example_value(p.annotation) for p in required})
        raise InvalidInputError(
            f"the factory {spec} needs arguments ({names}); pass them with --model-args '{example}'"
        ) from error
    raise InvalidInputError(f"cannot call the factory {spec}: {_first_line(error)}") from error


def _example_value(annotation: Any) -> Any:
    """A plausible JSON value for a parameter annotated ``annotation``, for a hint."""
    name = annotation if isinstance(annotation, str) else getattr(annotation, "__name__", "")
    return {"float": 0.5, "bool": True, "str": "..."}.get(name, 4)


# ---------------------------------------------------------------- transformers


def _load_transformers(name: str, spec: str, model_args: dict[str, Any], meta: bool) -> LoadedModel:
    with _offline():
        tf = _import_transformers(spec)
        with _quiet(tf):
            return _build_transformers(tf, name, spec, model_args, meta)


def _build_transformers(
    tf: Any, name: str, spec: str, model_args: dict[str, Any], meta: bool
) -> LoadedModel:
    if name.endswith(".json") or "/" in name or os.sep in name:
        config, cls, label = _config_from_file(tf, name, model_args)
    else:
        config, cls, label = _config_from_name(tf, name, model_args)
    overrides = "".join(f", {k}={v!r}" for k, v in model_args.items())
    with torch.device("meta") if meta else nullcontext():
        try:
            if cls is None:
                model = tf.AutoModel.from_config(config, trust_remote_code=False)
            else:
                model = cls._from_config(config)
        except Exception as e:
            what = (
                f"transformers {cls.__name__}" if cls is not None else "the transformers base model"
            )
            raise InvalidInputError(
                f"building {what} ({label}) raised {type(e).__name__}: {_first_line(e)}; "
                f"{_build_hint(e, model_args)}"
            ) from e
    if not isinstance(model, nn.Module):  # pragma: no cover - transformers builds modules
        raise InvalidInputError(f"{spec} built a {type(model).__name__}, not an nn.Module")
    return LoadedModel(
        model, None, None, f"transformers {type(model).__name__} ({label}{overrides})"
    )


def _build_hint(error: Exception, model_args: Mapping[str, Any]) -> str:
    """What to do when transformers could not build a model: install what it imports, or
    change the config's fields."""
    if isinstance(error, ImportError):
        return "install the package it needs"
    if model_args:
        return "check --model-args"
    return "its default config does not build; set its fields with --model-args"


@contextmanager
def _quiet(tf: Any) -> Iterator[None]:
    """transformers' warnings about a config (small vocabularies, unused token ids) off
    while it is built: the command's own output is the profile and one-line errors."""
    logging = tf.logging
    old = logging.get_verbosity()
    logging.set_verbosity_error()
    try:
        yield
    finally:
        logging.set_verbosity(old)


@contextmanager
def _offline() -> Iterator[None]:
    """``HF_HUB_OFFLINE=1`` while transformers is imported and the model built: building
    from a config never needs the hub, and nothing may be downloaded if some path tried."""
    old = os.environ.get("HF_HUB_OFFLINE")
    os.environ["HF_HUB_OFFLINE"] = "1"
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("HF_HUB_OFFLINE", None)
        else:
            os.environ["HF_HUB_OFFLINE"] = old


def _import_transformers(spec: str) -> Any:
    try:
        import transformers
    except ImportError as e:
        raise MissingDependencyError(
            f"{spec} needs the transformers package: pip install transformers"
        ) from e
    return transformers


def _config_from_name(tf: Any, name: str, model_args: dict[str, Any]) -> tuple[Any, Any, str]:
    """(config, model class or None for AutoModel, label) for a model type or class name."""
    mapping = tf.CONFIG_MAPPING
    if name in mapping:
        config_class = mapping[name]
        _check_fields(config_class, model_args, name)
        return _make_config(config_class, model_args, name), None, f"{name} config"
    cls = _model_class(tf, name)
    if cls is None:
        close = close_names(name, _known_names(tf))
        hint = f"did you mean {', '.join(close)}?" if close else f"none is close: {LIST_HINT}"
        raise InvalidInputError(
            f"unknown transformers model {name!r}: neither a model type (gpt2, bert, t5, "
            f"llama, whisper, ...) nor a model class (GPT2LMHeadModel, ...); {hint}"
        )
    config_class = cls.config_class
    model_type = getattr(config_class, "model_type", "") or config_class.__name__
    _check_fields(config_class, model_args, model_type)
    return _make_config(config_class, model_args, model_type), cls, f"{model_type} config"


def _config_from_file(tf: Any, path: str, model_args: dict[str, Any]) -> tuple[Any, Any, str]:
    """(config, model class or None, label) for a config.json."""
    short = os.path.basename(path)
    if not os.path.isfile(path):
        raise InvalidInputError(
            f"no such config file: {path}; give the path of a transformers config.json, "
            "relative to the current directory"
        )
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except json.JSONDecodeError as e:
        raise InvalidInputError(
            f"{short} is not valid JSON: {e.msg} (line {e.lineno}, column {e.colno}); give "
            "a transformers config.json"
        ) from e
    except UnicodeDecodeError as e:
        raise InvalidInputError(
            f"{short} is not valid JSON (not UTF-8 text); give a transformers config.json"
        ) from e
    except OSError as e:
        raise InvalidInputError(f"cannot read {path}: {e.strerror or e}") from e
    if not isinstance(data, dict):
        raise InvalidInputError(
            f"{short} holds a JSON {type(data).__name__}, not an object; give a transformers "
            "config.json"
        )
    model_type = data.get("model_type")
    if not isinstance(model_type, str) or not model_type:
        raise InvalidInputError(f'{short} has no "model_type"; add one, e.g. "model_type": "llama"')
    mapping = tf.CONFIG_MAPPING
    if model_type not in mapping:
        close = close_names(model_type, list(mapping.keys()))
        hint = f"did you mean {', '.join(close)}?" if close else f"none is close: {LIST_HINT}"
        raise InvalidInputError(
            f'{short}: transformers knows no "model_type" {model_type!r}; {hint}'
        )
    config_class = mapping[model_type]
    _check_fields(config_class, model_args, model_type)
    fields = {k: v for k, v in data.items() if k != "model_type"}
    fields.update(model_args)
    config = _make_config(config_class, fields, model_type)
    cls = None
    architectures = data.get("architectures")
    if isinstance(architectures, list):
        cls = next(
            (c for a in architectures if isinstance(a, str) and (c := _model_class(tf, a))),
            None,
        )
    return config, cls, f"{short}, {model_type} config"


def _model_class(tf: Any, name: str) -> Any:
    """The transformers model class called ``name``, or None."""
    if not name.isidentifier():
        return None
    try:
        obj = getattr(tf, name)
    except Exception:  # a lazy import that fails: treat as absent
        return None
    if (
        isinstance(obj, type)
        and issubclass(obj, nn.Module)
        and isinstance(getattr(obj, "config_class", None), type)
        and hasattr(obj, "_from_config")
    ):
        return obj
    return None


#: How to list the model types transformers knows, for a name none is close to.
LIST_HINT = (
    'list the model types with python -c "import transformers; print(*transformers.CONFIG_MAPPING)"'
)


def _known_names(tf: Any) -> list[str]:
    """Model types and model class names, for suggestions."""
    classes = [n for n in dir(tf) if re.fullmatch(r"[A-Z]\w*(Model|For\w+)", n)]
    return [*tf.CONFIG_MAPPING.keys(), *classes]


def _check_fields(config_class: Any, model_args: Mapping[str, Any], model_type: str) -> None:
    """Refuse a config field the config does not have (configs accept any keyword)."""
    if not model_args:
        return
    default = config_class()
    params = {
        p.name
        for p in inspect.signature(config_class.__init__).parameters.values()
        if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
    }
    for key in model_args:
        if key in params or hasattr(default, key):
            continue
        known = sorted(
            {*default.to_dict(), *getattr(default, "attribute_map", {}), *params} - {"self"}
        )
        close = difflib.get_close_matches(key, known, n=3)
        hint = f"did you mean {', '.join(close)}?" if close else "check the field name"
        raise InvalidInputError(
            f"the {model_type} config ({config_class.__name__}) has no field {key!r}; {hint}"
        )


def _make_config(config_class: Any, fields: Mapping[str, Any], model_type: str) -> Any:
    try:
        return config_class(**fields)
    except Exception as e:
        raise InvalidInputError(
            f"the {model_type} config ({config_class.__name__}) refused the fields: "
            f"{type(e).__name__}: {_first_line(e)}; check --model-args"
        ) from e


# ---------------------------------------------------------------- small helpers


def _inputs_to_meta(value: Any) -> Any:
    """``value`` (None, a tuple or a dict of inputs) with every tensor moved to meta."""
    if isinstance(value, torch.Tensor):
        return value.to("meta")
    if isinstance(value, tuple):
        return tuple(_inputs_to_meta(v) for v in value)
    if isinstance(value, list):
        return [_inputs_to_meta(v) for v in value]
    if isinstance(value, dict):
        return {k: _inputs_to_meta(v) for k, v in value.items()}
    return value


def _empty(spec: str, what: str) -> InvalidInputError:
    return InvalidInputError(f"TARGET {spec!r} has no {what}; use {FORMS}")


def _example_fix(spec: str) -> str:
    if spec.endswith(".py") or "." in spec:
        return f"{spec}:build"
    return "examples:tiny_gpt"


def _first_line(e: BaseException) -> str:
    """The first non-empty line of the message of ``e`` (messages may span lines)."""
    lines = [line.strip() for line in str(e).splitlines() if line.strip()]
    return lines[0] if lines else "(no message)"


def _describe(value: Any) -> str:
    if isinstance(value, (tuple, list)):
        return f"a {type(value).__name__} of {len(value)}"
    if value is None:
        return "None"
    name = type(value).__name__
    return f"{'an' if name[:1].lower() in 'aeiou' else 'a'} {name}"


def _short(path: str) -> str:
    """``path`` relative to the current directory when inside it, else its file name."""
    try:
        rel = os.path.relpath(path)
    except ValueError:  # another drive on Windows
        return os.path.basename(path)
    return os.path.basename(path) if rel.startswith("..") else rel


def _location(tb: TracebackType | None, user_dir: str | None) -> str:
    """`` (file.py, line N)`` of the innermost frame in ``user_dir`` (the user's module and
    its siblings), else of the innermost frame outside importlib; "" when none."""
    frames = [
        f
        for f in traceback.extract_tb(tb)
        if not f.filename.startswith("<")
        and os.path.abspath(f.filename) != _HERE
        and os.sep + "importlib" + os.sep not in f.filename
    ]
    if user_dir is not None:
        mine = [f for f in frames if os.path.dirname(os.path.abspath(f.filename)) == user_dir]
        frames = mine or frames
    if not frames:
        return ""
    frame = frames[-1]
    return f" ({_short(frame.filename)}, line {frame.lineno})"


__all__ = ["FORMS", "LoadedModel", "load_model"]
