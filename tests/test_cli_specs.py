"""``load_model``: every TARGET model spec the CLI accepts and every one-line error it gives."""

from __future__ import annotations

import os
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from layerscope.cli.specs import LoadedModel, load_model
from layerscope.errors import InvalidInputError, MissingDependencyError


@pytest.fixture(autouse=True)
def clean_imports(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    """``sys.path`` restored and the modules loaded from tmp_path forgotten after each test."""
    monkeypatch.setattr(sys, "path", list(sys.path))
    before = set(sys.modules)
    yield
    for name in set(sys.modules) - before:
        file = getattr(sys.modules[name], "__file__", None) or ""
        if name.startswith("_layerscope_model_") or file.startswith(str(tmp_path)):
            del sys.modules[name]


def write(path: Path, source: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(source).lstrip("\n"))
    return path


def n_params(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def error(spec: str, model_args: dict[str, Any] | None = None, **kw: Any) -> InvalidInputError:
    """The InvalidInputError ``load_model`` raises, checked to be one line."""
    with pytest.raises(InvalidInputError) as info:
        load_model(spec, model_args, **kw)
    assert "\n" not in str(info.value)
    return info.value


# ---------------------------------------------------------------- examples


def test_example_brings_its_input() -> None:
    loaded = load_model("examples:tiny_gpt")
    assert type(loaded.model).__name__ == "TinyGPT"
    assert loaded.args is not None and loaded.kwargs is None
    (ids,) = loaded.args
    assert ids.shape == (2, 16) and ids.dtype == torch.long
    assert loaded.description.startswith("example tiny_gpt: ")


def test_example_on_meta_keeps_the_tied_head_and_moves_the_input() -> None:
    loaded = load_model("examples:tiny_gpt", meta=True)
    model: Any = loaded.model
    assert model.lm_head.weight is model.tok_emb.weight
    assert {p.device.type for p in model.parameters()} == {"meta"}
    assert loaded.args is not None and loaded.args[0].device.type == "meta"


def test_example_errors() -> None:
    assert "known examples: lstm_tagger, shared_mlp, tiny_gpt, tiny_resnet" in str(
        error("examples:nope")
    )
    assert "takes no --model-args" in str(error("examples:tiny_gpt", {"width": 4}))
    assert load_model("examples:shared_mlp", {}).model is not None  # {} is no arguments


# ---------------------------------------------------------------- files and modules

MODELS = """
    import torch
    from sibling_blocks import block  # a sibling module next to this file
    from torch import nn

    WIDTH = 3


    class Net(nn.Module):
        def __init__(self, width: int = 8) -> None:
            super().__init__()
            self.body = block(4, width)
            self.head = nn.Linear(width, 2)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.head(self.body(x))


    def build(width: int = 8) -> nn.Module:
        return Net(width)


    def needs(n: int, scale: float) -> nn.Module:
        return Net(n)


    def boom() -> nn.Module:
        raise ValueError("boom")


    def deep() -> nn.Module:
        return nn.Linear(4, 4)(torch.ones(3))


    def with_tensor():
        return Net(), torch.ones(2, 4)


    def with_tuple():
        return Net(), (torch.ones(2, 4),)


    def with_list():
        return Net(), [torch.ones(2, 4)]


    def with_dict():
        return Net(), {"x": torch.ones(2, 4)}


    def bad_inputs():
        return Net(), 42


    def not_a_module():
        return 42


    def triple():
        return Net(), torch.ones(1), torch.ones(1)


    class Outer:
        @staticmethod
        def build() -> nn.Module:
            return nn.Linear(2, 3)


    instance = nn.Linear(4, 4)
"""

SIBLING = """
    from torch import nn


    def block(n_in: int, n_out: int) -> nn.Module:
        return nn.Sequential(nn.Linear(n_in, n_out), nn.ReLU())
"""


@pytest.fixture
def models(tmp_path: Path) -> Path:
    write(tmp_path / "sibling_blocks.py", SIBLING)
    return write(tmp_path / "models.py", MODELS)


def test_file_factory_with_a_sibling_import(models: Path) -> None:
    loaded = load_model(f"{models}:build", {"width": 16})
    # body Linear(4, 16): 4*16 + 16 = 80; head Linear(16, 2): 16*2 + 2 = 34
    assert n_params(loaded.model) == 114
    assert loaded.args is None and loaded.kwargs is None
    assert loaded.description == f"Net from {models}:build(width=16)"
    assert str(models.parent) == sys.path[0]


def test_file_class_instance_and_dotted_attr(models: Path) -> None:
    assert n_params(load_model(f"{models}:Net").model) == 58  # 4*8+8 + 8*2+2 = 40 + 18
    assert n_params(load_model(f"{models}:Net", {"width": 2}).model) == 16  # 10 + 6
    assert n_params(load_model(f"{models}:instance").model) == 20  # 4*4 + 4
    assert n_params(load_model(f"{models}:Outer.build").model) == 9  # 2*3 + 3


def test_two_files_of_the_same_name_are_two_modules(tmp_path: Path, models: Path) -> None:
    other = write(tmp_path / "other" / "models.py", "from torch import nn\nm = nn.Linear(1, 1)\n")
    assert n_params(load_model(f"{other}:m").model) == 2
    assert n_params(load_model(f"{models}:instance").model) == 20


@pytest.mark.parametrize(
    ("attr", "args", "kwargs"),
    [
        ("with_tensor", 1, None),
        ("with_tuple", 1, None),
        ("with_list", 1, None),
        ("with_dict", None, ["x"]),
    ],
)
def test_factory_inputs(
    models: Path, attr: str, args: int | None, kwargs: list[str] | None
) -> None:
    loaded = load_model(f"{models}:{attr}")
    assert isinstance(loaded.model, nn.Module)
    assert (None if loaded.args is None else len(loaded.args)) == args
    assert (None if loaded.kwargs is None else list(loaded.kwargs)) == kwargs
    if loaded.args is not None:
        assert isinstance(loaded.args, tuple)
        assert loaded.model(*loaded.args).shape == (2, 2)


def test_meta_moves_the_model_and_its_inputs(models: Path) -> None:
    loaded = load_model(f"{models}:with_dict", meta=True)
    assert {p.device.type for p in loaded.model.parameters()} == {"meta"}
    assert loaded.kwargs is not None and loaded.kwargs["x"].device.type == "meta"


def test_package_module_from_the_current_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write(tmp_path / "tgtpkg" / "__init__.py", "")
    write(
        tmp_path / "tgtpkg" / "models.py",
        """
        from torch import nn


        def tiny() -> nn.Module:
            return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
        """,
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    loaded = load_model("tgtpkg.models:tiny")
    assert n_params(loaded.model) == 58  # 4*8 + 8 + 8*2 + 2 = 40 + 18
    assert loaded.description == "Sequential from tgtpkg.models:tiny"
    assert sys.path[0] == os.getcwd()


# ---------------------------------------------------------------- their errors


@pytest.mark.parametrize(
    ("spec", "says"),
    [
        ("models.py", "TARGET 'models.py' has no colon"),
        ("models.py:", "has no attribute after the colon"),
        (":build", "has no module or file before the colon"),
        ("examples:", "has no example name"),
        ("transformers:", "has no model type, class or config file"),
        ("models.py:a..b", "'a..b' is not an attribute name"),
    ],
)
def test_bad_forms(spec: str, says: str) -> None:
    message = str(error(spec))
    assert says in message
    assert "package.module:attr" in message or "Outer.attr" in message


def test_missing_file(tmp_path: Path) -> None:
    message = str(error(f"{tmp_path}/nothere.py:build"))
    assert message.startswith(f"no such file: {tmp_path}/nothere.py")


def test_syntax_error_names_file_and_line(tmp_path: Path) -> None:
    broken = write(tmp_path / "broken.py", "import torch\n\ndef build(:\n    pass\n")
    before = set(sys.modules)
    e = error(f"{broken}:build")
    assert "broken.py, line 3: " in str(e)
    assert str(e).startswith(f"syntax error while importing {broken}")
    assert isinstance(e.__cause__, SyntaxError)
    assert not [name for name in set(sys.modules) - before if name.endswith("_broken")]


def test_import_error_in_a_file_names_the_line(tmp_path: Path) -> None:
    bad = write(tmp_path / "bad.py", "from torch import nn\nimport not_installed_xyz\n")
    e = error(f"{bad}:model")
    assert f"importing {bad} failed: No module named 'not_installed_xyz' (bad.py, line 2)" in str(e)
    assert isinstance(e.__cause__, ModuleNotFoundError)


def test_import_error_inside_a_package_module(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write(tmp_path / "badpkg" / "__init__.py", "")
    write(tmp_path / "badpkg" / "mod.py", "import os\n\nfrom os import not_there_xyz\n")
    monkeypatch.chdir(tmp_path)
    message = str(error("badpkg.mod:build"))
    assert message.startswith("importing badpkg.mod failed: cannot import name 'not_there_xyz'")
    assert "(badpkg/mod.py, line 3)" in message  # relative to the current directory


def test_module_that_does_not_exist() -> None:
    message = str(error("no_such_pkg_xyz.models:build"))
    assert message.startswith(
        "cannot import no_such_pkg_xyz.models: no module named 'no_such_pkg_xyz'; run from "
        "the directory that holds no_such_pkg_xyz/"
    )


def test_missing_attribute_suggests_close_names(models: Path) -> None:
    assert str(error(f"{models}:bild")) == f"{models} has no attribute 'bild'; did you mean build?"
    assert str(error(f"{models}:Outer.bild")).startswith(
        f"{models}:Outer has no attribute 'bild'; did you mean build"
    )
    # no close name: the names that would work, the first 12 sorted
    assert str(error(f"{models}:zzzzz")) == (
        f"{models} has no attribute 'zzzzz'; it defines Net, bad_inputs, boom, build, deep, "
        "instance, needs, not_a_module, triple, with_dict, with_list, with_tensor, ..."
    )
    assert str(error(f"{models}:Outer.zzzzz")).endswith(
        "Outer has no attribute 'zzzzz'; check the name"
    )


def test_factory_that_needs_arguments(models: Path) -> None:
    e = error(f"{models}:needs")
    assert str(e) == (
        f"the factory {models}:needs needs arguments (n, scale); pass them with "
        """--model-args '{"n": 4, "scale": 0.5}'"""
    )
    assert isinstance(e.__cause__, TypeError)
    assert "needs arguments (scale)" in str(error(f"{models}:needs", {"n": 4}))
    assert str(error(f"{models}:build", {"widht": 4})) == (
        f"the factory {models}:build has no argument 'widht'; did you mean 'width'?"
    )


def test_factory_that_raises_names_the_users_line(models: Path) -> None:
    e = error(f"{models}:boom")
    # line 27 of the dedented MODELS is `raise ValueError("boom")`
    assert str(e) == f"the factory {models}:boom raised ValueError: boom (models.py, line 27)"
    assert isinstance(e.__cause__, ValueError)
    # raised deep inside torch: the innermost frame in the user's file is named
    message = str(error(f"{models}:deep"))
    assert message.startswith(f"the factory {models}:deep raised RuntimeError: ")
    assert message.endswith("(models.py, line 31)")


@pytest.mark.parametrize(
    ("attr", "says"),
    [
        ("not_a_module", "returned an int, not an nn.Module or a (module, inputs) pair"),
        ("triple", "returned a tuple of 3, not an nn.Module"),
        ("bad_inputs", "returned (module, an int); the inputs must be a tensor"),
        ("WIDTH", "WIDTH is an int, not an nn.Module or a callable"),
    ],
)
def test_factory_results_that_are_not_models(models: Path, attr: str, says: str) -> None:
    assert says in str(error(f"{models}:{attr}"))


def test_a_module_takes_no_model_args(models: Path) -> None:
    assert "is a module already (Linear) and takes no --model-args" in str(
        error(f"{models}:instance", {"width": 4})
    )


# ---------------------------------------------------------------- transformers

TINY_GPT2 = {"n_layer": 2, "n_embd": 64, "n_head": 4, "vocab_size": 100, "n_positions": 32}

# wte 100*64 = 6400, wpe 32*64 = 2048; per layer: ln_1 2*64 = 128, c_attn 64*192 + 192 =
# 12480, attn c_proj 64*64 + 64 = 4160, ln_2 128, c_fc 64*256 + 256 = 16640, mlp c_proj
# 256*64 + 64 = 16448: 49984; two layers 99968; ln_f 128.
# 6400 + 2048 + 99968 + 128 = 108544
GPT2_PARAMS = 108544

TINY_LLAMA = {
    "model_type": "llama",
    "architectures": ["LlamaForCausalLM"],
    "vocab_size": 256,
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 64,
    "tie_word_embeddings": False,
}
# head_dim 64/4 = 16; embed 256*64 = 16384; per layer: q 64*64 = 4096, k and v 64*(2*16)
# = 2048 each, o 4096 (12288), gate/up/down 3*64*128 = 24576, two RMSNorms 128: 36992;
# two layers 73984; final norm 64; lm_head 256*64 = 16384.
LLAMA_BASE = 16384 + 2 * 36992 + 64  # = 90432
LLAMA_LM = LLAMA_BASE + 16384  # = 106816


@pytest.fixture
def transformers() -> Any:
    return pytest.importorskip("transformers")


def test_model_type_builds_the_base_model(transformers: Any) -> None:
    hub = os.environ.get("HF_HUB_OFFLINE")
    loaded = load_model("transformers:gpt2", TINY_GPT2)
    assert type(loaded.model).__name__ == "GPT2Model"
    assert n_params(loaded.model) == GPT2_PARAMS
    assert loaded.args is None and loaded.kwargs is None
    assert loaded.description == (
        "transformers GPT2Model (gpt2 config, n_layer=2, n_embd=64, n_head=4, "
        "vocab_size=100, n_positions=32)"
    )
    assert os.environ.get("HF_HUB_OFFLINE") == hub  # restored


def test_class_name_keeps_the_lm_head_tied(transformers: Any) -> None:
    loaded = load_model("transformers:GPT2LMHeadModel", TINY_GPT2)
    model: Any = loaded.model
    assert type(model).__name__ == "GPT2LMHeadModel"
    assert model.lm_head.weight is model.transformer.wte.weight
    assert model.lm_head.weight.data_ptr() == model.transformer.wte.weight.data_ptr()
    assert n_params(model) == GPT2_PARAMS  # the head adds nothing: it is wte
    assert loaded.description.startswith("transformers GPT2LMHeadModel (gpt2 config, n_layer=2")
    meta: Any = load_model("transformers:GPT2LMHeadModel", TINY_GPT2, meta=True).model
    assert meta.lm_head.weight is meta.transformer.wte.weight
    assert meta.lm_head.weight.device.type == "meta"


def test_config_json(transformers: Any, tmp_path: Path) -> None:
    import json

    path = tmp_path / "tiny_llama.json"
    path.write_text(json.dumps(TINY_LLAMA))
    loaded = load_model(f"transformers:{path}")
    assert type(loaded.model).__name__ == "LlamaForCausalLM"
    assert n_params(loaded.model) == LLAMA_LM == 106816
    assert loaded.description == "transformers LlamaForCausalLM (tiny_llama.json, llama config)"
    one = load_model(f"transformers:{path}", {"num_hidden_layers": 1}).model
    assert n_params(one) == LLAMA_LM - 36992  # one layer fewer: 69824
    # no known architecture: the base model
    path.write_text(json.dumps({**TINY_LLAMA, "architectures": ["NoSuchModelXyz"]}))
    assert type(load_model(f"transformers:{path}").model).__name__ == "LlamaModel"
    assert n_params(load_model(f"transformers:{path}").model) == LLAMA_BASE == 90432


def test_default_llama_on_meta_allocates_nothing(transformers: Any) -> None:
    # Llama-7B: vocab 32000, hidden 4096, 32 layers, MLP 11008, 32 kv heads.
    # per layer: attention 4*4096*4096 = 67,108,864, MLP 3*4096*11008 = 135,266,304,
    # two norms 8192: 202,383,360; 32 layers 6,476,267,520; embed 32000*4096 = 131,072,000;
    # final norm 4096: base 6,607,343,616; + lm_head 131,072,000 = 6,738,415,616
    base = load_model("transformers:llama", meta=True).model
    assert type(base).__name__ == "LlamaModel"
    assert all(p.device.type == "meta" for p in base.parameters())
    assert n_params(base) == 6_607_343_616
    lm = load_model("transformers:LlamaForCausalLM", meta=True).model
    assert all(p.device.type == "meta" for p in lm.parameters())
    assert n_params(lm) == 6_738_415_616


def test_unknown_config_field(transformers: Any) -> None:
    e = error("transformers:gpt2", {"n_layers": 2})
    assert str(e) == (
        "the gpt2 config (GPT2Config) has no field 'n_layers'; did you mean n_layer, "
        "num_hidden_layers?"
    )
    assert "has no field 'n_layers'" in str(error("transformers:GPT2LMHeadModel", {"n_layers": 2}))
    assert load_model("transformers:gpt2", {"num_hidden_layers": 1, **TINY_GPT2}).model


def test_unknown_transformers_name(transformers: Any) -> None:
    message = str(error("transformers:gpt3"))
    assert message.startswith("unknown transformers model 'gpt3': neither a model type")
    assert "did you mean" in message and "gpt2" in message
    assert "GPT2LMHeadModel" in str(error("transformers:GPT2LMHeadModle"))
    assert "unknown transformers model 'GPT2Config'" in str(error("transformers:GPT2Config"))


def test_bad_config_files(transformers: Any, tmp_path: Path) -> None:
    assert str(error(f"transformers:{tmp_path}/none.json")).startswith(
        f"no such config file: {tmp_path}/none.json"
    )
    broken = tmp_path / "broken.json"
    broken.write_text('{"model_type": "llama",\n  "hidden_size": }')
    assert str(error(f"transformers:{broken}")) == (
        "broken.json is not valid JSON: Expecting value (line 2, column 18); give a "
        "transformers config.json"
    )
    untyped = tmp_path / "untyped.json"
    untyped.write_text('{"hidden_size": 64}')
    assert str(error(f"transformers:{untyped}")) == (
        'untyped.json has no "model_type"; add one, e.g. "model_type": "llama"'
    )
    listed = tmp_path / "list.json"
    listed.write_text("[1, 2]")
    assert "holds a JSON list, not an object" in str(error(f"transformers:{listed}"))
    typo = tmp_path / "typo.json"
    typo.write_text('{"model_type": "lama"}')
    assert "knows no \"model_type\" 'lama'; did you mean llama" in str(
        error(f"transformers:{typo}")
    )


def test_transformers_not_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "transformers", None)  # `import transformers` fails
    with pytest.raises(MissingDependencyError, match="pip install transformers") as info:
        load_model("transformers:gpt2")
    assert "\n" not in str(info.value)


def test_a_loaded_model_is_a_plain_record() -> None:
    loaded = LoadedModel(nn.Identity(), None, None, "x")
    assert loaded.description == "x"
