"""Concurrent histories of a store and their judgement against the contract's sequential model.

``events`` is one logged operation; ``record`` runs operations in spawned workers and logs
each one's invocation and completion on a clock every process shares; ``model`` is the
contract as a sequential state machine; ``checker`` decides whether a history has a legal
linearization (ok, illegal or unknown) and names the anomaly with a minimal witness;
``timeline`` draws a history as one lane per worker.
"""
