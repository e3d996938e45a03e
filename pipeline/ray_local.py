"""A local Ray as a batch run wants it: started without the processes the run never uses, quiet about what
does not concern the run, and stopped without waiting on a process's grace period (`RayExecutor` uses these)."""

from __future__ import annotations

import contextlib
import logging
import os
import subprocess
import threading
from collections.abc import Iterator
from typing import Any


@contextlib.contextmanager
def environment(values: dict[str, str]) -> Iterator[None]:
    """These environment variables set while the block runs (so processes started in it inherit them)."""
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def quiet_ray_startup() -> None:
    """Keep Ray's notice about token authentication off the terminal: it speaks of Ray's own cluster
    security, which `RAY_AUTH_MODE` sets, and says nothing about the run; its level is raised, nothing else.
    Also its warning that a Ray started off the main thread sets no SIGTERM handler (`RayExecutor` starts it
    in a thread on purpose; the ``lwm`` process handles SIGTERM itself, `pipeline.errors.stop_on_sigterm`, and ends
    through Ray's shutdown)."""
    logging.getLogger("ray._private.authentication.authentication_token_setup").setLevel(logging.ERROR)
    worker_log = logging.getLogger("ray._private.worker")
    if not any(isinstance(f, _NoSigtermNotice) for f in worker_log.filters):
        worker_log.addFilter(_NoSigtermNotice())


def stop_monitor_first(ray: Any) -> None:
    """Stop a local Ray's autoscaler monitor before `ray.shutdown` stops the rest.

    Ray's shutdown stops its processes one by one, the GCS before the monitor; the monitor's SIGTERM handler
    then reports its end to the GCS that is gone and hangs until Ray kills it after a one-second grace:
    1.0 s of a 1.4 s shutdown here (Ray 2.60, measured per process type). A one-node local Ray has nothing
    for the autoscaler to do, so it is killed first and Ray's shutdown finds it ended. The handle is Ray's
    private node object; where a Ray version lacks it, nothing is done and the shutdown is Ray's own.
    """
    node = getattr(getattr(getattr(ray, "_private", None), "worker", None), "_global_node", None)
    processes = getattr(node, "all_processes", None)
    if not isinstance(processes, dict):
        return
    for info in processes.get("monitor", ()):
        proc = getattr(info, "process", None)
        if proc is None or proc.poll() is not None:
            continue
        proc.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=5)


# Set to 1 for Ray's whole set of processes at a local start (see `lean_start`).
FULL_START_ENV = "LWM_RAY_FULL_START"


_PATCHING = threading.Lock()  # one start at a time patches Ray's node class (blocks never nest)


def _dashboard_is_minimal() -> bool:
    """Whether this Ray lacks the dashboard's packages (a plain ``pip install ray``): its dashboard agent then
    runs without the module that waits for the dashboard head's address."""
    try:
        from ray._private.utils import get_dashboard_dependency_error

        return get_dashboard_dependency_error() is not None
    except Exception:
        return False


@contextlib.contextmanager
def lean_start(ray: Any) -> Iterator[bool]:
    """While a local Ray starts in this block, leave out the processes of it that a batch run never uses;
    yields whether it does.

    A one-node Ray started by `ray.init` also starts its autoscaler monitor (nothing to scale on one
    machine), a log monitor (it streams the workers' output to the driver, which `log_to_driver=False`
    turns off) and, with the dashboard off, a dashboard head that loads only Ray's usage-statistics module.
    Here they cost 2.3 CPU-seconds in the first seconds of a run, on a machine whose other core is doing the
    run's first tasks, and a bare start takes 3.1 s instead of 4.3 s (Ray 2.60, 2 CPUs). The dashboard head
    is left out only where Ray's dashboard packages are absent: with them (``ray[default]``), the dashboard
    agent's event module asks for the head's address every second until it gets one. `ray start` has a
    switch for the monitor only and `ray.init` none, so the node's parameters are set through Ray's private
    `Node` class; where a Ray version lacks what is changed, nothing is, and the start is Ray's own.
    `LWM_RAY_FULL_START=1` keeps Ray's full set (for a run that wants `ray status` or usage reports).
    """
    node_cls = getattr(getattr(getattr(ray, "_private", None), "node", None), "Node", None)
    if os.environ.get(FULL_START_ENV) == "1" or node_cls is None or not hasattr(node_cls, "start_api_server"):
        yield False
        return
    with _PATCHING:
        original_init, original_api = node_cls.__init__, node_cls.start_api_server
        skip_api = _dashboard_is_minimal()

        def init(self: Any, ray_params: Any, *args: Any, **kwargs: Any) -> None:
            if kwargs.get("head", args[0] if args else False):
                ray_params.no_monitor = True
                ray_params.include_log_monitor = False
            original_init(self, ray_params, *args, **kwargs)

        def api_server(self: Any, *, include_dashboard: bool | None, raise_on_failure: bool) -> None:
            if include_dashboard or not skip_api:  # asked for, or the agent waits for it: Ray's own
                original_api(self, include_dashboard=include_dashboard, raise_on_failure=raise_on_failure)

        node_cls.__init__, node_cls.start_api_server = init, api_server
        try:
            yield True
        finally:
            node_cls.__init__, node_cls.start_api_server = original_init, original_api


class _NoSigtermNotice(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("SIGTERM handler is not set")
