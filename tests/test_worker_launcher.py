"""The multi-worker launcher and the ports its servers bind: every worker's output read together, a failed worker
stopping the cluster at once, a port taken before a worker binds it, IPv6 loopback, and the data service binding
port 0 (helpers/scale/multi_worker.py, helpers/scale/data_service.py, helpers/setup/processes.py)."""
from __future__ import annotations

import time

import pytest


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
