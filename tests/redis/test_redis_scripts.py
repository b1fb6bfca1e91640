"""reference._redis_scripts: key naming and the scripts' identities."""

from __future__ import annotations

import hashlib

import pytest
from redis.crc import key_slot

from reference._redis_scripts import (
    BEGIN_CALL,
    DELETE,
    DROP,
    FREEZE,
    MARK_INCOMPLETE,
    PUT,
    RETIRE,
    rollout_keys,
    validate_namespace,
)

SCRIPTS = [PUT, MARK_INCOMPLETE, BEGIN_CALL, FREEZE, DROP, RETIRE, DELETE]


class TestRolloutKeys:
    @pytest.mark.parametrize("rollout_id", ["r", "Run.1", "a-b_c.d", "x" * 200])
    def test_every_key_of_a_rollout_is_in_one_slot(self, rollout_id: str) -> None:
        """The meta, entries and intents keys share the rollout id as their hash tag."""
        keys = rollout_keys("ns", rollout_id)
        assert len(set(keys)) == 3
        assert {key_slot(key.encode()) for key in keys} == {key_slot(rollout_id.encode())}

    def test_namespaces_and_ids_never_collide(self) -> None:
        """Different namespaces or ids never name the same key."""
        names = {k for ns in ("a", "a:b") for r in ("b", "b.c", "c") for k in rollout_keys(ns, r)}
        assert len(names) == 2 * 3 * 3


class TestValidateNamespace:
    @pytest.mark.parametrize("namespace", ["tokcap", "a:b", "x" * 100])
    def test_accepts_plain_names(self, namespace: str) -> None:
        """A non-empty name of at most 100 characters without braces is accepted unchanged."""
        assert validate_namespace(namespace) == namespace

    @pytest.mark.parametrize("namespace", ["", "{a}", "a}", "x" * 101])
    def test_refuses_names_that_break_the_tag(self, namespace: str) -> None:
        """An empty, too long or braced namespace is refused, saying what was seen."""
        with pytest.raises(ValueError, match=r"got .* characters\)"):
            validate_namespace(namespace)

    def test_refuses_what_is_not_a_string(self) -> None:
        """A namespace that is not a str is refused, naming the type seen."""
        with pytest.raises(TypeError, match="got int"):
            validate_namespace(3)


class TestScripts:
    def test_each_script_is_named_by_the_sha1_of_its_source(self) -> None:
        """Every script carries the SHA1 EVALSHA names it by, and the names are distinct."""
        for script in SCRIPTS:
            assert script.sha == hashlib.sha1(script.source.encode()).hexdigest()
        assert len({s.name for s in SCRIPTS}) == len({s.sha for s in SCRIPTS}) == len(SCRIPTS)
