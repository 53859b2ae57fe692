"""Dense text scorer: static word embeddings bundled offline (wordllama ``l2_supercat``, 256 dims).

The ``dense`` kind embeds every text as the mean of its tokens' vectors (what
``WordLlamaInference.embed`` computes), normalised to unit length, and scores all queries
against all documents in one matrix product (cosine similarity). The weights and tokenizer are
read from the files the wordllama wheel ships (``weights/l2_supercat_256.safetensors``,
``tokenizers/l2_supercat_tokenizer_config.json``); nothing is downloaded, and the ``wordllama``
package itself is not imported (its ``__init__`` configures the root logger and
``WordLlama.load()`` tries the network for a tokenizer path the wheel does not use).

Nothing here is random. A text's vector does not depend on which other texts share its batch
(the tokens are pooled per text, with no padding), so a query embeds to the same bytes whether
it is searched alone or with 240 others. Document matrices are cached per index (by the hash of
the index's texts), so the nine scenario indexes of a run are embedded once each per process.

Registered retrievers: ``dense`` (cosine only) and ``dense_validity`` (cosine plus the same
status/year validity term as ``tfidf_validity``).
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import threading
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from numpy.typing import NDArray

from layerlab.system.retrieval.base import RetrieverConfig, register, text_scorer

MODEL = "l2_supercat"
DIM = 256
WEIGHTS = f"weights/{MODEL}_{DIM}.safetensors"
TOKENIZER = f"tokenizers/{MODEL}_tokenizer_config.json"
CACHE_SIZE = 32  # document matrices kept (a run has one index per scenario)


def package_folder() -> Path:
    """The installed wordllama package's folder (found without importing the package)."""
    spec = importlib.util.find_spec("wordllama")
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError(
            "the dense retriever needs wordllama: pip install 'layerlab[dense]'", name="wordllama"
        )
    return Path(next(iter(spec.submodule_search_locations)))


class Embedder:
    """Mean-pooled, unit-length static embeddings from the bundled wordllama files."""

    def __init__(self, folder: Path | None = None) -> None:
        from safetensors.numpy import load_file
        from tokenizers import Tokenizer

        folder = folder or package_folder()
        for rel in (WEIGHTS, TOKENIZER):
            if not (folder / rel).is_file():
                raise FileNotFoundError(
                    f"{folder / rel}: the wordllama wheel's bundled file is missing"
                )
        self.matrix: NDArray[np.float32] = np.ascontiguousarray(
            load_file(str(folder / WEIGHTS))["embedding.weight"], dtype=np.float32
        )
        self._tokenizer = Tokenizer.from_file(str(folder / TOKENIZER))
        self._tokenizer.no_padding()
        self._tokenizer.no_truncation()

    def embed(self, texts: Sequence[str]) -> NDArray[np.float32]:
        """``(len(texts), DIM)`` unit vectors; an empty (token-less) text is the zero vector."""
        out = np.zeros((len(texts), self.matrix.shape[1]), dtype=np.float32)
        if not texts:
            return out
        encoded = self._tokenizer.encode_batch(list(texts), add_special_tokens=False)
        lengths = np.array([len(e.ids) for e in encoded], dtype=np.int64)
        keep = np.flatnonzero(lengths)
        if not len(keep):
            return out
        ids = np.concatenate([np.asarray(encoded[i].ids, dtype=np.int64) for i in keep])
        np.clip(ids, 0, self.matrix.shape[0] - 1, out=ids)
        starts = np.concatenate([[0], np.cumsum(lengths[keep])[:-1]])
        # per-text sums in token order (reduceat runs each segment on its own: batch-independent)
        sums = np.add.reduceat(self.matrix[ids], starts, axis=0)
        norms = np.linalg.norm(sums, axis=1, keepdims=True)
        out[keep] = sums / np.where(norms > 0, norms, 1.0)
        return out


_LOCK = threading.Lock()


@functools.cache
def embedder() -> Embedder:
    """The process's one embedder (16 MB of weights, loaded on first use)."""
    return Embedder()


_DOCS: OrderedDict[str, NDArray[np.float32]] = OrderedDict()


def texts_hash(texts: Sequence[str]) -> str:
    """Identity of an index's texts: sha256 over each text's length and bytes, in order."""
    h = hashlib.sha256()
    for t in texts:
        b = t.encode("utf-8")
        h.update(len(b).to_bytes(8, "little"))
        h.update(b)
    return h.hexdigest()


def document_matrix(texts: Sequence[str]) -> NDArray[np.float32]:
    """The index's document embeddings, embedded once per distinct index (LRU of CACHE_SIZE)."""
    key = texts_hash(texts)
    with _LOCK:
        if key in _DOCS:
            _DOCS.move_to_end(key)
            return _DOCS[key]
    matrix = embedder().embed(texts)
    matrix.setflags(write=False)
    with _LOCK:
        _DOCS[key] = matrix
        while len(_DOCS) > CACHE_SIZE:
            _DOCS.popitem(last=False)
    return matrix


@text_scorer("dense")
class DenseScorer:
    """Cosine similarity of wordllama embeddings: every query x document in one product."""

    def __init__(self, config: RetrieverConfig, texts: Sequence[str]) -> None:
        self._docs = document_matrix(texts).astype(np.float64)

    def __call__(self, questions: Sequence[str]) -> NDArray[np.float64]:
        q = embedder().embed(list(questions)).astype(np.float64)
        return q @ self._docs.T


register(
    RetrieverConfig(
        "dense",
        kind="dense",
        description="dense: cosine of wordllama l2_supercat static embeddings (256 dims, bundled, "
        "offline), no cues or validity (beyond the paper)",
    )
)
register(
    RetrieverConfig(
        "dense_validity",
        kind="dense",
        validity=True,
        description="dense + the status/year validity term of tfidf_validity (beyond the paper)",
    )
)
