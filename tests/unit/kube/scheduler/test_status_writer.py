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


def test_a_newer_reason_waits_for_the_write_of_the_older_one() -> None:
    """With several workers, a key's second value must not be written while its first is:
    the first could land last and leave the older reason standing."""
    gate = Gate()
    w = LatestWrites(gate, workers=4)
    w.offer("pod", "has 1 of its 3 pods", fresh=True)
    assert gate.first.wait(10)  # one worker is inside the first write, held
    w.offer("pod", "has 2 of its 3 pods", fresh=False)
    w.offer("other", "its own reason", fresh=True)
    for _ in range(200):  # the other key is written meanwhile; the pod's second value is not
        if ("other", "its own reason") in gate.written:
            break
        threading.Event().wait(0.01)
    assert gate.written == [("other", "its own reason")]
    gate.go.set()
    w.shutdown()
    assert [v for k, v in gate.written if k == "pod"] == [
        "has 1 of its 3 pods",
        "has 2 of its 3 pods",
    ]
