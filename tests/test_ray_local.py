"""The lean local start, on a stand-in for Ray's private node class (the real start is tested in
tests/test_ray_executor.py): which of its switches are set, and that the class is restored."""

from __future__ import annotations

import threading
import types

import pytest

import pipeline.ray_local as ray_local


class FakeParams:
    no_monitor = False
    include_log_monitor = None


def _fake_ray():
    calls: list[str] = []

    class Node:
        def __init__(self, ray_params, head=False, **kwargs):
            self.params, self.head = ray_params, head
            self.start_api_server(include_dashboard=False, raise_on_failure=False)

        def start_api_server(self, *, include_dashboard, raise_on_failure):
            calls.append("api")

    ray = types.SimpleNamespace(_private=types.SimpleNamespace(node=types.SimpleNamespace(Node=Node)))
    return ray, Node, calls


@pytest.mark.parametrize("minimal", [True, False])
def test_the_head_starts_without_monitors_and_without_the_dashboard_head_only_where_it_is_minimal(monkeypatch, minimal):
    ray, node_cls, calls = _fake_ray()
    original = node_cls.__init__, node_cls.start_api_server
    monkeypatch.delenv(ray_local.FULL_START_ENV, raising=False)
    monkeypatch.setattr(ray_local, "_dashboard_is_minimal", lambda: minimal)
    with ray_local.lean_start(ray) as lean:
        head = node_cls(FakeParams(), head=True)
        worker_node = node_cls(FakeParams(), head=False)
    assert lean is True
    assert head.params.no_monitor is True and head.params.include_log_monitor is False
    assert worker_node.params.no_monitor is False and worker_node.params.include_log_monitor is None
    # With the dashboard's packages installed, its agent waits for the head's address: the head is kept.
    assert calls == ([] if minimal else ["api", "api"])
    assert (node_cls.__init__, node_cls.start_api_server) == original


def test_full_start_and_an_exception_leave_the_class_as_it_was(monkeypatch):
    ray, node_cls, calls = _fake_ray()
    original = node_cls.__init__, node_cls.start_api_server
    monkeypatch.setenv(ray_local.FULL_START_ENV, "1")
    with ray_local.lean_start(ray) as lean:
        node = node_cls(FakeParams(), head=True)
    assert lean is False and node.params.no_monitor is False and calls == ["api"]
    monkeypatch.delenv(ray_local.FULL_START_ENV)
    with pytest.raises(RuntimeError), ray_local.lean_start(ray):
        raise RuntimeError("ray.init failed")
    assert (node_cls.__init__, node_cls.start_api_server) == original


def test_two_starts_at_once_take_turns_and_restore_the_class(monkeypatch):
    ray, node_cls, _ = _fake_ray()
    original = node_cls.__init__, node_cls.start_api_server
    monkeypatch.delenv(ray_local.FULL_START_ENV, raising=False)
    inside, release = threading.Event(), threading.Event()

    def first():
        with ray_local.lean_start(ray):
            inside.set()
            release.wait(10)

    t = threading.Thread(target=first)
    t.start()
    inside.wait(10)
    entered = threading.Event()

    def second():
        with ray_local.lean_start(ray):
            entered.set()

    t2 = threading.Thread(target=second)
    t2.start()
    assert not entered.wait(0.3)  # waits for the first start to restore the class
    release.set()
    t.join(10)
    t2.join(10)
    assert entered.is_set()
    assert (node_cls.__init__, node_cls.start_api_server) == original

