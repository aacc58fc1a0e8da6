"""LatestWrites: one queued write per key, the latest; new keys before updates; dropped keys
never written; everything queued is written by shutdown."""

from __future__ import annotations

import threading

from gpucarve.kube.scheduler.status_writer import LatestWrites


class Gate:
    """A write function that holds its first write until released, recording every write."""

    def __init__(self) -> None:
        self.written: list[tuple[str, str]] = []
        self.first = threading.Event()
        self.go = threading.Event()

    def __call__(self, key: str, value: str) -> None:
        if not self.first.is_set():
            self.first.set()
            self.go.wait(10)
        self.written.append((key, value))


def test_a_key_changed_again_before_its_turn_is_written_once_with_its_latest_value() -> None:
    gate = Gate()
    w = LatestWrites(gate, workers=1)
    w.offer("busy", "x", fresh=True)
    assert gate.first.wait(10)  # the one thread is now held inside a write
    for i in range(100):
        w.offer("a", f"a{i}", fresh=False)
    assert w.backlog == 1
    gate.go.set()
    w.shutdown()
    assert gate.written == [("busy", "x"), ("a", "a99")]


def test_new_keys_go_before_updates_and_dropped_keys_are_not_written() -> None:
    gate = Gate()
    w = LatestWrites(gate, workers=1)
    w.offer("busy", "x", fresh=True)
    assert gate.first.wait(10)
    w.offer("old1", "changed", fresh=False)
    w.offer("old2", "changed", fresh=False)
    w.offer("new1", "first reason", fresh=True)
    w.offer("gone", "first reason", fresh=True)
    w.offer("new2", "first reason", fresh=True)
    w.drop("gone")
    w.offer("old2", "changed again", fresh=False)
    gate.go.set()
    w.shutdown()
    assert [k for k, _ in gate.written] == ["busy", "new1", "new2", "old1", "old2"]
    assert ("old2", "changed again") in gate.written
