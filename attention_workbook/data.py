"""Tiny-shakespeare for lecture 08: download once, cache, verify, encode as characters.

Where the text comes from, in order:

1. the path in the environment variable ``AWB_TINYSHAKESPEARE`` (machines without internet,
   the test suite, a copy you already have);
2. the cache file ``~/.cache/attention_workbook/tinyshakespeare.txt`` (or ``$AWB_CACHE``);
3. a download of the canonical file from the char-rnn repository (a few seconds' timeout).

Every source is checked against the known size and SHA-256, so a truncated download or a
different file is caught before anyone trains on it. If nothing works the error says what
was tried and how to fix it.

To train on another text on purpose (your own corpus; the test suite on a fresh clone with no
copy of tiny-shakespeare and no internet), set ``AWB_CORPUS`` to its path: it is read as it is,
unchecked, before any of the above.
"""

from __future__ import annotations

import hashlib
import os
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import torch

URL = "https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt"
N_CHARS = 1_115_394
SHA256 = "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed"
ENV_VAR = "AWB_TINYSHAKESPEARE"
OTHER_CORPUS_ENV_VAR = "AWB_CORPUS"      # any text, on purpose: not checked against tiny-shakespeare
CACHE_ENV_VAR = "AWB_CACHE"


class DataUnavailable(RuntimeError):
    """Neither the environment variable, the cache nor the download gave the file."""


def cache_dir() -> Path:
    return Path(os.environ.get(CACHE_ENV_VAR, Path.home() / ".cache" / "attention_workbook"))


def _check(raw: bytes, origin: str) -> str:
    digest = hashlib.sha256(raw).hexdigest()
    if digest != SHA256:
        raise DataUnavailable(
            f"{origin} is not the canonical tiny-shakespeare file ({len(raw):,} bytes, sha256 "
            f"{digest[:12]}..., expected {N_CHARS:,} bytes, sha256 {SHA256[:12]}...).")
    return raw.decode("utf-8")


def download(dest: Path, url: str = URL, timeout: float = 5.0) -> Path:
    """Fetch ``url`` into ``dest`` (atomically: a partial file never stays behind)."""
    with urllib.request.urlopen(url, timeout=timeout) as r:
        raw = r.read()
    _check(raw, url)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_suffix(".part")
    tmp.write_bytes(raw)
    tmp.replace(dest)
    return dest


def load_text(path: str | os.PathLike | None = None, download_timeout: float = 5.0,
              url: str = URL) -> str:
    """The 1,115,394 characters of tiny-shakespeare (see the module docstring for the order),
    or, where ``AWB_CORPUS`` names a file, that file's text as it is."""
    other = os.environ.get(OTHER_CORPUS_ENV_VAR)
    if not path and other:
        if not Path(other).expanduser().is_file():
            raise DataUnavailable(f"${OTHER_CORPUS_ENV_VAR} = {other}: no such file")
        return Path(other).expanduser().read_text(encoding="utf-8")
    tried = []
    explicit = path or os.environ.get(ENV_VAR)
    if explicit:
        p = Path(explicit).expanduser()
        if p.is_file():
            return _check(p.read_bytes(), str(p))
        tried.append(f"{p} (from {'the path argument' if path else '$' + ENV_VAR}): no such file")
    cached = cache_dir() / "tinyshakespeare.txt"
    if cached.is_file():
        try:
            return _check(cached.read_bytes(), str(cached))
        except DataUnavailable as e:  # a stale or damaged cache: try to download again
            tried.append(str(e))
    try:
        return _check(download(cached, url, download_timeout).read_bytes(), str(cached))
    except DataUnavailable as e:
        tried.append(str(e))
    except Exception as e:  # noqa: BLE001 - no internet, DNS failure, timeout, HTTP error, read-only cache ...
        tried.append(f"download from {url} failed within {download_timeout:g} s: {type(e).__name__}: {e}")
    raise DataUnavailable(
        "Could not get tiny-shakespeare. Tried:\n  - " + "\n  - ".join(tried) +
        f"\nFix: connect to the internet, or download {URL} yourself and set "
        f"{ENV_VAR}=/path/to/input.txt (os.environ['{ENV_VAR}'] = ... in a notebook).")


@dataclass
class CharDataset:
    """Character-level tokenizer plus the encoded train/val split (nanoGPT's first 90 % / last 10 %)."""

    chars: list[str]
    train: torch.Tensor  # (N_train,) int64 token ids
    val: torch.Tensor    # (N_val,)

    @property
    def vocab_size(self) -> int:
        return len(self.chars)

    def encode(self, s: str) -> list[int]:
        stoi = {c: i for i, c in enumerate(self.chars)}
        return [stoi[c] for c in s]

    def decode(self, ids) -> str:
        if hasattr(ids, "tolist"):
            ids = ids.tolist()
        return "".join(self.chars[i] for i in ids)


def char_dataset(text: str | None = None, train_frac: float = 0.9) -> CharDataset:
    """Build the vocabulary (sorted distinct characters: 65 for tiny-shakespeare) and the split."""
    text = load_text() if text is None else text
    chars = sorted(set(text))
    stoi = {c: i for i, c in enumerate(chars)}
    data = torch.tensor([stoi[c] for c in text], dtype=torch.long)
    n = int(train_frac * len(data))
    return CharDataset(chars, data[:n], data[n:])
