"""Writes that survive a power cut: the bytes reach the disk before their name, the name after
(helpers/storage/files.py), and a PNG export flushes once, before its label file (helpers/storage/png_folder.py)."""
from __future__ import annotations

import os
from pathlib import Path

import pytest


# ---------------------------------------------------------------- writes that survive a power cut


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="names a file descriptor through /proc")
def test_a_write_reaches_the_disk_before_its_name_and_the_name_after(tmp_path, monkeypatch):
    from helpers.storage import files

    target, synced, real = tmp_path / "shard.bin", [], os.fsync

    def fsync(fd):
        synced.append((Path(os.readlink(f"/proc/self/fd/{fd}")), target.exists()))
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    with files.write_then_rename(target) as tmp:
        tmp.write_bytes(b"x" * 1000)
    assert synced == [(tmp, False), (tmp_path, True)], synced     # the bytes before the rename, the folder after
    synced.clear()
    files.atomic_write_bytes(tmp_path / "many.bin", b"y", durable=False)
    assert synced == []


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="names a file descriptor through /proc")
def test_a_png_export_flushes_once_before_its_label_file(tmp_path, monkeypatch):
    import numpy as np

    from helpers.storage import png_folder

    events = []
    monkeypatch.setattr(os, "fsync", lambda fd: events.append(Path(os.readlink(f"/proc/self/fd/{fd}")).name))
    monkeypatch.setattr(os, "sync", lambda: events.append("sync"), raising=False)
    png_folder.export_png_folder(np.zeros((3, 4, 4), np.uint8), np.arange(3), tmp_path, "tr", progress=False)
    assert events.count("sync") == 1
    assert not [e for e in events if e.endswith(".png") or ".png." in e], events     # no flush per image
    label = Path(png_folder.label_file(tmp_path, "tr")).name
    assert any(e.startswith(label) for e in events[events.index("sync"):]), events   # flushed after the PNGs
