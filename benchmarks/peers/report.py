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
    return _figure(measurement(results, system, name), key)


def _figure(entry: dict[str, Any] | None, key: str) -> float | None:
    """A figure of a measurement's result, or None (see :func:`value`)."""
    if entry is None or "error" in entry or "not_supported" in entry:
        return None
    found = entry.get(key)
    return float(found) if isinstance(found, int | float) else None


def label(results: dict[str, Any], system: str) -> str:
    return str(results["systems"].get(system, {}).get("label", system))


def pgbench_value(results: dict[str, Any], workers: int, variant: str, key: str) -> float | None:
    """A figure of one pgbench variant's run with ``workers`` clients (see
    ``pgbench.VARIANTS``), or None."""
    return _figure(_variant(measurement(results, "pgbench", f"drain_{workers}"), variant), key)


def _variant(entry: dict[str, Any] | None, key: str) -> dict[str, Any] | None:
    """A pgbench variant's run within a drain's result; the result itself if it has no
    runs (it failed, or was not run), so that it is shown as such."""
    if entry is None or "variants" not in entry:
        return entry
    found = entry["variants"].get(key)
    return found if isinstance(found, dict) else None


Drains = tuple[str, str, dict[str, Any] | None, dict[str, Any] | None]


def drain_rows(results: dict[str, Any]) -> list[Drains]:
    """(system, label, drain with 1 worker process, with 2) of every system in the
    results, in report order; pgbench gives one row per variant, with its runs with 1
    and 2 clients."""
    rows = []
    for system in ORDER:
        if system not in results["systems"]:
            continue
        name = label(results, system)
        drains = [measurement(results, system, f"drain_{workers}") for workers in (1, 2)]
        variants = {
            key: run["label"]
            for entry in drains
            for key, run in ((entry or {}).get("variants") or {}).items()
        }
        if not variants:
            rows.append((system, name, drains[0], drains[1]))
        for key, text in variants.items():
            rows.append((system, text, _variant(drains[0], key), _variant(drains[1], key)))
    return rows


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
}


def _status(measured: float | None, sign: str, bound: float) -> str:
    if measured is None:
        return NOT_MEASURED
    return PASS if COMPARE[sign](measured, bound) else MISSED


def _rate(value_: float | None) -> str:
    return NONE if value_ is None else f"{value_:,.0f}"


def _ms(value_: float | None) -> str:
    return NONE if value_ is None else f"{value_:.1f} ms"


def _cpu(value_: float | None) -> str:
    """CPU seconds (per 1,000 jobs, or for a whole drain)."""
    return NONE if value_ is None else f"{value_:.3f}"


def ratio_check(
    what: str, mine: float | None, theirs: float | None, sign: str, bound: float, unit: str
) -> Check:
    ratio = mine / theirs if mine is not None and theirs else None
    shown = NONE if ratio is None else f"{ratio:.2f}{TIMES}"
    if unit == "ms":
        figures = f"{_ms(mine)} ÷ {_ms(theirs)} = {shown}"
    else:
        figure = _cpu if unit == "s" else _rate
        figures = f"{figure(mine)} ÷ {figure(theirs)} {unit} = {shown}"
    return Check(what, figures, f"{sign} {bound:g}{TIMES}", _status(ratio, sign, bound))


#: The pgbench run durable_jobs' drain with 1 worker process is held against: the
#: queue at 10 jobs per statement, the batch a worker at concurrency 10 claims.
QUEUE = "queue_10"
QUEUE_TEXT = "the pgbench queue (10 jobs per statement, 1 client)"


def checks(results: dict[str, Any]) -> list[Check]:
    """Every target of the product, against this run's figures."""
    dj, found = "durable_jobs_pg", []
    found.append(
        ratio_check(
            f"Drain, 1 worker process: durable_jobs ÷ {QUEUE_TEXT}",
            value(results, dj, "drain_1"),
            pgbench_value(results, 1, QUEUE, "rate"),
            "≥",
            0.60,
            "jobs/s",
        )
    )
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
    found.append(pickup_check(results))
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
    found += cpu_checks(results)
    found += scale_checks(results)
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
    return found


def pickup_check(results: dict[str, Any]) -> Check:
    """Pickup latency p50 no worse than Celery's on Redis (whose broker writes nothing to
    disk), or the miss no more than what one durable write costs after the same idle
    spacing, measured in the same run: the claim's own commit."""
    mine = value(results, "durable_jobs_pg", "latency", "p50_ms")
    celery = value(results, "celery_redis", "latency", "p50_ms")
    write = value(results, "durable_jobs_pg", "latency", "idle_write_p50_ms")
    what = f"Pickup latency p50: durable_jobs ÷ {label(results, 'celery_redis')}"
    target = f"≤ 1{TIMES}, or the miss ≤ one durable write after the same idle spacing"
    if mine is None or not celery:
        return Check(what, NONE, target, NOT_MEASURED)
    figures = f"{_ms(mine)} ÷ {_ms(celery)} = {mine / celery:.2f}{TIMES}"
    if write is not None:
        figures += f"; the miss {_ms(max(mine - celery, 0))}, one durable write {_ms(write)}"
    held = mine <= celery or (write is not None and mine - celery <= write)
    return Check(what, figures, target, PASS if held else MISSED)


def cpu_checks(results: dict[str, Any]) -> list[Check]:
    """durable_jobs' worker processes at most a fifth of each Python peer's CPU per job,
    and its database at most 1.5 times what the pgbench queue costs it, with as many
    clients as durable_jobs has worker processes."""
    dj, found = "durable_jobs_pg", []
    for workers in (1, 2):
        drain = f"drain_{workers}"
        for peer in PEERS:
            found.append(
                ratio_check(
                    f"Worker CPU per 1,000 drained jobs, {processes(workers)}: "
                    f"durable_jobs ÷ {label(results, peer)}",
                    value(results, dj, drain, "worker_cpu_per_1000"),
                    value(results, peer, drain, "worker_cpu_per_1000"),
                    "≤",
                    0.2,
                    "s",
                )
            )
    for workers in (1, 2):
        clients = "1 client" if workers == 1 else f"{workers} clients"
        found.append(
            ratio_check(
                f"Database CPU per 1,000 drained jobs, {processes(workers)}: durable_jobs ÷ "
                f"the pgbench queue (10 jobs per statement, {clients})",
                value(results, dj, f"drain_{workers}", "db_cpu_per_1000"),
                pgbench_value(results, workers, QUEUE, "db_cpu_per_1000"),
                "≤",
                1.5,
                "s",
            )
        )
    return found


def scale_checks(results: dict[str, Any]) -> list[Check]:
    """The flat cost and memory targets, from ``benchmarks/scale.py``."""
    scale = results.get("scale", {}).get("data") or {}
    flat_cost = scale.get("flat_cost") or {}
    rss = scale.get("memory") or {}
    flat, memory = flat_cost.get("ratio"), rss.get("ratio")
    return [
        Check(
            "Flat cost: claim rate on a full table ÷ on an empty one (scale.py)",
            NONE
            if flat is None
            else f"{_rate(flat_cost.get('full_rate'))} ÷ {_rate(flat_cost.get('empty_rate'))} "
            f"jobs/s = {flat:.2f}",
            "≥ 0.80",
            _status(flat, "≥", 0.80),
        ),
        Check(
            "Memory: worker RSS after all jobs ÷ after the first ones (scale.py)",
            NONE
            if memory is None
            else f"{rss.get('rss_after_all_kb', 0):,} ÷ {rss.get('rss_after_first_kb', 0):,} kB "
            f"= {memory:.2f}",
            "≤ 1.10",
            _status(memory, "≤", 1.10),
        ),
    ]


def references(results: dict[str, Any]) -> list[str]:
    """Ratios worth reading beside the targets, that are not targets themselves."""
    mine = value(results, "durable_jobs_pg", "drain_1")
    ceiling = pgbench_value(results, 1, "claim_10", "rate")
    if mine is None or not ceiling:
        return []
    return [
        "Drain, 1 worker process: durable_jobs ÷ the pgbench claim-and-ack ceiling "
        f"(10 jobs per statement, 1 client): {_rate(mine)} ÷ {_rate(ceiling)} jobs/s = "
        f"{mine / ceiling:.2f}{TIMES} (not a target)"
    ]


def processes(workers: int) -> str:
    return f"{workers} worker process{'es' if workers > 1 else ''}"


# ================================================================================================
# Markdown
# ================================================================================================


def _cell(results: dict[str, Any], system: str, name: str, key: str = "rate") -> str:
    return _entry_cell(measurement(results, system, name), key)


def _entry_cell(entry: dict[str, Any] | None, key: str = "rate") -> str:
    """A figure of a measurement's result, or what became of the measurement."""
    if entry is None:
        return NONE
    if "not_supported" in entry:
        return "n/a"
    if "error" in entry:
        partial = entry.get("partial_rate")
        until = f" (≈{partial:,.0f} until then)" if partial else ""
        return f"failed{until}: {_short(entry['error'])}"
    found = entry.get(key)
    return NONE if found is None else _rate(found)


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
            lines += [
                f"| {text} | n/a | n/a | {_entry_cell(one)} | {_entry_cell(two)} | n/a |"
                for key, text, one, two in drain_rows(results)
                if key == system
            ]
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


def cpu_table(results: dict[str, Any]) -> list[str]:
    """The headline: each drain's CPU per 1,000 jobs, worker processes / database,
    beside its rate."""
    lines = [
        "| System | Drain, 1 worker process (jobs/s) "
        "| CPU per 1,000 jobs (s), 1 worker process: workers / database "
        "| Drain, 2 worker processes (jobs/s) "
        "| CPU per 1,000 jobs (s), 2 worker processes: workers / database |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    for system, name, *drains in drain_rows(results):
        cells = [f"**{name}**" if system.startswith("durable_jobs") else name]
        for entry in drains:
            cells += [_entry_cell(entry), _cpu_cell(entry)]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def _cpu_cell(entry: dict[str, Any] | None) -> str:
    if entry is None or "error" in entry or "not_supported" in entry:
        return NONE
    database = "n/a" if _serverless(entry) else _cpu(entry.get("db_cpu_per_1000"))
    return f"{_cpu(entry.get('worker_cpu_per_1000'))} / {database}"


def _serverless(entry: dict[str, Any]) -> bool:
    """Whether the system ran without a database server (SQLite): no database figure."""
    return "db_cpu_s" in entry and entry["db_cpu_s"] is None


#: (figure, drain, label) of each row of the CPU ratios.
CPU_RATIO_ROWS = (
    ("worker_cpu_per_1000", 1, "Worker processes, 1 worker process"),
    ("db_cpu_per_1000", 1, "Database, 1 worker process"),
    ("worker_cpu_per_1000", 2, "Worker processes, 2 worker processes"),
    ("db_cpu_per_1000", 2, "Database, 2 worker processes"),
)


def cpu_ratios(results: dict[str, Any]) -> list[str]:
    """durable_jobs (PostgreSQL)'s CPU per 1,000 drained jobs divided by each peer's,
    and by the pgbench queue's (with as many clients as worker processes)."""
    dj = "durable_jobs_pg"
    against = [system for system in PEERS if system in results["systems"]]
    queue = "pgbench" in results["systems"]
    if dj not in results["systems"] or not (against or queue):
        return []
    heads = [label(results, system) for system in against]
    if queue:
        heads.append("the pgbench queue")
    lines = [
        f"{label(results, dj)}'s CPU per 1,000 drained jobs divided by each system's "
        "(below 1: durable_jobs uses less; the pgbench queue at 10 jobs per statement, "
        "with as many clients as worker processes):",
        "",
        "| CPU per 1,000 drained jobs | " + " | ".join(f"÷ {head}" for head in heads) + " |",
        "| --- |" + " ---: |" * len(heads),
    ]
    for key, workers, text in CPU_RATIO_ROWS:
        ours = value(results, dj, f"drain_{workers}", key)
        theirs = [value(results, system, f"drain_{workers}", key) for system in against]
        if queue:
            theirs.append(pgbench_value(results, workers, QUEUE, key))
        cells = [_times(ours, other) for other in theirs]
        if queue and key == "worker_cpu_per_1000":
            cells[-1] = "n/a"  # the pgbench client is no worker: only the database compares
        lines.append(f"| {text} | " + " | ".join(cells) + " |")
    return lines


def _times(ours: float | None, theirs: float | None) -> str:
    return NONE if ours is None or not theirs else f"{ours / theirs:.2f}{TIMES}"


def drain_details(results: dict[str, Any]) -> list[str]:
    lines = [
        "| System | Worker processes | First job started (s) | Last job finished (s) "
        "| jobs/s, first start → last finish | Workers stopped (s) "
        "| 10 % → 90 % done (s) | CPU, whole drain (s): workers / database "
        "| Load average (1 min) |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
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
            database = "n/a" if _serverless(entry) else _cpu(entry.get("db_cpu_s"))
            lines.append(
                f"| {label(results, system)} | {workers} | {seconds(entry, 'startup_s')} "
                f"| {seconds(entry, 'to_last_finish_s')} "
                f"| {NONE if steady is None else f'{steady:,.0f}'} | {seconds(entry, 'wall_s')} "
                f"| {seconds(entry, 'cpu_window_s')} "
                f"| {_cpu(entry.get('worker_cpu_s'))} / {database} "
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
        cells = [_times(ours, value(results, system, name, key)) for system in against]
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


CPU_NOTE = (
    "CPU time per 1,000 drained jobs, in seconds, of the worker processes (each with "
    "the processes it forks; for pgbench, the pgbench client) and of the database "
    "server (every PostgreSQL process, redis-server for Celery, mariadbd for MariaDB; "
    "SQLite has no server: its work is in the worker processes' figure), read from "
    "`/proc` every 20 ms. A drain's figure covers the moments 10 % to 90 % of its jobs "
    "were done (interpolated between polls of the done count every 0.2 s), leaving out "
    "start-up and the tail; pgbench's cover its whole run. On a shared machine this "
    "moves much less than the rates do:"
)


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
    lines += ["", CPU_NOTE, "", *cpu_table(results), ""]
    if ratios := cpu_ratios(results):
        lines += [*ratios, ""]
    lines += ["Throughput and pickup latency:", "", *results_table(results), ""]
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
    lines += [f"- {reference}" for reference in references(results)]
    if chart:
        lines += [
            "",
            f"![CPU per drained job, drain, enqueue and pickup latency of each system]({chart})",
        ]
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
    """(label, figures) per row of the chart, top to bottom: one per drain row (pgbench
    gives one per variant), with the enqueue and latency figures of the systems."""
    rows = []
    for system, name, one, two in drain_rows(results):
        figures: dict[str, float | None] = {
            "drain_1": _figure(one, "rate"),
            "drain_2": _figure(two, "rate"),
            "worker_cpu_1": _figure(one, "worker_cpu_per_1000"),
            "db_cpu_1": _figure(one, "db_cpu_per_1000"),
        }
        if system != "pgbench":
            figures.update(
                enqueue_single=value(results, system, "enqueue_single"),
                enqueue_bulk=value(results, system, "enqueue_bulk"),
                p50=value(results, system, "latency", "p50_ms"),
                p95=value(results, system, "latency", "p95_ms"),
            )
        rows.append((name.replace(" per statement", "/statement"), figures))
    return rows


PANELS = (
    (
        "CPU per 1,000 drained jobs, 1 worker process (s, lower is better)",
        (("worker_cpu_1", "worker processes"), ("db_cpu_1", "database")),
    ),
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
    """A panel of horizontal bars per entry of PANELS, one row per system, on log scales
    (the figures span three orders of magnitude); the figure is written beside each bar."""
    import math

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = chart_rows(results)
    figure, axes = plt.subplots(1, len(PANELS), figsize=(21, 0.55 * len(rows) + 2.6), sharey=True)
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
                text = "n/a" if not found else f"{found:.3g}" if found < 10 else f"{found:,.0f}"
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
