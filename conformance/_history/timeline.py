"""A concurrent history drawn as a self-contained HTML page: one lane per process.

Each operation is a bar from its invocation to its completion, coloured by kind; freezes and
drops stand out, and the operations of the witness are outlined in red and listed below the
drawing. Hovering a bar shows what the operation returned. The page needs no network, and
holds none of the run's secrets.
"""

from __future__ import annotations

import html
from collections.abc import Iterable
from pathlib import Path

from conformance._history.checker import Verdict
from conformance._history.events import Event
from conformance._secrecy import scrub

__all__ = ["render", "write_timeline"]

_COLOURS = {
    "put": "#8fb8de",
    "mark": "#f2c14e",
    "begin": "#b8b8b8",
    "freeze": "#3a7d44",
    "drop": "#7b2cbf",
}
_WIDTH = 1400
_LANE = 28


def render(events: Iterable[Event], verdict: Verdict, title: str) -> str:
    """Return the page for ``events``, highlighting every anomaly's witness."""
    ordered = sorted(events, key=lambda event: event.invoke)
    if not ordered:
        return f"<!doctype html><title>{html.escape(title)}</title><p>empty history</p>"
    witness = {(e.lane, e.index) for a in verdict.anomalies for e in a.witness}
    lanes = sorted({event.lane for event in ordered})
    start = ordered[0].invoke
    end = max(event.complete or event.invoke for event in ordered)
    scale = (_WIDTH - 160) / max(1, end - start)
    height = _LANE * len(lanes) + 40
    bars = []
    for row, lane in enumerate(lanes):
        y = 20 + row * _LANE
        bars.append(f'<text x="4" y="{y + 15}" font-size="12">{html.escape(lane)}</text>')
    for event in ordered:
        y = 20 + lanes.index(event.lane) * _LANE
        x = 150 + (event.invoke - start) * scale
        finish = event.complete if event.complete is not None else end
        width = max(2.0, (finish - event.invoke) * scale)
        marked = (event.lane, event.index) in witness
        stroke = ' stroke="#d00000" stroke-width="3"' if marked else ""
        opacity = "1" if event.outcome == "ok" else "0.45"
        bars.append(
            f'<rect x="{x:.1f}" y="{y + 3}" width="{width:.1f}" height="{_LANE - 8}" '
            f'fill="{_COLOURS[event.kind]}" opacity="{opacity}"{stroke}>'
            f"<title>{html.escape(event.describe())}</title></rect>"
        )
    findings = "".join(
        f"<pre>{html.escape(anomaly.describe())}</pre>" for anomaly in verdict.anomalies
    )
    legend = " ".join(
        f'<span style="background:{colour};padding:0 6px">{kind}</span>'
        for kind, colour in _COLOURS.items()
    )
    return (
        "<!doctype html><meta charset='utf-8'>"
        f"<title>{html.escape(title)}</title>"
        f"<h1 style='font:16px sans-serif'>{html.escape(title)}: {verdict.outcome}</h1>"
        f"<p style='font:12px sans-serif'>{legend}; faded = raised or never completed; "
        "red outline = witness; hover a bar for its result</p>"
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{_WIDTH}" height="{height}" '
        f'style="font-family:sans-serif">{"".join(bars)}</svg>{findings}'
    )


def write_timeline(path: Path, events: Iterable[Event], verdict: Verdict, title: str) -> Path:
    """Write the page to ``path`` (creating its folder) and return the path."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(scrub(render(events, verdict, title)), encoding="utf-8")
    return path
