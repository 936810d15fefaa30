"""attention_workbook.data: the tiny-shakespeare file, its checks and its fallbacks."""

import os
import time
from pathlib import Path

import pytest
import torch

from attention_workbook import data

SHARED = Path(__file__).resolve().parents[1] / ".." / "shared" / "data" / "tinyshakespeare.txt"
needs_file = pytest.mark.skipif(not SHARED.is_file(), reason=f"no local tiny-shakespeare at {SHARED.resolve()} "
                                "(the tests never download it)")
DEAD_URL = "http://127.0.0.1:9/input.txt"  # nothing listens there: fails at once, never leaves the machine


@pytest.fixture
def isolated(monkeypatch, tmp_path):
    """No env var, an empty cache folder."""
    monkeypatch.delenv(data.ENV_VAR, raising=False)
    monkeypatch.delenv(data.OTHER_CORPUS_ENV_VAR, raising=False)
    monkeypatch.setenv(data.CACHE_ENV_VAR, str(tmp_path / "cache"))
    return tmp_path


@needs_file
def test_env_var_gives_the_canonical_text(isolated, monkeypatch):
    monkeypatch.setenv(data.ENV_VAR, str(SHARED))
    text = data.load_text(url=DEAD_URL)
    assert len(text) == data.N_CHARS == 1_115_394
    assert text.startswith("First Citizen:")
    ds = data.char_dataset(text)
    assert ds.vocab_size == 65
    assert len(ds.train) == int(0.9 * len(text)) == 1_003_854 and len(ds.val) == 111_540
    assert ds.train.dtype == torch.long
    assert ds.decode(ds.train[:14]) == "First Citizen:"
    assert ds.decode(ds.encode("To be, or not")) == "To be, or not"
    assert torch.equal(torch.cat([ds.train, ds.val])[:50], torch.tensor(ds.encode(text[:50])))


@needs_file
def test_cache_is_used_without_env_var(isolated):
    cache = Path(os.environ[data.CACHE_ENV_VAR])
    cache.mkdir()
    (cache / "tinyshakespeare.txt").symlink_to(SHARED.resolve())  # a link, not a copy
    assert len(data.load_text(url=DEAD_URL)) == data.N_CHARS


def test_wrong_file_is_rejected_with_the_checksum(isolated, monkeypatch):
    bad = isolated / "input.txt"
    bad.write_text("First Citizen:\nBefore we proceed any further, hear me speak.\n")
    monkeypatch.setenv(data.ENV_VAR, str(bad))
    with pytest.raises(data.DataUnavailable, match="not the canonical tiny-shakespeare"):
        data.load_text(url=DEAD_URL)


def test_another_corpus_on_purpose_is_read_unchecked(isolated, monkeypatch):
    own = isolated / "own.txt"
    own.write_text("ADA:\nKeys and values.\n")
    monkeypatch.setenv(data.OTHER_CORPUS_ENV_VAR, str(own))
    assert data.load_text(url=DEAD_URL) == "ADA:\nKeys and values.\n"
    monkeypatch.setenv(data.OTHER_CORPUS_ENV_VAR, str(isolated / "missing.txt"))
    with pytest.raises(data.DataUnavailable, match="AWB_CORPUS"):
        data.load_text(url=DEAD_URL)


def test_clear_error_and_fast_failure_without_internet(isolated, monkeypatch):
    monkeypatch.setenv(data.ENV_VAR, str(isolated / "missing.txt"))
    t = time.perf_counter()
    with pytest.raises(data.DataUnavailable) as err:
        data.load_text(url=DEAD_URL, download_timeout=2)
    assert time.perf_counter() - t < 10
    msg = str(err.value)
    assert "missing.txt" in msg and DEAD_URL in msg and data.ENV_VAR in msg
    assert not list(Path(os.environ[data.CACHE_ENV_VAR]).glob("*"))  # no partial file left in the cache


def test_corrupt_cache_is_reported(isolated):
    cache = Path(os.environ[data.CACHE_ENV_VAR])
    cache.mkdir()
    (cache / "tinyshakespeare.txt").write_text("truncated")
    with pytest.raises(data.DataUnavailable, match="not the canonical"):
        data.load_text(url=DEAD_URL, download_timeout=2)
