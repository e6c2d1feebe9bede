"""The inspectors' series as small multiples, one panel per table and unit: a panel never puts
memory in bytes beside CPU in percent, and its axis says what the numbers are.

A column's unit comes from its name, as the inspectors name them (inspector/sources.py and
friends): `*_percent`, `*_bytes`, `memory*`/`mem_*`, `*_rate`, `*_s`; anything else counts.
Long runs are thinned for drawing only (every k-th sample, at most `MAX_POINTS` a series):
a day of 1 s samples stays responsive, and no figure is computed from the thinned series.
"""

from __future__ import annotations

import math
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


def inspector_panels(tables: dict[str, list[dict[str, str]]]) -> list[str]:
    """One chart per (table, unit), titled with both, as HTML."""
    return [figure(fig, title, axis) for title, axis, fig in inspector_figures(tables)]


def inspector_figures(tables: dict[str, list[dict[str, str]]]) -> list[tuple[str, str, go.Figure]]:
    """(title, y-axis title, figure) per table and unit."""
    charts = []
    for name, rows in tables.items():
        if not rows:
            continue
        numeric = [c for c in rows[0] if c != "timestamp" and _is_number(rows[0][c])]
        keys = [c for c in rows[0] if c not in numeric and c != "timestamp"]
        groups: dict[str, list[dict[str, str]]] = {}
        for row in rows:
            groups.setdefault("/".join(row[k] for k in keys) or name, []).append(row)
        by_unit: dict[str, list[str]] = {}
        for column in numeric:
            by_unit.setdefault(unit_of(column), []).append(column)
        for unit, columns in by_unit.items():
            fig = go.Figure()
            traces = 0
            for group, entries in sorted(groups.items()):
                shown = thin(entries)
                for column in columns:
                    if traces == _MAX_TRACES:
                        break
                    points = [(e["timestamp"], float(e[column])) for e in shown if _is_number(e[column])]
                    fig.add_scatter(
                        x=[t for t, _ in points],
                        y=[v for _, v in points],
                        name=f"{group} {column}" if len(groups) > 1 else column,
                    )
                    traces += 1
            charts.append((f"Inspector {name} ({unit})", _UNITS[unit], fig))
    return charts
