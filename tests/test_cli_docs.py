"""docs/cli.md tells the truth: every help text, every run and every error case in it is
the CLI's real output at 80 columns, re-run here.

``LAYERSCOPE_UPDATE_GOLDEN=1 pytest tests/test_cli_docs.py`` rewrites the blocks after a
deliberate change; the test then checks the exit codes and the one-line rule.
"""

from __future__ import annotations

import importlib
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from layerscope.cli import main
from layerscope.cli.profile_cmd import parse_device
from layerscope.collect.target.steer import torch_release
from layerscope.errors import InvalidInputError

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "cli.md"
#: Other documents with ``<!-- cli: ... -->`` blocks (README: what ``make demo`` prints).
OTHER_DOCS = (ROOT / "README.md",)
#: The directory the documented commands run in: example model files, a package, bad files.
WORKDIR = ROOT / "tests" / "data" / "cli"
UPDATE = os.environ.get("LAYERSCOPE_UPDATE_GOLDEN") == "1"

#: (what the user did wrong, the command line after `layerscope`, the exit code).
ERROR_CASES: list[tuple[str, str, int]] = [
    ("a factory that raises", "profile models.py:raises --input-shape 2,4", 2),
    ("a factory that needs arguments", "profile models.py:needs_args --input-shape 2,4", 2),
    ("a syntax error in the model file", "profile broken_syntax.py:build", 2),
    ("an import that fails in the model file", "profile bad_import.py:model", 2),
    ("a module that is not importable", "profile no_such_pkg.models:build", 2),
    ("a file that does not exist", "profile nothere.py:build", 2),
    ("an attribute that does not exist", "profile models.py:bild", 2),
    ("an attribute with no name close to it", "profile models.py:nope", 2),
    ("a factory that returns no module", "profile models.py:not_a_module", 2),
    ("a TARGET without a colon", "profile models.py", 2),
    ("an unknown example", "profile examples:nope", 2),
    ("an unknown transformers model", "profile transformers:gpt3", 2),
    (
        "an unknown config field",
        """profile transformers:gpt2 --model-args '{"n_layers": 2}'""",
        2,
    ),
    ("--model-args that is not JSON", "profile models.py:build --model-args '{width: 4}'", 2),
    ("a letter in a shape", "profile models.py:build --input-shape 8,x,64", 2),
    ("an empty dimension", "profile models.py:build --input-shape 8,,64", 2),
    ("a negative dimension", "profile models.py:build --input-shape -2,4", 2),
    (
        "a shape past what torch can size",
        "profile models.py:build --input-shape 99999999999,99999999999",
        2,
    ),
    ("an unknown dtype", "profile models.py:build --input-shape 2,4 --input-dtype half4", 2),
    (
        "an integer dtype for the model",
        "profile models.py:build --input-shape 2,4 --dtype int64",
        2,
    ),
    ("a seed past what torch takes", f"profile models.py:build --seed {2**70}", 2),
    (
        "a keyword tensor with a bad shape",
        """profile models.py:build --kwargs '{"x": {"shape": [2, 0]}}'""",
        2,
    ),
    ("a missing --input file", "profile models.py:build --input nothere.pt", 2),
    ("a device torch does not know", "profile models.py:build --device npu", 2),
    ("CUDA on a torch without it", "profile models.py:build --device cuda", 2),
    ("timing on meta", "profile models.py:build --input-shape 2,4 --device meta --time", 2),
    ("a kernel target on the CPU", "profile models.py:build --input-shape 2,4 --target h100", 2),
    ("an unknown device spec", "profile models.py:build --spec h100x", 2),
    ("the roofline view with no device", "profile models.py:build --format roofline", 2),
    ("show: the roofline view with no device", "show plain.json --format roofline", 2),
    ("a negative depth", "profile examples:tiny_gpt --depth -1", 2),
    ("an unknown column", "profile examples:tiny_gpt --columns flops,flopz", 2),
    ("an unknown flag after the subcommand", "profile examples:tiny_gpt --bogus", 2),
    ("an unknown output extension", "profile examples:tiny_gpt -o report.xyz", 2),
    ("a trace of an untimed profile", "profile examples:tiny_gpt --format trace", 2),
    ("the model raises", "profile models.py:Mismatch --input-shape 2,4", 3),
    ("show: a missing file", "show nothere.json", 2),
    ("show: a binary file", "show binary.json", 2),
    ("show: a wrong value in the JSON", "show lots.json", 2),
    ("config without an action", "config", 2),
    ("plan: an unknown sharding", "plan models.py:build --input-shape 2,4 --sharding zero3", 2),
    ("plan: a target that is no GPU", "plan models.py:build --input-shape 2,4 --target cpu", 2),
    (
        "plan: a sweep of no batch",
        "plan models.py:build --input-shape 2,4 --sweep micro_batch=0",
        2,
    ),
    ("generate: three numbers for a prompt", "generate models.py:build --input-shape 1,2,3", 2),
    (
        "generate: the table view of every stage",
        "generate transformers:tiny_llama.json --input-shape 1,8 --device cpu --view table",
        2,
    ),
]


steer_module = importlib.import_module("layerscope.collect.target.steer")


def run_cli(command: str) -> tuple[int, str, str]:
    """Run ``layerscope COMMAND`` in-process in WORKDIR; (exit code, stdout, stderr)."""
    import contextlib
    import io

    out, err = io.StringIO(), io.StringIO()
    cwd = os.getcwd()
    os.chdir(WORKDIR)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(shlex.split(command))
            except SystemExit as e:  # --help
                code = int(e.code or 0)
    finally:
        os.chdir(cwd)
    return code, out.getvalue(), err.getvalue()


@pytest.fixture(autouse=True)
def _eighty_columns(monkeypatch: pytest.MonkeyPatch, default_display_config: None) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    monkeypatch.delenv("LAYERSCOPE_CONFIG", raising=False)
    # The documented outputs were made on the torch the kernel rules were ported from; on
    # another release a steered run adds a notice saying so (test_target_kernels.py).
    running = torch_release(torch.__version__)
    monkeypatch.setattr(steer_module, "PORTED_FROM", running)


def _blocks(text: str) -> list[re.Match[str]]:
    return list(re.finditer(r"<!-- cli: (.+?) -->\n```text\n(.*?)```\n", text, re.S))


@pytest.mark.parametrize(
    "doc",
    [pytest.param(DOC, marks=pytest.mark.slow), *OTHER_DOCS],  # cli.md's runs take over 2 s
    ids=lambda p: p.name,
)
def test_documented_runs_and_help_are_real(doc: Path) -> None:
    text = doc.read_text()
    blocks = _blocks(text)
    assert blocks
    new = text
    for m in reversed(blocks):
        command = m.group(1)
        code, out, err = run_cli(command)
        assert code == 0, (command, err)
        shown = f"$ layerscope {command}\n{out}{err}"
        if UPDATE:
            start, end = m.span(2)
            new = new[:start] + shown + new[end:]
        else:
            assert m.group(2) == shown, f"{doc.name} is out of date for: layerscope {command}"
    if UPDATE:
        doc.write_text(new)


_NO_CUDA = "this torch was built without CUDA"
_NO_GPU = "no CUDA device is visible"


@pytest.mark.parametrize(("build", "why"), [(None, _NO_CUDA), ("13.0", _NO_GPU)])
def test_cuda_without_a_gpu_says_why_for_the_build(
    build: str | None, why: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A CPU build and a CUDA build on a machine with no GPU give different reasons."""
    monkeypatch.setattr(torch.version, "cuda", build)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(InvalidInputError) as info:
        parse_device("cuda:1")
    assert str(info.value) == f"--device cuda:1: {why}; use --device cpu or meta"


def _error_table() -> str:
    rows = ["| Mistake | Command | Exit | Message |", "|---|---|---|---|"]
    for case, command, _ in ERROR_CASES:
        code, _, err = run_cli(command)
        if torch.version.cuda is not None:  # the table shows a CPU build's words
            err = err.replace(_NO_GPU, _NO_CUDA)
        cells = [case, f"`layerscope {command}`", str(code), err.strip()]
        rows.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(rows) + "\n"


@pytest.mark.parametrize(
    ("case", "command", "exit_code"), ERROR_CASES, ids=[c[0] for c in ERROR_CASES]
)
def test_every_mistake_is_one_line_and_its_exit_code(
    case: str, command: str, exit_code: int
) -> None:
    if "--device cuda" in command and torch.cuda.is_available():
        pytest.skip("this torch has CUDA")
    code, out, err = run_cli(command)
    assert code == exit_code, err
    assert err.endswith("\n") and err.count("\n") == 1, err  # one line, never wrapped
    assert "Traceback" not in err
    assert err.count("error:") == 1  # no doubled prefix
    assert out == ""


def test_the_error_table_in_the_docs_is_real() -> None:
    if torch.cuda.is_available():
        pytest.skip("the table was made where CUDA is missing")
    text = DOC.read_text()
    start, end = "<!-- cli-errors:start -->\n", "<!-- cli-errors:end -->"
    assert start in text and end in text
    head, rest = text.split(start)
    table, tail = rest.split(end)
    fresh = _error_table()
    if UPDATE:
        DOC.write_text(head + start + fresh + end + tail)
    else:
        assert table == fresh


def test_debug_shows_the_traceback_before_or_after_the_subcommand() -> None:
    for command in (
        "--debug profile models.py:raises",
        "profile models.py:raises --debug",
    ):
        code, _, err = run_cli(command)
        assert code == 2
        assert "Traceback (most recent call last)" in err
        assert "ValueError: no checkpoint for this size" in err
        assert err.splitlines()[-1].startswith("layerscope: error: ")


def _script() -> str:
    script = shutil.which("layerscope", path=str(Path(sys.executable).parent))
    assert script is not None, "the layerscope script is not installed in this environment"
    return script


@pytest.mark.parametrize("command", ["profile mypkg.models:tiny --input-shape 2,4 --width 100"])
@pytest.mark.slow
def test_installed_script_and_python_dash_m_are_the_same_command(command: str) -> None:
    """Both import the model from the current directory, as the README says."""
    env = {**os.environ, "COLUMNS": "80"}
    env.pop("PYTHONPATH", None)
    runs = [
        subprocess.run(
            [*launcher, *shlex.split(command)],
            cwd=WORKDIR,
            capture_output=True,
            text=True,
            env=env,
            check=False,
        )
        for launcher in ([_script()], [sys.executable, "-m", "layerscope"])
    ]
    for run in runs:
        assert run.returncode == 0, run.stderr
        assert "Sequential" in run.stdout and "Params: 58 " in run.stdout  # (4*8+8) + (8*2+2)
    assert runs[0].stdout == runs[1].stdout


@pytest.mark.parametrize("command", ["profile", "show", "plan", "generate", "diff", "config"])
def test_help_lines_fit_the_width(command: str) -> None:
    """The help's description and examples are printed as written: each line fits the
    100 columns of the width the docs show (a lone backslash at a line's end in a
    docstring would join two example lines)."""
    code, out, _ = run_cli(f"{command} --help")
    assert code == 0
    assert [line for line in out.splitlines() if len(line) > 100] == []
