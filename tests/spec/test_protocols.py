"""Tests of tokcap_spec.protocols: the sink and source shapes and per-process installation."""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Iterable

import pytest

from tokcap_spec.protocols import (
    CallIntentSink,
    RetiringSource,
    TokenCaptureSnapshot,
    TokenSink,
    TokenSource,
    install_token_sink,
    install_token_source,
    installed_token_sink,
    installed_token_source,
    protocol_methods,
    protocol_problems,
)
from tokcap_spec.records import TokenEntry


class Sink:
    async def put(self, entry: TokenEntry) -> None:
        pass

    async def mark_incomplete(self, rollout_id: str, model_call_id: str = "") -> None:
        pass

    async def close(self) -> None:
        pass


class Source:
    async def freeze(self, rollout_id: str) -> TokenCaptureSnapshot:
        return TokenCaptureSnapshot(rollout_id)

    async def drop(self, rollout_id: str, *, snapshot_id: str, version: int) -> bool:
        return False

    async def close(self) -> None:
        pass


class SinkWithoutMark:
    async def put(self, entry: TokenEntry) -> None:
        pass

    async def close(self) -> None:
        pass


class SinkWithSyncPut(Sink):
    def put(self, entry: TokenEntry) -> None:  # type: ignore[override]
        pass


class SinkWithDataClose(Sink):
    close = 3  # type: ignore[assignment]


class Extensions:
    async def begin_call(self, rollout_id: str, model_call_id: str) -> None:
        pass

    async def retire(self, rollout_ids: Iterable[str]) -> None:
        pass

    async def delete(self, rollout_ids: Iterable[str]) -> None:
        pass


def entry(call: str) -> TokenEntry:
    return TokenEntry(rollout_id="r1", model_call_id=call)


class TestTokenCaptureSnapshot:
    def test_snapshot_is_immutable(self) -> None:
        """Assigning a snapshot field raises (SHAPE-3)."""
        snapshot = TokenCaptureSnapshot("r1", snapshot_id="s", version=1)
        with pytest.raises(dataclasses.FrozenInstanceError):
            snapshot.version = 2  # type: ignore[misc]

    def test_entries_become_a_tuple(self) -> None:
        """Entries given as a list are held as a tuple, so they cannot be appended to."""
        entries = [entry("a")]
        snapshot = TokenCaptureSnapshot("r1", entries)  # type: ignore[arg-type]
        entries.append(entry("b"))
        assert isinstance(snapshot.entries, tuple)
        assert [e.model_call_id for e in snapshot.entries] == ["a"]

    def test_defaults_are_an_empty_clean_snapshot(self) -> None:
        """A snapshot built from an id alone is empty, clean and at version 0."""
        snapshot = TokenCaptureSnapshot("r1")
        assert (snapshot.entries, snapshot.incomplete, snapshot.snapshot_id, snapshot.version) == (
            (),
            False,
            "",
            0,
        )

    def test_entry_for_finds_by_call_id(self) -> None:
        """entry_for returns the entry of a call id, or None for an unknown one."""
        first, second = entry("a"), entry("b")
        snapshot = TokenCaptureSnapshot("r1", (first, second))
        assert snapshot.entry_for("b") is second
        assert snapshot.entry_for("c") is None


class TestProtocolMethods:
    @pytest.mark.parametrize(
        ("protocol", "names"),
        [
            (TokenSink, ("put", "mark_incomplete", "close")),
            (TokenSource, ("freeze", "drop", "close")),
            (CallIntentSink, ("begin_call",)),
            (RetiringSource, ("retire", "delete")),
        ],
    )
    def test_lists_each_protocol_method_in_order(
        self, protocol: type, names: tuple[str, ...]
    ) -> None:
        """Each protocol requires exactly its documented methods, all coroutines (SHAPE-1)."""
        assert protocol_methods(protocol) == names
        for name in names:
            assert inspect.iscoroutinefunction(getattr(protocol, name))

    def test_drop_takes_snapshot_and_version_by_keyword(self) -> None:
        """drop's snapshot_id and version are keyword-only (SHAPE-2)."""
        parameters = inspect.signature(TokenSource.drop).parameters
        for name in ("snapshot_id", "version"):
            assert parameters[name].kind is inspect.Parameter.KEYWORD_ONLY

    def test_mark_incomplete_call_id_defaults_to_empty(self) -> None:
        """mark_incomplete's model_call_id defaults to the empty string (MASK-6)."""
        assert (
            inspect.signature(TokenSink.mark_incomplete).parameters["model_call_id"].default == ""
        )


class TestProtocolProblems:
    def test_conforming_objects_have_no_problems(self) -> None:
        """A structural sink, source and extension object satisfy their protocols (SHAPE-1)."""
        assert protocol_problems(Sink(), TokenSink) == []
        assert protocol_problems(Source(), TokenSource) == []
        assert protocol_problems(Extensions(), CallIntentSink) == []
        assert protocol_problems(Extensions(), RetiringSource) == []
        assert isinstance(Sink(), TokenSink)
        assert isinstance(Source(), TokenSource)

    def test_missing_method_is_named(self) -> None:
        """A missing method is reported by name (SHAPE-1)."""
        assert protocol_problems(SinkWithoutMark(), TokenSink) == ["mark_incomplete() is missing"]

    def test_sync_method_is_named(self) -> None:
        """A plain def method is reported as not a coroutine function (SHAPE-1)."""
        assert protocol_problems(SinkWithSyncPut(), TokenSink) == [
            "put() is not a coroutine function (declare it with 'async def')"
        ]

    def test_non_callable_member_is_named(self) -> None:
        """A data attribute in a method's place is reported as not callable (SHAPE-1)."""
        assert protocol_problems(SinkWithDataClose(), TokenSink) == ["close is not callable"]

    def test_every_problem_is_listed(self) -> None:
        """An object lacking everything gets one line per missing method."""
        assert len(protocol_problems(object(), TokenSource)) == 3


@pytest.mark.usefixtures("clean_install")
class TestInstallTokenSink:
    def test_installed_sink_is_returned(self) -> None:
        """An installed sink is what installed_token_sink returns."""
        sink = Sink()
        install_token_sink(sink)
        assert installed_token_sink() is sink

    def test_none_uninstalls(self) -> None:
        """Installing None leaves no sink installed."""
        install_token_sink(Sink())
        install_token_sink(None)
        assert installed_token_sink() is None

    def test_object_lacking_a_method_is_refused(self) -> None:
        """A sink without mark_incomplete raises TypeError naming its type and the method."""
        with pytest.raises(TypeError, match=r"SinkWithoutMark.*mark_incomplete\(\) is missing"):
            install_token_sink(SinkWithoutMark())  # type: ignore[arg-type]
        assert installed_token_sink() is None

    def test_sync_method_is_refused(self) -> None:
        """A sink with a plain def put is refused with a TypeError naming put."""
        with pytest.raises(TypeError, match=r"put\(\) is not a coroutine"):
            install_token_sink(SinkWithSyncPut())  # type: ignore[arg-type]

    def test_refused_sink_keeps_the_previous_one(self) -> None:
        """A refused install leaves the earlier sink installed."""
        sink = Sink()
        install_token_sink(sink)
        with pytest.raises(TypeError):
            install_token_sink(SinkWithoutMark())  # type: ignore[arg-type]
        assert installed_token_sink() is sink


@pytest.mark.usefixtures("clean_install")
class TestInstallTokenSource:
    def test_installed_source_is_returned(self) -> None:
        """An installed source is what installed_token_source returns, apart from the sink."""
        source = Source()
        install_token_source(source)
        assert installed_token_source() is source
        assert installed_token_sink() is None

    def test_object_lacking_a_method_is_refused(self) -> None:
        """A sink is not a source: installing it as one names the missing freeze."""
        with pytest.raises(TypeError, match=r"freeze\(\) is missing"):
            install_token_source(Sink())  # type: ignore[arg-type]
        assert installed_token_source() is None
