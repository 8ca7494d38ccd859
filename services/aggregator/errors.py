"""Why a run fails: raised by the round loop and its profiler/policy client alike."""

from __future__ import annotations


class RunFailed(RuntimeError):
    pass


class EmptyRound(RunFailed):
    """Every selected site missed the deadline: the round is redone, the model unchanged."""


class DependencyDown(RunFailed):
    """The profiler or policy stayed unreachable through every retry."""
