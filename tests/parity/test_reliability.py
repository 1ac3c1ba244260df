"""Interrupted exports leave nothing (issue 14): SIGINT/SIGTERM/SIGHUP during `hfexport export`
remove its staging directory and the process dies of the signal; after a SIGKILL the next export
into the same folder removes the dead process's staging directory, never a live export's nor a
directory that is not hfexport's; `--overwrite` keeps the old output until the new one is complete.
Each case runs a real export of a checkpoint big enough to be interrupted mid-write. A full disk
(a small tmpfs) and a read-only destination: one line naming the file (and the bytes), nothing left."""

from __future__ import annotations

import os
import pty
import re
import shutil
import signal
import subprocess
import time
from contextlib import contextmanager
from pathlib import Path

import pytest
from conftest import assert_clean_error, build_tiny_model, cli_env

# ~0.5 GB of bfloat16 weights exported as float32: a second or more of writing.
BIG = dict(vocab_size=65536, hidden_size=2048, intermediate_size=2048, num_hidden_layers=1, num_attention_heads=16,
           num_key_value_heads=4, max_position_embeddings=128, tie_word_embeddings=False)


SMALL = dict(BIG, vocab_size=128, hidden_size=32, intermediate_size=32, num_attention_heads=4, num_key_value_heads=2)


@pytest.fixture(scope="module")
def big_checkpoint(tmp_path_factory) -> Path:
    path, _ = build_tiny_model(tmp_path_factory.mktemp("big") / "ckpt", "llama", BIG, dtype="bfloat16")
    return path


@pytest.fixture(scope="module")
def small_checkpoint(tmp_path_factory) -> Path:
    path, _ = build_tiny_model(tmp_path_factory.mktemp("small") / "ckpt", "llama", SMALL)
    return path


def start_export(hfexport_bin, checkpoint: Path, out: Path, *extra) -> subprocess.Popen:
    return subprocess.Popen([str(hfexport_bin), "export", str(checkpoint), "-o", str(out), *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=cli_env())


def wait_mid_write(proc: subprocess.Popen, parent: Path, min_bytes: int = 16 << 20) -> Path:
    """The staging directory once it holds min_bytes (the export is then writing weights)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"the export ended before it could be interrupted: {proc.communicate()}"
        for d in parent.glob(".*.tmp-*"):
            if sum(f.stat().st_size for f in d.rglob("*") if f.is_file()) >= min_bytes:
                return d
        time.sleep(0.005)
    raise AssertionError("the export never got mid-write")


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP], ids=lambda s: s.name)
def test_signal_removes_the_staging_directory(sig, big_checkpoint, tmp_path, hfexport_bin):
    parent = tmp_path / "exports"
    proc = start_export(hfexport_bin, big_checkpoint, parent / "out")
    wait_mid_write(proc, parent)
    proc.send_signal(sig)
    proc.communicate(timeout=60)
    assert proc.returncode == -sig, f"exit {proc.returncode}, not death by {sig.name}"
    assert list(parent.iterdir()) == []


def children_of(pid: int) -> list[int]:
    kids = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            kids += [int(k) for k in (task / "children").read_text().split()]
        except FileNotFoundError:  # a worker thread that ended while we listed them
            continue
    return kids


def test_sigterm_to_the_export_alone_ends_its_aot_compile(small_checkpoint, tmp_path, hfexport_bin):
    """SIGTERM sent to hfexport only (not its process group) while the --aot compile runs in a
    child Python: the child gets the signal too and is gone before the staging directory is
    removed; hfexport dies of the signal."""
    pytest.importorskip("torch")
    parent = tmp_path / "exports"
    proc = start_export(hfexport_bin, small_checkpoint, parent / "out", "--format", "pt2", "--aot")
    deadline = time.monotonic() + 120
    while not (kids := children_of(proc.pid)):
        assert proc.poll() is None and time.monotonic() < deadline, "the --aot compile never started"
        time.sleep(0.01)
    time.sleep(1.0)  # into the compile
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGTERM
    for kid in kids:
        assert not Path(f"/proc/{kid}").exists() or "zombie" in Path(f"/proc/{kid}/status").read_text(), kid
    assert list(parent.iterdir()) == []


def test_after_sigkill_the_next_export_removes_stale_staging(big_checkpoint, small_checkpoint, tmp_path, hfexport_bin):
    parent = tmp_path / "exports"
    proc = start_export(hfexport_bin, big_checkpoint, parent / "out")
    stale = wait_mid_write(proc, parent)
    proc.kill()
    proc.communicate(timeout=60)
    assert stale.is_dir()  # SIGKILL cannot be caught: the staging directory stays behind
    # A live export's staging directory (this test's own pid) and a directory hfexport did not make.
    live = parent / f".other.tmp-{os.getpid()}"
    live.mkdir()
    (live / ".hfexport-staging").write_text(f"{os.getpid()}\n")
    foreign = parent / f".{stale.name.split('.')[1]}-notes.tmp-{proc.pid}"
    foreign.mkdir()
    small = small_checkpoint
    done = subprocess.run([str(hfexport_bin), "export", str(small), "-o", str(parent / "next")], capture_output=True,
                          text=True, env=cli_env())
    assert done.returncode == 0, done.stderr
    assert not stale.exists()
    assert live.is_dir() and foreign.is_dir()
    assert not (parent / "next" / ".hfexport-staging").exists()


def test_overwrite_keeps_the_old_output_until_the_new_one_is_complete(big_checkpoint, small_checkpoint, tmp_path,
                                                                       hfexport_bin):
    parent = tmp_path / "exports"
    small = small_checkpoint
    first = subprocess.run([str(hfexport_bin), "export", str(small), "-o", str(parent / "out")], capture_output=True,
                           text=True, env=cli_env())
    assert first.returncode == 0, first.stderr
    before = sorted(p.name for p in (parent / "out").iterdir())
    for kill in (lambda p: p.send_signal(signal.SIGINT), lambda p: p.kill()):
        proc = start_export(hfexport_bin, big_checkpoint, parent / "out", "--overwrite")
        wait_mid_write(proc, parent)
        kill(proc)
        proc.communicate(timeout=60)
        assert sorted(p.name for p in (parent / "out").iterdir()) == before
    assert (parent / "out" / "export.json").stat().st_size > 0
    assert '"vocab_size": 128' in (parent / "out" / "config.json").read_text()


@contextmanager
def tmpfs(where: Path, options: str):
    """A tmpfs mounted at `where` for the test (root and mount rights needed, as in CI's container)."""
    where.mkdir(parents=True)
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(where)], capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {proc.stderr.strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", str(where)], check=True)


def test_disk_full_before_writing_names_the_file_and_the_bytes(big_checkpoint, tmp_path, hfexport_bin):
    with tmpfs(tmp_path / "small", "size=8m") as disk:
        proc = subprocess.run([str(hfexport_bin), "export", str(big_checkpoint), "-o", str(disk / "out")],
                              capture_output=True, text=True, env=cli_env())
        line = assert_clean_error(proc, disk / "out", str(disk / "out" / "model.onnx.data"), "disk space", "needs",
                                  "free")
        assert "MiB" in line and list(disk.iterdir()) == []


def test_disk_full_at_every_point_of_an_export(small_checkpoint, tmp_path, hfexport_bin):
    """The disk fills after every 4 KiB of the export in turn (tmpfs sizes up to the one it fits
    in): each attempt is one line naming a file of the output, and leaves nothing."""
    small = small_checkpoint
    ref = tmp_path / "ref"
    assert subprocess.run([str(hfexport_bin), "export", str(small), "-o", str(ref)], env=cli_env()).returncode == 0
    total = sum(f.stat().st_size for f in ref.iterdir())
    failures = 0
    for size in range(4096, total + 64 * 4096, 4096):
        with tmpfs(tmp_path / f"disk-{size}", f"size={size}") as disk:
            proc = subprocess.run([str(hfexport_bin), "export", str(small), "-o", str(disk / "out")],
                                  capture_output=True, text=True, env=cli_env())
            if proc.returncode == 0:
                assert sorted(p.name for p in (disk / "out").iterdir()) == sorted(p.name for p in ref.iterdir())
                break
            failures += 1
            line = assert_clean_error(proc, disk / "out", str(disk / "out"))
            assert "disk space" in line or "No space left" in line, line
            assert list(disk.iterdir()) == []
    else:
        raise AssertionError("the export never fitted")
    assert failures > 3


def test_read_only_destination(small_checkpoint, tmp_path, hfexport_bin):
    small = small_checkpoint
    with tmpfs(tmp_path / "ro", "size=1m,ro") as disk:
        proc = subprocess.run([str(hfexport_bin), "export", str(small), "-o", str(disk / "out")], capture_output=True,
                              text=True, env=cli_env())
        assert_clean_error(proc, disk / "out", str(disk / "out"), "Read-only file system")


def run_on_terminal(args: list[str]) -> tuple[int, str]:
    """Runs args with stderr on a pseudo-terminal; its exit status and what it wrote there."""
    leader, follower = pty.openpty()
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=follower, env=cli_env())
    os.close(follower)
    written = b""
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # EIO: the child closed its end
            break
        if not chunk:
            break
        written += chunk
    os.close(leader)
    return proc.wait(timeout=120), written.decode()


def test_progress_on_a_terminal_and_quiet_in_pipes(big_checkpoint, tmp_path, hfexport_bin):
    """On a terminal each component's line shows bytes written, the total and the rate, and stays
    as a summary; --quiet and pipes print nothing."""
    rc, shown = run_on_terminal([str(hfexport_bin), "export", str(big_checkpoint), "-o", str(tmp_path / "tty"),
                                 "--for-generation"])
    assert rc == 0, shown
    summaries = [line.rsplit("\r\x1b[K", 1)[-1] for line in shown.split("\r\n") if "MiB/s" in line]
    assert summaries, shown
    total_mib = sum(f.stat().st_size for f in (tmp_path / "tty").rglob("*.onnx*")) / 2**20
    sizes = [re.fullmatch(r"hfexport: writing (\w+)  ([\d.]+) (MiB|GiB) of ([\d.]+) (MiB|GiB), [\d.]+ (MiB|GiB)/s", s)
             for s in summaries]
    assert all(sizes), summaries
    to_mib = lambda value, unit: float(value) * (1024 if unit == "GiB" else 1)
    for m in sizes:  # each summary is complete: written == total
        assert to_mib(m[2], m[3]) == pytest.approx(to_mib(m[4], m[5]), rel=1e-3), m[0]
    assert sum(to_mib(m[4], m[5]) for m in sizes) == pytest.approx(total_mib, rel=0.05)

    rc, quiet = run_on_terminal([str(hfexport_bin), "export", str(big_checkpoint), "-o", str(tmp_path / "quiet"),
                                 "--quiet"])
    assert (rc, quiet) == (0, "")
    piped = subprocess.run([str(hfexport_bin), "export", str(big_checkpoint), "-o", str(tmp_path / "pipe")],
                           capture_output=True, text=True, env=cli_env())
    assert (piped.returncode, piped.stderr) == (0, "")


# --------------------------------------------------------------------------------------------
# Checkpoint layouts: many shards, the Hub cache's symlinks, a truncated shard.

MANY = dict(SMALL, num_hidden_layers=6, vocab_size=512, hidden_size=64, intermediate_size=128)


@pytest.fixture(scope="module")
def many_shards(tmp_path_factory):
    """The same model saved whole and in ~60 shards of at most 16 KB (transformers' own sharding)."""
    root = tmp_path_factory.mktemp("shards")
    whole, model = build_tiny_model(root / "whole", "llama", MANY)
    sharded, _ = build_tiny_model(root / "sharded", "llama", MANY, max_shard_size="16KB")
    return whole, sharded, model


def test_many_shards_export_the_same_bytes(many_shards, tmp_path, hfexport_bin):
    whole, sharded, model = many_shards
    shards = sorted(sharded.glob("model-*.safetensors"))
    assert len(shards) >= 40 and (sharded / "model.safetensors.index.json").is_file()
    outs = {}
    for name, ckpt in (("whole", whole), ("sharded", sharded)):
        outs[name] = tmp_path / name
        proc = subprocess.run([str(hfexport_bin), "export", str(ckpt), "-o", str(outs[name])], capture_output=True,
                              text=True, env=cli_env())
        assert proc.returncode == 0, proc.stderr
    for f in ("model.onnx", "model.onnx.data"):
        assert (outs["whole"] / f).read_bytes() == (outs["sharded"] / f).read_bytes(), f
    # and the export is the model's (the bytes alone would not say so)
    import numpy as np
    import onnxruntime as ort
    import torch

    ids = np.array([[1, 5, 9, 22, 7]], dtype=np.int64)
    session = ort.InferenceSession(str(outs["sharded"] / "model.onnx"))
    feeds = {"input_ids": ids, "attention_mask": np.ones_like(ids), "position_ids": np.arange(5)[None]}
    (got,) = session.run(["logits"], {i.name: feeds[i.name] for i in session.get_inputs()})
    with torch.no_grad():
        want = model(torch.from_numpy(ids)).logits.numpy()
    assert float(np.abs(got - want).max()) <= 1e-4


def test_hub_cache_layout_of_symlinks(many_shards, tmp_path, hfexport_bin):
    """A Hub cache snapshot: every file a relative symlink into ../../blobs/<hash>."""
    _, sharded, _ = many_shards
    blobs, snapshot = tmp_path / "models--x--y" / "blobs", tmp_path / "models--x--y" / "snapshots" / "abc123"
    blobs.mkdir(parents=True)
    snapshot.mkdir(parents=True)
    for i, f in enumerate(sorted(sharded.iterdir())):
        blob = blobs / f"{i:040x}"
        blob.write_bytes(f.read_bytes())
        (snapshot / f.name).symlink_to(Path("../../blobs") / blob.name)
    proc = subprocess.run([str(hfexport_bin), "export", str(snapshot), "-o", str(tmp_path / "out")],
                          capture_output=True, text=True, env=cli_env())
    assert proc.returncode == 0, proc.stderr
    ref = tmp_path / "ref"
    assert subprocess.run([str(hfexport_bin), "export", str(sharded), "-o", str(ref)], env=cli_env()).returncode == 0
    assert (tmp_path / "out" / "model.onnx.data").read_bytes() == (ref / "model.onnx.data").read_bytes()
    assert not (tmp_path / "out" / "config.json").is_symlink()  # companions are copies, not links into the cache


@pytest.mark.parametrize("cut", ["header", "data"])
def test_truncated_shard_among_many(cut, many_shards, tmp_path, hfexport_bin):
    """One shard in the middle cut short (an interrupted download): one line naming that shard."""
    _, sharded, _ = many_shards
    ckpt = tmp_path / "ckpt"
    shutil.copytree(sharded, ckpt)
    victim = sorted(ckpt.glob("model-*.safetensors"))[20]
    raw = victim.read_bytes()
    header = int.from_bytes(raw[:8], "little")
    victim.write_bytes(raw[: 8 + header // 2] if cut == "header" else raw[: 8 + header + (len(raw) - 8 - header) // 2])
    proc = subprocess.run([str(hfexport_bin), "export", str(ckpt), "-o", str(tmp_path / "out")], capture_output=True,
                          text=True, env=cli_env())
    assert_clean_error(proc, tmp_path / "out", victim.name)
