"""The timeline page: one lane per process, one bar per operation, the witness outlined."""

from __future__ import annotations

from pathlib import Path

from conformance._history.checker import check_history
from conformance._history.events import Event
from conformance._history.model import Rules
from conformance._history.timeline import render, write_timeline

HISTORY = [
    Event("writer-0", 0, "put", "r", 0, 10, "ok", call_id="a", digest="da"),
    Event("writer-1", 0, "put", "r", 5, 15, "ok", call_id="b", digest="db"),
    Event("freezer-0", 0, "freeze", "r", 20, 30, "ok", entries=(("a", "da"),), result=("s", 1)),
]


class TestRender:
    def test_one_lane_per_process_and_one_bar_per_operation(self) -> None:
        """Every lane is labelled once and every operation is one bar."""
        page = render(HISTORY, check_history(HISTORY, Rules()), "run")
        for lane in ("writer-0", "writer-1", "freezer-0"):
            assert page.count(f">{lane}</text>") == 1
        assert page.count("<rect") == len(HISTORY)

    def test_witness_is_outlined_and_listed(self) -> None:
        """The lost put and the freeze that missed it are outlined and the anomaly is listed."""
        verdict = check_history(HISTORY, Rules())
        assert verdict.names == ["lost-ack"]
        page = render(HISTORY, verdict, "run")
        assert page.count('stroke="#d00000"') == 2
        assert "lost-ack (FREEZE-5)" in page

    def test_page_is_self_contained(self, tmp_path: Path) -> None:
        """The written page loads nothing from elsewhere."""
        path = write_timeline(
            tmp_path / "deep" / "t.html", HISTORY, check_history([], Rules()), "x"
        )
        text = path.read_text(encoding="utf-8")
        assert "http://www.w3.org/2000/svg" in text
        assert "src=" not in text
        assert "<link" not in text


def test_timeline_holds_no_secret(tmp_path: Path) -> None:
    """An error quoting a kwarg value of the run is masked in the written page."""
    from conformance._secrecy import keep

    keep({"password": "timeline-secret-pw"})
    failing = Event(
        "writer-0", 1, "put", "r", 1, 2, "fail", call_id="c", error="AUTH timeline-secret-pw"
    )
    events = [*HISTORY, failing]
    path = write_timeline(tmp_path / "t.html", events, check_history(events, Rules()), "run")
    page = path.read_text(encoding="utf-8")
    assert "timeline-secret-pw" not in page
    assert "AUTH ***" in page
