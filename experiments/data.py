"""Real data that ships with the project or its own dependencies: nothing is downloaded.

Text: the English text of Python's documentation topics (`pydoc_data.topics` of CPython
3.11.7), a copy in data/python_doc_topics.txt.gz, so that every Python reads the same
characters (data/README.md: where it comes from, its licence).
Image: the photograph `grace_hopper.jpg` in matplotlib's sample data.
"""

from __future__ import annotations

import gzip
import hashlib
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

import bilinear_numpy as bn


# ----- text -------------------------------------------------------------------

CORPUS_PATH = Path(__file__).resolve().parent.parent / "data" / "python_doc_topics.txt.gz"
CORPUS_CHARACTERS = 465_048            # len() of the text
CORPUS_SHA256 = "2a95af4ac93f5b719944030ce3769070ddf827d847cba42192afa8da989e5dc4"   # of its UTF-8


def load_text_corpus(path=None) -> str:
    """The text task's corpus: Python 3.11.7's documentation topics, the same on every Python.

    Args: path: the gzip file (default CORPUS_PATH, data/python_doc_topics.txt.gz).
    Returns: str of CORPUS_CHARACTERS characters (103 distinct) whose UTF-8 has the SHA-256
        CORPUS_SHA256 (data/README.md).
    Raises: RuntimeError naming the file if it is missing, unreadable, or not that text (its
        length or checksum differs).
    """
    path = CORPUS_PATH if path is None else Path(path)
    try:
        raw = gzip.decompress(path.read_bytes())
    except (OSError, EOFError) as exc:        # missing, unreadable or not gzip
        raise RuntimeError(f"cannot read the text corpus {path}: {exc}") from exc
    text = raw.decode("utf-8", errors="replace")
    digest = hashlib.sha256(raw).hexdigest()
    if len(text) != CORPUS_CHARACTERS or digest != CORPUS_SHA256:
        raise RuntimeError(f"the text corpus {path} is not the recorded one: {len(text):,} "
                           f"characters, SHA-256 {digest[:12]}..., expected "
                           f"{CORPUS_CHARACTERS:,} and {CORPUS_SHA256[:12]}... (data/README.md)")
    return text


@dataclass(frozen=True)
class TextData:
    """A character-level data set: vocab (str, one character per id) and the
    train / validation id sequences (1-D int64 arrays)."""

    vocab: str
    train: np.ndarray
    val: np.ndarray


def text_dataset(text: str, val_fraction: float = 0.1) -> TextData:
    """Encode text as character ids and split it: the first (1 - val_fraction) of the
    characters train, the rest validate (a fixed split, no shuffling).

    Args: text: str; val_fraction: float in (0, 1).
    Returns: TextData (the vocabulary covers both parts).
    Raises: ValueError for an empty text or a fraction outside (0, 1); TypeError for a
        fraction that is not a real number.
    """
    val_fraction = bn.as_real("val_fraction", val_fraction)   # a Python float (see bn.as_real)
    if not 0 < val_fraction < 1:
        raise ValueError(f"val_fraction: expected a number in (0, 1), got {val_fraction}")
    if not text:
        raise ValueError("text: expected a non-empty string")
    vocab = "".join(sorted(set(text)))
    index = {c: i for i, c in enumerate(vocab)}
    ids = np.array([index[c] for c in text], dtype=np.int64)
    split = int(len(ids) * (1 - val_fraction))
    return TextData(vocab, ids[:split], ids[split:])


def context_windows(ids: np.ndarray, positions: np.ndarray, k: int):
    """Inputs and targets for next-character prediction.

    Args:
        ids: (T,) int array; positions: (n,) ints in [k, T); k: context length.
    Returns:
        X: (n, k) the k characters before each position; y: (n,) the character at it.
    Raises: ValueError if a position has fewer than k characters before it.
    """
    positions = np.asarray(positions)
    if positions.size and (positions.min() < k or positions.max() >= len(ids)):
        raise ValueError(f"positions: expected values in [{k}, {len(ids)}), got "
                         f"[{positions.min()}, {positions.max()}]")
    X = ids[positions[:, None] - k + np.arange(k)]                 # (n, k)
    return X, ids[positions]


def unigram_bpc(train: np.ndarray, val: np.ndarray, vocab_size: int) -> float:
    """Cross-entropy in bits per character of the unigram model on val: each character
    predicted by its frequency in train, add-one smoothed so that no probability is 0.

    Returns: float, -mean(log2 p(c)) over the characters of val.
    """
    counts = np.bincount(train, minlength=vocab_size) + 1.0
    p = counts / counts.sum()
    return float(-np.mean(np.log2(p[val])))


# ----- image ------------------------------------------------------------------


def sample_image_path() -> Path:
    """Path of matplotlib's sample photograph grace_hopper.jpg (600 x 512 pixels)."""
    from matplotlib import cbook
    return Path(cbook.get_sample_data("grace_hopper.jpg", asfileobj=False))


def load_image(path=None, stride: int = 4) -> np.ndarray:
    """An RGB image as floats in [0, 1], shrunk by averaging stride x stride blocks.

    Args:
        path: str or Path of an image file matplotlib can read (default: grace_hopper.jpg);
        stride: positive int.
    Returns:
        (H // stride, W // stride, 3) float64 array in [0, 1].
    Raises:
        ValueError for a non-positive stride; RuntimeError naming the file if it cannot be
        read or is not an RGB(A) image.
    """
    if not isinstance(stride, int) or stride < 1:
        raise ValueError(f"stride: expected a positive integer, got {stride!r}")
    import matplotlib.image
    path = Path(path) if path is not None else sample_image_path()
    try:
        img = np.asarray(matplotlib.image.imread(path))
    except Exception as exc:   # Pillow and matplotlib raise several types for a bad file
        raise RuntimeError(f"cannot read the image file {path}: {exc}") from exc
    if img.ndim != 3 or img.shape[2] not in (3, 4):
        raise RuntimeError(f"image file {path}: expected an RGB image, got array shape {img.shape}")
    img = img[:, :, :3].astype(np.float64)
    if img.max() > 1.0:                        # 8-bit files load as 0..255
        img = img / 255.0
    H, W = img.shape[0] // stride, img.shape[1] // stride
    if H == 0 or W == 0:
        raise ValueError(f"stride {stride} is larger than the image {img.shape[:2]}")
    blocks = img[:H * stride, :W * stride].reshape(H, stride, W, stride, 3)
    return blocks.mean(axis=(1, 3))                                # (H, W, 3)


def pixel_coordinates(H: int, W: int) -> np.ndarray:
    """(H * W, 2) coordinates (row, column) of the pixel centres, scaled to [0, 1], row-major."""
    rows, cols = np.meshgrid((np.arange(H) + 0.5) / H, (np.arange(W) + 0.5) / W, indexing="ij")
    return np.stack([rows.ravel(), cols.ravel()], axis=1)


def fourier_features(coords: np.ndarray, B: np.ndarray) -> np.ndarray:
    """Random Fourier features gamma(v) = [cos(2 pi v B), sin(2 pi v B)].

    Args: coords: (N, 2) in [0, 1]; B: (2, F) frequencies (cycles per image side).
    Returns: (N, 2F) float64.
    Source: Tancik et al., Fourier Features Let Networks Learn High Frequency Functions
    in Low Dimensional Domains, NeurIPS 2020.
    """
    angle = 2 * math.pi * coords @ B                               # (N, F)
    return np.concatenate([np.cos(angle), np.sin(angle)], axis=1)  # (N, 2F)


def psnr_db(pred: np.ndarray, target: np.ndarray) -> float:
    """Peak signal-to-noise ratio for values in [0, 1]: 10 log10(1 / mean((pred - target)^2)).

    Returns: float in dB; 200.0 for a mean squared error at or below 1e-20 (an exact fit);
        nan when the error is not finite (a prediction with NaN or inf: a diverged run).
    """
    with np.errstate(over="ignore", invalid="ignore"):     # a diverged prediction: inf or nan
        mse = float(np.mean((np.asarray(pred, dtype=np.float64) - target) ** 2))
    if not math.isfinite(mse):
        return math.nan
    return 10 * math.log10(1.0 / max(mse, 1e-20))
