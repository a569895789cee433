"""The comparison's report: the targets and their ratios, the Markdown, the chart.

compare.py collects every system's results into one JSON-able dict (see
``compare.collect``); this module reads it. The chart needs matplotlib, which lives
in the ``tools`` virtualenv rather than the repository's, so compare.py runs
``python -m benchmarks.peers.report chart RESULTS.json OUT.png`` there; everything
else runs in compare.py itself. Only the standard library is imported at module level.
"""

from __future__ import annotations

import json
import operator
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: Report order: durable_jobs first, then the peers, then the ceiling.
ORDER = (
    "durable_jobs_pg",
    "durable_jobs_sqlite",
    "durable_jobs_mysql",
    "procrastinate",
    "django_tasks_db",
    "django_tasks_db_mysql",
    "django_q2",
    "django_q2_mysql",
    "celery_redis",
    "pgbench",
)
#: The peers a "fastest peer" is chosen among (durable_jobs and the ceiling are not).
PEERS = ("procrastinate", "django_tasks_db", "django_q2", "celery_redis")
NONE = "-"
TIMES = "\N{MULTIPLICATION SIGN}"
PASS, MISSED, NOT_MEASURED = "PASS", "MISSED", "NOT MEASURED"


# ================================================================================================
# Reading the results
# ================================================================================================


def measurement(results: dict[str, Any], system: str, name: str) -> dict[str, Any] | None:
    entry = results["systems"].get(system, {}).get(name)
    return entry if isinstance(entry, dict) else None


def value(results: dict[str, Any], system: str, name: str, key: str = "rate") -> float | None:
    """A figure, or None when it was not measured, failed, or does not apply."""
    entry = measurement(results, system, name)
    if entry is None or "error" in entry or "not_supported" in entry:
        return None
    found = entry.get(key)
    return float(found) if isinstance(found, int | float) else None


def label(results: dict[str, Any], system: str) -> str:
    return str(results["systems"].get(system, {}).get("label", system))


# ================================================================================================
# Targets
# ================================================================================================


@dataclass(frozen=True)
class Check:
    """One target: what was measured, the target, and whether it was met."""

    what: str
    figures: str
    target: str
    status: str

    def line(self) -> str:
        return f"{self.status}: {self.what}: {self.figures} (target {self.target})"


COMPARE: dict[str, Callable[[float, float], bool]] = {
    "≥": operator.ge,
    "≤": operator.le,
    "<": operator.lt,
}


def _status(measured: float | None, sign: str, bound: float) -> str:
    if measured is None:
        return NOT_MEASURED
    return PASS if COMPARE[sign](measured, bound) else MISSED


def _rate(value_: float | None) -> str:
    return NONE if value_ is None else f"{value_:,.0f}"


def _ms(value_: float | None) -> str:
    return NONE if value_ is None else f"{value_:.1f} ms"


def ratio_check(
    what: str, mine: float | None, theirs: float | None, sign: str, bound: float, unit: str
) -> Check:
    ratio = mine / theirs if mine is not None and theirs else None
    shown = NONE if ratio is None else f"{ratio:.2f}{TIMES}"
    if unit == "ms":
        figures = f"{_ms(mine)} ÷ {_ms(theirs)} = {shown}"
    else:
        figures = f"{_rate(mine)} ÷ {_rate(theirs)} {unit} = {shown}"
    return Check(what, figures, f"{sign} {bound:g}{TIMES}", _status(ratio, sign, bound))


def checks(results: dict[str, Any]) -> list[Check]:
    """Every target of the product, against this run's figures."""
    dj, found = "durable_jobs_pg", []

    for peer, bound in (("procrastinate", 10), ("celery_redis", 5)):
        found.append(
            ratio_check(
                f"Drain, 2 worker processes: durable_jobs ÷ {label(results, peer)}",
                value(results, dj, "drain_2"),
                value(results, peer, "drain_2"),
                "≥",
                bound,
                "jobs/s",
            )
        )

    p50 = value(results, dj, "latency", "p50_ms")
    p95 = value(results, dj, "latency", "p95_ms")
    found.append(
        ratio_check(
            f"Pickup latency p50: durable_jobs ÷ {label(results, 'celery_redis')}",
            p50,
            value(results, "celery_redis", "latency", "p50_ms"),
            "≤",
            1,
            "ms",
        )
    )
    found.append(
        Check("Pickup latency p50, durable_jobs", _ms(p50), "< 5 ms", _status(p50, "<", 5))
    )
    found.append(
        Check("Pickup latency p95, durable_jobs", _ms(p95), "< 15 ms", _status(p95, "<", 15))
    )

    singles = {peer: value(results, peer, "enqueue_single") for peer in PEERS}
    measured = {peer: rate for peer, rate in singles.items() if rate is not None}
    fastest = max(measured, key=measured.__getitem__) if measured else None
    found.append(
        ratio_check(
            "Enqueue, 1 job per transaction: durable_jobs ÷ the fastest peer"
            + (f" ({label(results, fastest)})" if fastest else ""),
            value(results, dj, "enqueue_single"),
            measured.get(fastest) if fastest else None,
            "≥",
            1,
            "jobs/s",
        )
    )
    found.append(
        ratio_check(
            "Enqueue, bulk: durable_jobs `enqueue_many()` ÷ Procrastinate `batch_defer()`",
            value(results, dj, "enqueue_bulk"),
            value(results, "procrastinate", "enqueue_bulk"),
            "≥",
            3,
            "jobs/s",
        )
    )

    sqlite = value(results, "durable_jobs_sqlite", "drain_1")
    postgres = value(results, dj, "drain_1")
    found.append(
        Check(
            "Drain on SQLite, 1 worker process",
            f"{_rate(sqlite)} jobs/s (PostgreSQL, 1 worker process: {_rate(postgres)} jobs/s)",
            "≥ 2,000 jobs/s",
            _status(sqlite, "≥", 2000),
        )
    )

    scale = results.get("scale", {}).get("data") or {}
    flat = (scale.get("flat_cost") or {}).get("ratio")
    memory = (scale.get("memory") or {}).get("ratio")
    flat_cost = scale.get("flat_cost") or {}
    found.append(
        Check(
            "Flat cost: claim rate on a full table ÷ on an empty one (scale.py)",
            NONE
            if flat is None
            else f"{_rate(flat_cost.get('full_rate'))} ÷ {_rate(flat_cost.get('empty_rate'))} "
            f"jobs/s = {flat:.2f}",
            "≥ 0.80",
            _status(flat, "≥", 0.80),
        )
    )
    rss = scale.get("memory") or {}
    found.append(
        Check(
            "Memory: worker RSS after all jobs ÷ after the first ones (scale.py)",
            NONE
            if memory is None
            else f"{rss.get('rss_after_all_kb', 0):,} ÷ {rss.get('rss_after_first_kb', 0):,} kB "
            f"= {memory:.2f}",
            "≤ 1.10",
            _status(memory, "≤", 1.10),
        )
    )
    return found


# ================================================================================================
# Markdown
# ================================================================================================


def _cell(results: dict[str, Any], system: str, name: str, key: str = "rate") -> str:
    entry = measurement(results, system, name)
    if entry is None:
        return NONE
    if "not_supported" in entry:
        return "n/a"
    if "error" in entry:
        partial = entry.get("partial_rate")
        shown = f" (≈{partial:,.0f} until then)" if partial else ""
        return f"failed{shown}: {_short(entry['error'])}"
    found = entry.get(key)
    return NONE if found is None else f"{found:,.0f}"


def _short(text: str, limit: int = 90) -> str:
    text = " ".join(str(text).split()).replace("|", "/")
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _latency_cell(results: dict[str, Any], system: str) -> str:
    entry = measurement(results, system, "latency")
    if entry is None or "error" in entry or "not_supported" in entry:
        return _cell(results, system, "latency")
    return f"{entry['p50_ms']:.1f} / {entry['p95_ms']:.1f}"


def results_table(results: dict[str, Any]) -> list[str]:
    meta = results["meta"]
    lines = [
        "| System | Enqueue, 1 per transaction (jobs/s) | Enqueue, bulk (jobs/s) "
        f"| Drain {meta['jobs']:,} jobs, 1 worker process (jobs/s) "
        f"| Drain {meta['jobs']:,} jobs, 2 worker processes (jobs/s) "
        "| Pickup latency, idle worker, p50 / p95 (ms) |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for system in ORDER:
        if system not in results["systems"]:
            continue
        name = label(results, system)
        if system == "pgbench":
            batch = measurement(results, system, "drain_2") or {}
            size = batch.get("batch_size", 100)
            lines.append(
                f"| {name}, 1 job per statement | n/a | n/a | {_cell(results, system, 'drain_1')} "
                f"| {_cell(results, system, 'drain_2')} | n/a |"
            )
            lines.append(
                f"| {name}, {size} jobs per statement | n/a | n/a "
                f"| {_cell(results, system, 'drain_1', 'batch_rate')} "
                f"| {_cell(results, system, 'drain_2', 'batch_rate')} | n/a |"
            )
            continue
        setup = measurement(results, system, "setup") or {}
        if "error" in setup:
            lines.append(f"| {name} | not set up: {_short(setup['error'])} | | | | |")
            continue
        cells = [
            f"**{name}**" if system.startswith("durable_jobs") else name,
            _cell(results, system, "enqueue_single"),
            _cell(results, system, "enqueue_bulk"),
            _cell(results, system, "drain_1"),
            _cell(results, system, "drain_2"),
            _latency_cell(results, system),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def drain_details(results: dict[str, Any]) -> list[str]:
    lines = [
        "| System | Worker processes | First job started (s) | Last job finished (s) "
        "| jobs/s, first start → last finish | Workers stopped (s) | Load average (1 min) |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]

    def seconds(entry: dict[str, Any], key: str) -> str:
        found = entry.get(key)
        return NONE if found is None else f"{found:.2f}"

    for system in ORDER:
        if system == "pgbench":
            continue
        for workers in (1, 2):
            entry = measurement(results, system, f"drain_{workers}")
            if entry is None or "error" in entry or "not_supported" in entry:
                continue
            steady = entry.get("steady_rate")
            lines.append(
                f"| {label(results, system)} | {workers} | {seconds(entry, 'startup_s')} "
                f"| {seconds(entry, 'to_last_finish_s')} "
                f"| {NONE if steady is None else f'{steady:,.0f}'} | {seconds(entry, 'wall_s')} "
                f"| {entry.get('load_1m', 0):.1f} |"
            )
    return lines


def systems_table(results: dict[str, Any]) -> list[str]:
    lines = [
        "| System | Installed | Worker processes | Bulk enqueue | End of a drain |",
        "| --- | --- | --- | --- | --- |",
    ]
    for system in ORDER:
        entry = results["systems"].get(system)
        if entry is None:
            continue
        versions = entry.get("versions") or {}
        installed = ", ".join(f"{name} {version}" for name, version in versions.items())
        where = entry.get("where", "")
        lines.append(
            f"| {entry['label']} | {installed or NONE}{'; ' + where if where else ''} "
            f"| {entry['workers_note']} | {entry['bulk_note']} | {entry['finish_note']} |"
        )
    return lines


def scale_section(results: dict[str, Any]) -> list[str]:
    scale = results.get("scale") or {}
    if scale.get("status") != "ok":
        return [
            f"Flat cost and memory (`benchmarks/scale.py`): {scale.get('status', 'not run')}"
            + (f" ({scale['reason']})" if scale.get("reason") else "")
            + "."
        ]
    data = scale["data"]
    flat, memory = data.get("flat_cost", {}), data.get("memory", {})
    quick = " --quick" if scale.get("quick") else ""
    lines = [
        f"Flat cost and memory, from `benchmarks/scale.py --json{quick}` "
        f"(run as one phase, {scale.get('seconds', 0):.0f} s): claiming and acknowledging ran at "
        f"{_rate(flat.get('empty_rate'))} jobs/s on an empty table and "
        f"{_rate(flat.get('full_rate'))} jobs/s beside {flat.get('finished', 0):,} finished and "
        f"{flat.get('queued', 0):,} queued jobs (ratio {flat.get('ratio', 0):.2f}); a worker's "
        f"resident memory was {memory.get('rss_after_first_kb', 0):,} kB after "
        f"{memory.get('first', 0):,} jobs and {memory.get('rss_after_all_kb', 0):,} kB after "
        f"{memory.get('all', 0):,} (ratio {memory.get('ratio', 0):.2f}).",
    ]
    explain = str(flat.get("explain") or "").strip()
    if explain:
        lines += ["", "The claim's plan on the full table (`EXPLAIN ANALYZE`):", "", "```text"]
        lines += [explain, "```"]
    return lines


#: The MariaDB comparison: durable_jobs there, divided by each of these in the same run.
MYSQL_SYSTEM = "durable_jobs_mysql"
MYSQL_AGAINST = (
    "django_tasks_db_mysql",
    "django_q2_mysql",
    "durable_jobs_pg",
    "durable_jobs_sqlite",
)
#: (measurement, figure, label) of each row of the ratios.
RATIO_ROWS = (
    ("enqueue_single", "rate", "Enqueue, 1 per transaction"),
    ("enqueue_bulk", "rate", "Enqueue, bulk"),
    ("drain_1", "rate", "Drain, 1 worker process"),
    ("drain_2", "rate", "Drain, 2 worker processes"),
    ("latency", "p50_ms", "Pickup latency p50"),
    ("latency", "p95_ms", "Pickup latency p95"),
)


def mysql_section(results: dict[str, Any]) -> list[str]:
    """durable_jobs on MariaDB divided by each MariaDB peer and by durable_jobs on the
    other databases, in this run (for latency, a ratio under 1 is the better one)."""
    if MYSQL_SYSTEM not in results["systems"]:
        return []
    against = [system for system in MYSQL_AGAINST if system in results["systems"]]
    if not against:
        return []
    mine = label(results, MYSQL_SYSTEM)
    lines = [
        f"{mine} divided by each system in this run (rates: above 1 means {mine} is "
        "faster; pickup latency: below 1 means it picks jobs up sooner):",
        "",
        "| Measurement | " + " | ".join(f"÷ {label(results, s)}" for s in against) + " |",
        "| --- |" + " ---: |" * len(against),
    ]
    for name, key, text in RATIO_ROWS:
        ours = value(results, MYSQL_SYSTEM, name, key)
        cells = []
        for system in against:
            theirs = value(results, system, name, key)
            if ours is None or not theirs:
                cells.append(NONE)
            else:
                cells.append(f"{ours / theirs:.2f}{TIMES}")
        lines.append(f"| {text} | " + " | ".join(cells) + " |")
    latency = measurement(results, MYSQL_SYSTEM, "latency") or {}
    if "p50_ms" in latency:
        lines += [
            "",
            f"Pickup latency of {mine}, an idle worker polling the job table's highest id "
            f"(no LISTEN/NOTIFY there): p50 {latency['p50_ms']:.1f} ms, p95 "
            f"{latency['p95_ms']:.1f} ms, max {latency['max_ms']:.1f} ms over "
            f"{latency.get('samples', 0)} jobs.",
        ]
    return lines


def markdown(results: dict[str, Any], chart: str | None) -> str:
    """The block ``--write`` puts between the markers of docs/benchmarks.md."""
    meta = results["meta"]
    lines = [f"Run on {meta['date']} with:", "", "```console"]
    lines += [f"$ python benchmarks/compare.py {' '.join(meta['argv'])}".rstrip(), "```", ""]
    lines.append(
        f"The run took {meta['elapsed_s'] / 60:.1f} minutes. N = {meta['jobs']:,} jobs per drain "
        f"and per bulk enqueue, {meta['single_jobs']:,} one-per-transaction enqueues, "
        f"{meta['samples']} latency samples, concurrency {meta['concurrency']} per worker "
        "process where the system has such a setting. Each enqueue figure is the median of "
        f"{meta['rounds']} rounds, the systems taking turns."
    )
    lines += ["", "| Machine | |", "| --- | --- |"]
    lines += [f"| {key} | {text} |" for key, text in meta["machine"]]
    lines += ["", *results_table(results), ""]
    if ratios := mysql_section(results):
        lines += [*ratios, ""]
    lines += ["Targets (durable_jobs on PostgreSQL unless said otherwise):", ""]
    found = checks(results)
    if "--only" in " ".join(meta["argv"]):
        # A run of a few systems: the targets of the systems left out are not listed.
        shown = [check for check in found if check.status != NOT_MEASURED]
        left_out = len(found) - len(shown)
    else:
        shown, left_out = found, 0
    lines += [
        f"- **{check.status}**: {check.what}: {check.figures} (target {check.target})"
        for check in shown
    ]
    if left_out:
        lines.append(
            f"- {left_out} other target(s) not measured: their systems were not in this run."
        )
    if chart:
        lines += ["", f"![Drain, enqueue and pickup latency of each system]({chart})"]
    lines += [
        "",
        "Drains in detail (seconds from starting the worker processes; "
        '"-" where the system stores no start time):',
        "",
    ]
    lines += drain_details(results)
    lines += ["", "How each system ran:", ""]
    lines += systems_table(results)
    lines += ["", *scale_section(results)]
    return "\n".join(lines) + "\n"


# ================================================================================================
# The chart (in the tools virtualenv)
# ================================================================================================


def chart_rows(results: dict[str, Any]) -> list[tuple[str, dict[str, float | None]]]:
    """(label, figures) per row of the chart, top to bottom."""
    rows = []
    for system in ORDER:
        if system not in results["systems"]:
            continue
        name = label(results, system)
        if system == "pgbench":
            size = (measurement(results, system, "drain_2") or {}).get("batch_size", 100)
            rows.append(
                (
                    f"{name}, 1 job/statement",
                    {
                        "drain_1": value(results, system, "drain_1"),
                        "drain_2": value(results, system, "drain_2"),
                    },
                )
            )
            rows.append(
                (
                    f"{name}, {size} jobs/statement",
                    {
                        "drain_1": value(results, system, "drain_1", "batch_rate"),
                        "drain_2": value(results, system, "drain_2", "batch_rate"),
                    },
                )
            )
            continue
        rows.append(
            (
                name,
                {
                    "drain_1": value(results, system, "drain_1"),
                    "drain_2": value(results, system, "drain_2"),
                    "enqueue_single": value(results, system, "enqueue_single"),
                    "enqueue_bulk": value(results, system, "enqueue_bulk"),
                    "p50": value(results, system, "latency", "p50_ms"),
                    "p95": value(results, system, "latency", "p95_ms"),
                },
            )
        )
    return rows


PANELS = (
    (
        "Drain, no-op jobs (jobs/s, higher is better)",
        (("drain_1", "1 worker process"), ("drain_2", "2 worker processes")),
    ),
    (
        "Enqueue (jobs/s, higher is better)",
        (("enqueue_single", "1 per transaction"), ("enqueue_bulk", "bulk")),
    ),
    ("Pickup latency, idle worker (ms, lower is better)", (("p50", "p50"), ("p95", "p95"))),
)


def draw_chart(results: dict[str, Any], path: Path) -> None:
    """Three panels of horizontal bars, one row per system, on log scales (the figures
    span three orders of magnitude); the figure is written beside each bar."""
    import math

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = chart_rows(results)
    figure, axes = plt.subplots(1, len(PANELS), figsize=(16, 0.55 * len(rows) + 2.6), sharey=True)
    colours = ("#4C72B0", "#DD8452")
    height = 0.38
    for axis, (title, series) in zip(axes, PANELS, strict=True):
        figures = [[data.get(key) for _, data in rows] for key, _ in series]
        shown = [found for column in figures for found in column if found]
        if not shown:
            axis.set_title(title, fontsize=10)
            continue
        # Bars start at the decade below the smallest figure, so lengths compare fairly.
        floor = 10 ** math.floor(math.log10(min(shown)))
        for index, ((_, legend), column) in enumerate(zip(series, figures, strict=True)):
            positions = [row - height / 2 + index * height for row in range(len(rows))]
            lengths = [found - floor if found else 0 for found in column]
            axis.barh(
                positions, lengths, left=floor, height=height, color=colours[index], label=legend
            )
            for position, found in zip(positions, column, strict=True):
                text = "n/a" if not found else f"{found:,.1f}" if found < 10 else f"{found:,.0f}"
                axis.text(
                    found * 1.08 if found else floor * 1.1,
                    position,
                    text,
                    va="center",
                    fontsize=7.5,
                    color="black" if found else "grey",
                )
        axis.set_xscale("log")
        axis.set_xlim(floor, max(shown) * 8)
        axis.set_title(title, fontsize=10)
        axis.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.06), ncol=2)
        axis.grid(axis="x", which="major", alpha=0.3)
    axes[0].set_yticks(range(len(rows)), [name for name, _ in rows], fontsize=9)
    axes[0].invert_yaxis()
    meta = results["meta"]
    figure.suptitle(
        f"durable_jobs and its peers on one machine, {meta['date']} "
        f"(N = {meta['jobs']:,}; log scales)",
        fontsize=12,
    )
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=100)


def main(argv: list[str]) -> int:
    if len(argv) != 3 or argv[0] != "chart":
        raise SystemExit("usage: python -m benchmarks.peers.report chart RESULTS.json OUT.png")
    draw_chart(json.loads(Path(argv[1]).read_text()), Path(argv[2]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
