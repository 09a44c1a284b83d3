"""Running ranks in spawned processes and collecting what each reports."""

from __future__ import annotations

import json
import multiprocessing
import os
import sys
import time
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest


def spawn_ranks(worker: Any, world: int, out: Path, limit_s: float) -> list[dict[str, Any]]:
    """Start ``world`` processes of ``worker(rank, store_path, out)`` (spawned), wait at
    most ``limit_s`` in all, and hand over each rank's ``rank{r}.json``; a test failure
    with the ranks' tracebacks (their ``rank{r}.error``) if one failed or ran late."""
    ctx = multiprocessing.get_context("spawn")
    procs = [
        ctx.Process(target=worker, args=(r, str(out / "store"), str(out)), daemon=True)
        for r in range(world)
    ]
    start = time.monotonic()
    for proc in procs:
        proc.start()
    try:
        for proc in procs:
            proc.join(max(0.0, limit_s - (time.monotonic() - start)))
    finally:
        late = [r for r, proc in enumerate(procs) if proc.is_alive()]
        for proc in procs:
            if proc.is_alive():
                proc.terminate()
                proc.join(5)
    errors = {r: (out / f"rank{r}.error") for r in range(world)}
    found = "\n".join(f"rank {r}:\n{p.read_text()}" for r, p in errors.items() if p.exists())
    if late:
        pytest.fail(f"ranks {late} still ran after {limit_s:.0f} s (killed)\n{found}")
    if found or any(proc.exitcode != 0 for proc in procs):
        codes = [proc.exitcode for proc in procs]
        pytest.fail(f"a rank failed (exit codes {codes}):\n{found}")
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(world)]


def spawn_world(
    worker: Any, world: int, tmp_path_factory: pytest.TempPathFactory, name: str, limit_s: float
) -> list[dict[str, Any]]:
    """``spawn_ranks`` of ``worker(rank, store, out, world=world)`` in a fresh directory
    ``{name}{world}``: a module's facts on ``world`` ranks."""
    import functools

    out: Path = tmp_path_factory.mktemp(f"{name}{world}")
    return spawn_ranks(functools.partial(worker, world=world), world, out, limit_s)


@contextmanager
def rank_output(rank: int, out: str, facts: dict[str, Any]) -> Iterator[None]:
    """The body of a rank ``spawn_ranks`` started: a failure's traceback goes to
    ``rank{r}.error``, the process group (if any) is destroyed, ``facts`` go to
    ``rank{r}.json``, and the process then ends at once (``os._exit(0)``), so that a
    background thread of a process group built and dropped along the way cannot abort it
    at interpreter shutdown once its facts are written (gloo's, seen as "terminate called
    without an active exception" on a loaded machine)."""
    import torch.distributed as dist

    try:
        yield
    except BaseException:
        Path(out, f"rank{rank}.error").write_text(traceback.format_exc(), encoding="utf-8")
        raise
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
    Path(out, f"rank{rank}.json").write_text(json.dumps(facts), encoding="utf-8")
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
