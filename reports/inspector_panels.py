"""The inspectors' series as small multiples, one panel per table and unit: a panel never puts
memory in bytes beside CPU in percent, and its axis says what the numbers are.

A column's unit comes from its name, as the inspectors name them (inspector/sources.py and
friends): `*_percent`, `*_bytes`, `memory*`/`mem_*`, `*_rate`, `*_s`; anything else counts.
Long runs are thinned for drawing only (every k-th sample, at most `MAX_POINTS` a series):
a day of 1 s samples stays responsive, and no figure is computed from the thinned series.

A broker's tables list every queue it has, other users' too: where some rows are the test's
own destinations, the rest are drawn hidden, one click away in the legend. Bytes are drawn in
the binary unit that fits the panel's largest value (B, KiB, MiB, GiB, TiB).
"""

from __future__ import annotations

import fnmatch
import math
from collections.abc import Iterable
from typing import Any

import plotly.graph_objects as go

from reports.page import figure

__all__ = ["MAX_POINTS", "inspector_figures", "inspector_panels", "thin", "unit_of"]

MAX_POINTS = 2000
_MAX_TRACES = 40  # per panel: beyond that a legend is no help
_UNITS = {"%": "percent", "bytes": "bytes", "msg/s": "messages per second", "s": "seconds", "count": "count"}
_BYTE_COLUMNS = frozenset({"memory", "size", "disk_free", "disk_free_limit"})


def unit_of(column: str) -> str:
    c = column.lower()
    if c.endswith("_percent"):
        return "%"
    if c.endswith("_bytes") or c in _BYTE_COLUMNS or c.startswith(("memory_", "mem_")):
        return "bytes"
    if c.endswith("_rate"):
        return "msg/s"
    if c.endswith("_s"):
        return "s"
    return "count"


def thin(values: list[Any], max_points: int = MAX_POINTS) -> list[Any]:
    """Every k-th value, so that at most `max_points` remain (the last one always)."""
    if len(values) <= max_points:
        return values
    step = math.ceil(len(values) / max_points)
    kept = values[::step]
    return kept if kept[-1] is values[-1] else [*kept, values[-1]]


def _is_number(text: str) -> bool:
    try:
        float(text)
    except (TypeError, ValueError):
        return False
    return True


def inspector_panels(tables: dict[str, list[dict[str, str]]], destinations: Iterable[str] = ()) -> list[str]:
    """One chart per (table, unit), titled with both, as HTML; `destinations`: the test's own
    (queue, topic...; `%d` for a number), drawn first and alone until others are clicked on."""
    return [figure(fig, title, axis) for title, axis, fig in inspector_figures(tables, destinations)]


_BINARY = ("B", "KiB", "MiB", "GiB", "TiB")


def byte_scale(largest: float) -> tuple[str, float]:
    """The binary unit a byte axis whose largest value is `largest` reads best in, and its size."""
    power = 0
    while power < len(_BINARY) - 1 and largest >= 1024 ** (power + 1):
        power += 1
    return _BINARY[power], float(1024**power)


def _the_tests(group: str, destinations: list[str]) -> bool:
    """Whether a row group (its key columns joined by /) names one of the test's destinations."""
    parts = group.split("/")
    return any(fnmatch.fnmatchcase(part, pattern) for part in parts for pattern in destinations)


def inspector_figures(
    tables: dict[str, list[dict[str, str]]], destinations: Iterable[str] = ()
) -> list[tuple[str, str, go.Figure]]:
    """(title, y-axis title, figure) per table and unit."""
    patterns = [d.replace("%d", "[0-9]*") for d in destinations]
    charts = []
    for name, rows in tables.items():
        if not rows:
            continue
        # By a column's first value written: an inspector leaves a figure it does not know empty.
        numeric = [c for c in rows[0] if c != "timestamp" and _is_number(next((r[c] for r in rows if r[c]), ""))]
        keys = [c for c in rows[0] if c not in numeric and c != "timestamp"]
        groups: dict[str, list[dict[str, str]]] = {}
        for row in rows:
            groups.setdefault("/".join(row[k] for k in keys) or name, []).append(row)
        by_unit: dict[str, list[str]] = {}
        for column in numeric:
            by_unit.setdefault(unit_of(column), []).append(column)
        mine = {g for g in groups if _the_tests(g, patterns)} if len(groups) > 1 else set()
        # The test's own groups first, so that the cap on traces leaves none of them out.
        ordered = sorted(groups.items(), key=lambda item: (item[0] not in mine, item[0]))
        for unit, columns in by_unit.items():
            fig = go.Figure()
            traces = 0
            drawn_groups: set[str] = set()  # those with a trace on the panel
            axis, scale = _UNITS[unit], 1.0
            if unit == "bytes":  # the unit that the rows drawn at first read in
                drawn = [r for g, entries in ordered if not mine or g in mine for r in entries]
                largest = max((float(r[c]) for r in drawn for c in columns if _is_number(r[c])), default=0.0)
                axis, scale = byte_scale(largest)
            for group, entries in ordered:
                shown = thin(entries)
                for column in columns:
                    if traces == _MAX_TRACES:
                        break
                    # An empty cell (a figure the inspector did not know) is a gap in the line, not
                    # a straight ramp drawn across it.
                    y = [float(e[column]) / scale if _is_number(e[column]) else None for e in shown]
                    fig.add_scatter(
                        x=[e["timestamp"] for e in shown],
                        y=y,
                        name=f"{group} {column}" if len(groups) > 1 else column,
                        visible=True if not mine or group in mine else "legendonly",
                    )
                    traces += 1
                    drawn_groups.add(group)
            title = f"Inspector {name} ({unit})"
            if mine:
                others = len(groups) - len(mine)
                legend = len(drawn_groups - mine)
                rest = f"{others} other{'s' if others != 1 else ''}"
                title += ": the test's destinations; " + (
                    f"the broker's {rest} in the legend"
                    if legend == others
                    else f"{legend} of the broker's {rest} in the legend (all of them in the CSV)"
                )
            charts.append((title, axis, fig))
    return charts
