"""A pipeline schedule's order and its run in time (``planning.pipeline``): each rank's
forwards and backwards (or a backward's input and weight halves) in the order torch's
``torch.distributed.pipelining`` schedules run them, which stage each of a rank's chunks
is, and when each rank ends its step on given times (``simulate``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

SCHEDULES = ("gpipe", "1f1b", "interleaved_1f1b", "zero_bubble", "zbv")
#: The schedules that run several model chunks a rank when asked (``virtual_stages``).
MULTI_CHUNK = ("interleaved_1f1b", "zero_bubble")
#: The schedules that split each backward into its input and weight halves.
ZERO_BUBBLE = ("zero_bubble", "zbv")


# ---- the schedule ----------------------------------------------------------------------
#: One forward (``"F"``), backward (``"B"``), or under ``zero_bubble`` a backward's input
#: (``"I"``) or weight (``"W"``) half, of a rank: (kind, its local chunk, the microbatch).
Action = tuple[str, int, int]


def actions(
    schedule: str, stages: int, rank: int, microbatches: int, virtual: int = 1
) -> list[Action]:
    """Rank ``rank``'s forwards and backwards, in order (module doc): under
    ``interleaved_1f1b`` over its ``virtual`` chunks, the stages ``rank``, ``rank +
    stages``, ... of ``stages x virtual``."""
    m = microbatches
    if schedule == "gpipe":
        return [("F", 0, k) for k in range(m)] + [("B", 0, k) for k in range(m)]
    if schedule == "interleaved_1f1b":
        return _interleaved(stages, rank, m, virtual)
    if schedule == "zero_bubble":
        return _zero_bubble(stages, rank, m, virtual)
    if schedule == "zbv":
        return _zbv(stages, rank, m)
    warmup = min(m, stages - rank)
    out = [("F", 0, k) for k in range(warmup)]
    for k in range(m - warmup):
        out += [("B", 0, k), ("F", 0, warmup + k)]
    out += [("B", 0, k) for k in range(m - warmup, m)]
    return out


def _interleaved(stages: int, rank: int, m: int, virtual: int) -> list[Action]:
    """Interleaved 1F1B as torch's ``ScheduleInterleaved1F1B`` orders a rank's work
    (Narayanan et al. 2021): the microbatches go in rounds of ``m / rounds`` (``rounds =
    max(1, m // stages)``) through the chunks in turn; ``(virtual - 1) x`` a round plus
    ``2 (stages - 1 - rank)`` forwards warm up (at most all ``m x virtual``), then a
    forward and a backward in turn, the backwards through the chunks in reverse, then
    the remaining backwards."""
    per_round = m // max(1, m // stages)
    total = virtual * m
    warmup = min((virtual - 1) * per_round + 2 * (stages - 1 - rank), total)
    done = {"F": [0] * virtual, "B": [0] * virtual}

    def step(kind: str, op: int) -> Action:
        turn = (op if kind == "F" else op - warmup) // per_round % virtual
        chunk = turn if kind == "F" else virtual - 1 - turn
        done[kind][chunk] += 1
        return (kind, chunk, done[kind][chunk] - 1)

    out: list[Action] = []
    for op in range(total + warmup):
        if op < total:
            out.append(step("F", op))
        if op >= warmup:
            out.append(step("B", op))
    return out


def _zero_bubble(stages: int, rank: int, m: int, virtual: int) -> list[Action]:
    """Zero bubble (Qi et al. 2024, ZB-H1; interleaved over ``virtual`` chunks) as
    torch's ``ScheduleInterleavedZeroBubble`` orders a rank's work: a backward split into
    its input half (``I``: the input's gradient, sent back at once) and its weight half
    (``W``: the weights' gradients, run later to fill the bubble). Rounds as interleaved
    1F1B's; ``(virtual - 1) x`` a round plus ``stages - 1 - rank`` forwards warm up, then
    a forward and an input half in turn, each followed, after the first ``rank`` of
    them, by the oldest weight half waiting; then the remaining input and weight
    halves alike, then the weight halves left."""
    per_round = m // max(1, m // stages)
    total = virtual * m
    warmup = min((virtual - 1) * per_round + (stages - 1 - rank), total)
    done = {"F": [0] * virtual, "I": [0] * virtual, "W": [0] * virtual}

    def add(kind: str, chunk: int) -> None:
        done[kind][chunk] += 1
        out.append((kind, chunk, done[kind][chunk] - 1))

    out: list[Action] = []
    waiting: list[int] = []  # the chunks of the input halves run, oldest first
    for op in range(total + warmup):
        if op < total:
            add("F", op // per_round % virtual)
        if op >= warmup:
            chunk = virtual - 1 - (op - warmup) // per_round % virtual
            add("I", chunk)
            waiting.append(chunk)
            if op - warmup >= rank:
                add("W", waiting.pop(0))
    for chunk in waiting:
        add("W", chunk)
    return out


def _zbv(stages: int, rank: int, m: int) -> list[Action]:
    """ZB-V (Qi et al. 2024, section 6) as torch's ``ScheduleZBVZeroBubble`` orders a
    rank's work over its two chunks, the stages ``rank`` (chunk 0) and ``2 stages - 1 -
    rank`` (chunk 1): ``2 (stages - rank) - 1`` forwards of chunk 0; ``rank`` pairs of a
    chunk 1 and a chunk 0 forward; ``stages - rank`` of chunk 1's forward, input and
    weight halves; then, while forwards remain, chunk 0's forward (while it has one
    left), input and weight halves and chunk 1's likewise; then ``rank`` pairs of input
    halves, chunk 0's and 1's; then ``stages - rank`` of chunk 0's input and weight
    halves; then the weight halves left, chunk 1's and then chunk 0's. torch fills the
    pipeline with ``max(2 stages - 1, m)`` microbatches and drops those past ``m``."""
    n = max(2 * stages - 1, m)
    count = {(k, c): 0 for k in "FIW" for c in (0, 1)}
    out: list[Action] = []

    def add(kind: str, chunk: int) -> None:
        out.append((kind, chunk, count[kind, chunk]))
        count[kind, chunk] += 1

    def repeat(times: int, *steps: str) -> None:
        """``times`` rounds of ``steps`` (``"F0"``: chunk 0's forward)."""
        for _ in range(times):
            for step in steps:
                add(step[0], int(step[1]))

    repeat(2 * (stages - rank) - 1, "F0")
    repeat(rank, "F1", "F0")
    repeat(stages - rank, "F1", "I1", "W1")
    while count["F", 1] < count["F", 0] or count["F", 0] < n:
        if count["F", 0] < n:
            add("F", 0)
        repeat(1, "I0", "W0", "F1", "I1", "W1")
    repeat(rank, "I0", "I1")
    repeat(stages - rank, "I0", "W0")
    for chunk in (1, 0):
        while count["W", chunk] < count["I", chunk]:
            add("W", chunk)
    return [a for a in out if a[2] < m]


def stage_of(schedule: str, stages: int, rank: int, chunk: int) -> int:
    """The stage a rank's chunk runs: ZB-V's ``rank`` and ``2 stages - 1 - rank`` (a V),
    the others' ``rank + chunk x stages``."""
    if schedule == "zbv":
        return rank if chunk == 0 else 2 * stages - 1 - rank
    return chunk * stages + rank


def rank_of(schedule: str, stages: int, stage: int) -> int:
    """The rank that runs ``stage`` (``stage_of``'s inverse)."""
    if schedule == "zbv" and stage >= stages:
        return 2 * stages - 1 - stage
    return stage % stages


def in_flight(order: Sequence[Action]) -> int:
    """The most microbatches (of any chunk) forwarded and not yet backwarded (under zero
    bubble: their weight half not yet run) at once."""
    most = now = 0
    for kind, *_ in order:
        now += {"F": 1, "I": 0}.get(kind, -1)
        most = max(most, now)
    return most


def simulate(
    stages: int,
    virtual: int,
    orders: Sequence[Sequence[Action]],
    seconds: Mapping[tuple[int, str], float],
    schedule: str = "1f1b",
) -> list[float]:
    """When each rank ends its step: every rank runs its ``orders`` in turn, each action
    as soon as the rank is free and what it needs has ended (a forward: the previous
    stage's forward of its microbatch; a backward or input half: the next stage's, the
    last stage's its own forward; a weight half: its input half). ``seconds[(stage,
    kind)]``: an action's length on stage ``stage`` (``stage_of`` the rank's chunk), its
    sends included."""
    count = stages * virtual
    ended: dict[tuple[str, int, int], float] = {}
    free, at = [0.0] * stages, [0] * stages
    moved = True
    while moved:
        moved = False
        for r, order in enumerate(orders):
            while at[r] < len(order):
                kind, chunk, k = order[at[r]]
                g = stage_of(schedule, stages, r, chunk)
                if kind == "F":
                    need = ("F", g - 1, k) if g else None
                elif kind == "W":
                    need = ("I", g, k)
                else:
                    need = (kind, g + 1, k) if g < count - 1 else ("F", g, k)
                if need is not None and need not in ended:
                    break
                start = max(free[r], ended[need] if need else 0.0)
                free[r] = ended[(kind, g, k)] = start + seconds[(g, kind)]
                at[r] += 1
                moved = True
    if any(a < len(o) for a, o in zip(at, orders, strict=True)):
        raise AssertionError("pipeline schedule deadlocks")  # torch's orders never do
    return free
