"""The multi-worker launcher and the ports its servers bind: every worker's output read together, a failed worker
stopping the cluster at once, a port taken before a worker binds it, IPv6 loopback, and the data service binding
port 0 (helpers/scale/multi_worker.py, helpers/scale/data_service.py, helpers/setup/processes.py)."""
from __future__ import annotations

import os
import subprocess
import time

import pytest

from tests.conftest import run_python


# ---------------------------------------------------------------- the multi-worker launcher reads every worker


REPORT = 'print(json.dumps({"index": index, "replicas": 2, "steps": 1, "samples": 8, "loss": [0.5], ' \
         '"weights_sha256": "same"}))'
PRELUDE = "import json, os, sys, time\nfrom pathlib import Path\n" \
          "index = json.loads(os.environ['TF_CONFIG'])['task']['index']\nflag = Path(sys.argv[1])\n"


@pytest.fixture
def fake_workers(monkeypatch, tmp_path):
    """Make `train_on_workers` start `program` (given the worker's TF_CONFIG and a flag file) instead of training."""
    import subprocess
    import sys

    from helpers.scale import multi_worker

    import numpy as np

    from helpers.storage.tfrecord import write_shards

    # The launcher checks the shards before it starts a worker: a small readable split for the fake workers.
    images = np.zeros((8, 28, 28), np.uint8)
    write_shards(zip(images, np.arange(8) % 10), tmp_path, "train", 2, total=8, progress=False)
    real, started = subprocess.Popen, []

    def use(program: str):
        def popen(command, *args, **kwargs):
            started.append(command)
            return real([sys.executable, "-c", PRELUDE + program, str(tmp_path / "flag")], *args, **kwargs)

        monkeypatch.setattr(multi_worker.subprocess, "Popen", popen)
        return started

    return use


def test_a_worker_filling_its_stderr_does_not_stall_the_others(fake_workers, tmp_path):
    """Worker 0 waits for worker 1 (as a collective does) while worker 1 writes 1 MiB to stderr: read one process
    at a time, worker 1 blocked on its full pipe and both waited until the timeout."""
    from helpers.scale.multi_worker import train_on_workers

    fake_workers("if index == 1:\n    sys.stderr.write(('x' * 99 + '\\n') * 10_000); sys.stderr.flush(); "
                 "flag.write_text('done')\nelse:\n    deadline = time.time() + 60\n"
                 "    while not flag.exists() and time.time() < deadline: time.sleep(0.02)\n" + REPORT)
    results = train_on_workers(tmp_path, "train", workers=2, timeout=30)
    assert [r.index for r in results] == [0, 1] and (tmp_path / "flag").exists()


def test_a_failed_worker_stops_the_cluster_at_once_naming_itself(fake_workers, tmp_path):
    from helpers.scale.multi_worker import train_on_workers

    fake_workers("if index == 1:\n    sys.exit('worker 1 broke: no shard for it')\ntime.sleep(600)\n")
    started = time.monotonic()
    with pytest.raises(RuntimeError, match="(?s)worker 1 failed.*no shard for it"):
        train_on_workers(tmp_path, "train", workers=2, timeout=30)
    assert time.monotonic() - started < 25, "the launcher waited for the worker that was waiting for the failed one"


def test_a_port_taken_before_a_worker_binds_it_starts_the_cluster_again(fake_workers, tmp_path, capsys):
    from helpers.scale.multi_worker import train_on_workers

    started = fake_workers("if index == 1 and not flag.exists():\n    flag.write_text('once')\n"   # TF 2.21's words:
                           "    sys.exit('UnknownError: Could not start gRPC server')\n" + REPORT)
    results = train_on_workers(tmp_path, "train", workers=2, timeout=30)
    assert [r.index for r in results] == [0, 1] and len(started) == 4
    assert capsys.readouterr().out.count("every network interface") == 2     # new ports, said again


# ---------------------------------------------------------------- ports: IPv6, and no race with the data service


def _listener(family, host: str):
    import socket

    sock = socket.socket(family, socket.SOCK_STREAM)
    if family == socket.AF_INET6:
        sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
    sock.bind((host, 0))
    sock.listen()
    return sock


def test_a_port_held_only_on_ipv6_loopback_is_taken(monkeypatch):
    import socket

    from helpers.setup import processes

    try:
        held = _listener(socket.AF_INET6, "::1")
    except OSError:
        pytest.skip("this machine has no IPv6 loopback")
    with held:
        port = held.getsockname()[1]
        assert processes.port_is_taken(port)
        offered = iter([port, port, processes._kernel_port()])
        monkeypatch.setattr(processes, "_kernel_port", lambda: next(offered))
        assert processes.free_port() != port
    with _listener(socket.AF_INET, "127.0.0.1") as held:
        assert processes.port_is_taken(held.getsockname()[1])


def test_the_data_service_binds_port_0_and_reports_the_port_it_got(monkeypatch, capsys):
    """A port chosen here and bound later by the child could be taken in between (here: it is, by this test);
    the dispatcher binds port 0 and says which port it got."""
    import socket

    from helpers.scale import data_service
    from helpers.setup.processes import port_is_taken

    with _listener(socket.AF_INET, "0.0.0.0") as taken:
        monkeypatch.setattr(data_service, "free_port", lambda: taken.getsockname()[1], raising=False)
        with data_service.DataServiceCluster(workers=0) as cluster:     # the dispatcher alone, in this process
            assert cluster.port != taken.getsockname()[1] and port_is_taken(cluster.port)
            assert cluster.target == f"grpc://localhost:{cluster.port}"
            assert str(cluster.port) in capsys.readouterr().out
        assert not port_is_taken(cluster.port)   # stopped when the block ended


# ---------------------------------------------------------------- what the servers listen on, said plainly; ports that are not ports


def test_the_data_service_says_it_listens_on_every_interface_and_it_does(capsys):
    from helpers.scale.data_service import DataServiceCluster

    with DataServiceCluster(workers=1) as cluster:   # the dispatcher in this process, the worker in its own
        pids = [p.pid for p in cluster.children.processes.values()]
        deadline = time.monotonic() + 20
        listening: dict[int, list[str]] = {}
        while time.monotonic() < deadline and len(listening) < len(pids):
            listening = _listening(pids)
            time.sleep(0.2)
        dispatcher = [a for a in _listening([os.getpid()]).get(os.getpid(), [])
                      if a.rsplit(":", 1)[1] == str(cluster.port)]
    printed = capsys.readouterr().out
    assert "every network interface" in printed and str(cluster.port) in printed
    assert set(listening) == set(pids) and dispatcher, (listening, dispatcher)
    listening[os.getpid()] = dispatcher
    for pid, addresses in listening.items():   # the text is true: wildcard addresses, not 127.0.0.1
        assert all(a.rsplit(":", 1)[0] in ("*", "0.0.0.0", "[::]") for a in addresses), (pid, addresses)


def _listening(pids: list[int]) -> dict[int, list[str]]:
    """Local addresses each process listens on, from `ss -ltnp`."""
    out = subprocess.run(["ss", "-ltnpH"], capture_output=True, text=True).stdout
    found: dict[int, list[str]] = {}
    for line in out.splitlines():
        for pid in pids:
            if f"pid={pid}," in line:
                found.setdefault(pid, []).append(line.split()[3])
    return found


def test_a_taken_port_is_named_as_taken():
    import socket

    with socket.socket() as s:
        s.bind(("0.0.0.0", 0))
        s.listen()
        port = s.getsockname()[1]
        done = run_python(f"""
            import sys
            sys.argv = ["helpers.scale.data_service", "dispatcher", "--port", "{port}"]
            import runpy
            runpy.run_module("helpers.scale.data_service", run_name="__main__")
        """, timeout=60)
    assert done.returncode != 0 and f"port {port}: another process is using it" in done.stderr


@pytest.mark.parametrize("port", [True, -1, 65536, 1.5])
def test_port_is_taken_names_a_port_that_is_not_one(port):
    from helpers.setup.processes import port_is_taken
    with pytest.raises(ValueError, match="TCP port"):
        port_is_taken(port)
