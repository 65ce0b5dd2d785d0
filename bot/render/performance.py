"""The "Performance" section of the summary and the ``paritybot / performance`` check run's text.

One table row per benchmark compared (base and head median per call, the ratio head/base with its
interval, the verdict, the rounds), regressions first; below it, for each regression, a Mermaid
chart of its rounds, which GitHub draws in a comment. Benchmark names come from the pull request,
so they reach Markdown through :mod:`bot.render.markdown` only, and never reach a chart: a chart
is labelled by the row's number.
"""

from __future__ import annotations

from bot.core.perf import BenchmarkSamples, Comparison, Outcome, PerformanceResult, Verdict, outcome
from bot.render import markdown as md
from bot.render.phrases import details

ORDER = [
    Verdict.REGRESSION,
    Verdict.ERROR,
    Verdict.IMPROVEMENT,
    Verdict.INCONCLUSIVE,
    Verdict.TOO_FEW_ROUNDS,
    Verdict.NO_CHANGE,
]
SHOWN = {
    Verdict.REGRESSION: "❌ regression",
    Verdict.IMPROVEMENT: "✅ improvement",
    Verdict.NO_CHANGE: "no change",
    Verdict.INCONCLUSIVE: "inconclusive",
    Verdict.TOO_FEW_ROUNDS: "too few rounds",
    Verdict.ERROR: "⚠️ error",
}
# Always listed, however many: what a reviewer must see is never behind an "… and N more".
ALWAYS = (Verdict.REGRESSION, Verdict.ERROR, Verdict.IMPROVEMENT)
MAX_ROWS = 50
MAX_CHARTS = 3
MAX_POINTS = 60


def duration(seconds: float | None) -> str:
    """A time per call, in the unit that keeps it between 1 and 1000."""
    if seconds is None:
        return "–"
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6)):
        if seconds >= scale:
            return f"{seconds / scale:.3g} {unit}"
    return f"{seconds / 1e-9:.3g} ns"


def ratio(c: Comparison) -> str:
    if c.ratio is None or c.low is None or c.high is None:
        return "–"
    return f"{c.ratio:.3f} ({c.low:.3f}–{c.high:.3f})"


def performance_section(
    comparisons: list[Comparison],
    samples: list[BenchmarkSamples],
    *,
    threshold: float,
    confidence: float,
    rerun: str | None = None,
) -> str:
    """The section as Markdown; ``rerun`` is the command that repeats the comparison locally."""
    ordered = sorted(comparisons, key=lambda c: ORDER.index(c.verdict))
    must = [c for c in ordered if c.verdict in ALWAYS]
    rows = must + [c for c in ordered if c.verdict not in ALWAYS][: max(0, MAX_ROWS - len(must))]
    lines = [
        "### Performance",
        "",
        f"Base and head processes in alternating rounds on the same machine, in one run. A regression is a "
        f"ratio whose whole interval is above {1 + threshold:.2f}; the intervals are over the process pairs "
        f"and hold together at {confidence:.0%} for the run's {len(comparisons)} benchmarks "
        "(Benjamini–Hochberg): a change that touches none is flagged at most "
        f"{1 - confidence:.0%} of the time.",
        "",
        "| # | benchmark | base | head | head/base (interval) | verdict | rounds (process pairs) |",
        "|---|---|---|---|---|---|---|",
    ]
    for number, c in enumerate(rows, start=1):
        lines.append(
            f"| {number} | {md.code(c.name, in_table=True)} | {duration(c.base_median)} | "
            f"{duration(c.head_median)} | {ratio(c)} | {verdict_cell(c, threshold)} | {c.rounds} ({c.processes}) |"
        )
    if len(rows) < len(ordered):
        listed = {id(c) for c in rows}
        left = [c for c in ordered if id(c) not in listed]
        counts = ", ".join(
            f"{sum(c.verdict is v for c in left)} {v.value}"
            for v in ORDER
            if any(c.verdict is v for c in left)
        )
        lines += ["", md.text(f"… and {len(left)} more benchmarks: {counts}.")]
    by_name = {(s.kind, s.name): s for s in samples}
    charted = 0
    for number, c in enumerate(rows, start=1):
        bench = by_name.get((c.kind, c.name))
        if c.verdict is not Verdict.REGRESSION or bench is None or charted == MAX_CHARTS:
            continue
        charted += 1
        lines += ["", f"Rounds of benchmark {number} (time per call):", "", rounds_chart(bench)]
    if rerun:
        lines += ["", "Run the same comparison locally:", "", md.fence(rerun, "sh")]
    return "\n".join(lines)


def verdict_cell(c: Comparison, threshold: float) -> str:
    """The verdict in words, with what it rests on where the word alone would mislead."""
    shown = SHOWN[c.verdict]
    if c.verdict is Verdict.NO_CHANGE:
        return f"{shown} (within ±{threshold:.0%})"
    if c.verdict in (Verdict.ERROR, Verdict.INCONCLUSIVE, Verdict.TOO_FEW_ROUNDS):
        return f"{shown}: {md.cell(c.reason[:200])}"
    return shown


def rounds_chart(bench: BenchmarkSamples) -> str:
    """A Mermaid line chart of base and head over the rounds; numbers only, no text from the run."""
    rounds = bench.rounds
    step = max(1, -(-len(rounds) // MAX_POINTS))
    shown = rounds[::step]
    scale, unit = next(
        ((s, u) for s, u in ((1.0, "s"), (1e-3, "ms"), (1e-6, "µs")) if min(r.base for r in shown) >= s),
        (1e-9, "ns"),
    )
    base = ", ".join(f"{r.base / scale:.4g}" for r in shown)
    head = ", ".join(f"{r.head / scale:.4g}" for r in shown)
    return "\n".join(
        [
            "```mermaid",
            "xychart-beta",
            f'    x-axis "round (every {step})" 1 --> {len(shown)}'
            if step > 1
            else f'    x-axis "round" 1 --> {len(shown)}',
            f'    y-axis "{unit}"',
            f"    line [{base}]",
            f"    line [{head}]",
            "```",
            "",
            "The first line is base, the second head.",
        ]
    )


def check_text(result: Outcome, comparisons: list[Comparison]) -> tuple[str, str]:
    """The check run's title and summary: its title says the outcome, the summary lists the rest."""
    listed = sorted(
        (c for c in comparisons if c.verdict is not Verdict.NO_CHANGE), key=lambda c: ORDER.index(c.verdict)
    )
    shown = [c for c in listed if c.verdict in ALWAYS]
    shown += [c for c in listed if c.verdict not in ALWAYS][: max(0, MAX_ROWS - len(shown))]
    lines = [
        f"- {md.code(c.name)}: {SHOWN[c.verdict]}, {ratio(c)} — {md.text(c.reason[:300])}" for c in shown
    ]
    if len(shown) < len(listed):
        lines.append(f"- {len(listed) - len(shown)} more inconclusive or too few rounds")
    quiet = len(comparisons) - len(listed)
    if quiet:
        lines.append(f"- {quiet} more with no change")
    return md.plain(result.title), "\n".join(lines) or "No benchmark was compared."


def result_section(result: PerformanceResult) -> str:
    """A run's Performance section: the table, or why there is none, with why the comparison ran."""
    if result.error is not None:
        body = f"### Performance\n\nThe benchmarks could not be compared: {md.prose(result.error)}"
    elif not result.comparisons and result.selected:
        why = md.prose(result.why[0][:400]) if result.why else "no benchmark can be affected by this change"
        body = f"### Performance\n\nNo benchmark to compare: {why}."
        body += "".join(f"\n- {md.prose(line[:400])}" for line in result.why[1:])
    else:
        body = performance_section(
            result.comparisons,
            result.charted,
            threshold=result.threshold,
            confidence=result.confidence,
            rerun=result.rerun or None,
        )
        if result.selected and result.why:
            reasons = "\n".join(f"- {md.prose(line[:400])}" for line in result.why)
            body += "\n\n" + details("Why these benchmarks", reasons)
    notes = [f"Compared because {md.prose(result.trigger)}."]
    notes += [f"⚠️ {md.text(p[:300])}" for p in result.problems[:5]]
    return body + "\n\n" + "\n".join(f"<sub>{n}</sub>" if i == 0 else f"- {n}" for i, n in enumerate(notes))


def result_outcome(result: PerformanceResult) -> Outcome:
    """The check run's conclusion: a comparison that could not run is neutral, never a pass."""
    if result.error is not None:
        return Outcome(conclusion="neutral", title=f"Not compared: {md.plain(result.error)[:150]}")
    if not result.comparisons and result.selected:
        return Outcome(conclusion="neutral", title="No benchmark can be affected by this change")
    return outcome(result.comparisons, threshold=result.threshold, blocking=result.blocking)
