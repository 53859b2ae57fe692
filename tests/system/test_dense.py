"""The dense retriever kind (layerlab/system/retrieval/dense.py): bundled offline embeddings,
one matrix product, cached per index, batch-independent and byte-reproducible."""

from __future__ import annotations

import hashlib
import socket

import numpy as np
import pytest

from layerlab.corpus import build as corpus_mod
from layerlab.scoring import audit
from layerlab.system import retrieval
from layerlab.system.retrieval import dense

pytest.importorskip("tokenizers")
pytest.importorskip("safetensors")
if dense.importlib.util.find_spec("wordllama") is None:  # the dense extra
    pytest.skip("wordllama not installed (pip install 'layerlab[dense]')", allow_module_level=True)


def test_loads_offline_from_the_wheels_files(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_network(*args: object, **kwargs: object) -> None:
        raise AssertionError("the dense retriever tried the network")

    monkeypatch.setattr(socket.socket, "connect", no_network)
    e = dense.Embedder()  # a fresh one, not the cached process embedder
    v = e.embed(["What is the travel reimbursement limit?", ""])
    assert v.shape == (2, dense.DIM) and v.dtype == np.float32
    assert np.isclose(np.linalg.norm(v[0]), 1.0) and not v[1].any()  # an empty text: zero


def test_matches_wordllamas_own_embedding() -> None:
    wordllama = pytest.importorskip("wordllama")
    wl = wordllama.WordLlama.load(cache_dir=dense.package_folder(), disable_download=True)
    texts = ["Expense claims are filed within 30 days.", "Data retention: 7 years for finance."]
    ours = dense.embedder().embed(texts)
    theirs = wl.embed(texts, norm=True)
    np.testing.assert_allclose(ours, theirs, atol=1e-6)


def test_a_query_embeds_to_the_same_bytes_alone_or_in_a_batch(corpus: corpus_mod.Corpus) -> None:
    qs = [t.question for t in corpus.tasks[:70]]  # more than one of wordllama's 64-text batches
    e = dense.embedder()
    batch = e.embed(qs)
    alone = np.vstack([e.embed([q]) for q in qs])
    assert batch.tobytes() == alone.tobytes()


def _digest(corpus: corpus_mod.Corpus, name: str) -> str:
    dense._DOCS.clear()
    r = retrieval.make(name, corpus.documents, corpus.cue_words)
    s = r.score([t.question for t in corpus.tasks])
    return hashlib.sha256(s.tobytes() + r.rank(s).indices.tobytes()).hexdigest()


def test_scores_are_byte_reproducible(corpus: corpus_mod.Corpus) -> None:
    assert _digest(corpus, "dense_validity") == _digest(corpus, "dense_validity")


def test_document_embeddings_are_cached_per_index(
    corpus: corpus_mod.Corpus, monkeypatch: pytest.MonkeyPatch
) -> None:
    dense._DOCS.clear()
    calls: list[int] = []
    real = dense.Embedder.embed

    def counting(self: dense.Embedder, texts: list[str]) -> np.ndarray:
        calls.append(len(texts))
        return real(self, texts)

    monkeypatch.setattr(dense.Embedder, "embed", counting)
    n = len(corpus.documents)
    retrieval.make("dense", corpus.documents, corpus.cue_words)
    retrieval.make("dense_validity", corpus.documents, corpus.cue_words)  # same index: cached
    assert calls.count(n) == 1
    retrieval.make("dense", corpus.documents[:-1], corpus.cue_words)  # another index: embedded
    assert calls.count(n - 1) == 1


def test_dense_is_a_real_first_stage_and_validity_prefers_the_current_version(
    corpus: corpus_mod.Corpus, key: corpus_mod.AnswerKey
) -> None:
    plain = audit.evaluate("dense", corpus.documents, corpus, key)
    valid = audit.evaluate("dense_validity", corpus.documents, corpus, key)
    # the policy's two versions read alike, so cosine alone picks between them near chance;
    # the status/year term decides, as it does for TF-IDF
    assert plain.top3_recall > 0.9 and 0.3 < plain.current_version_preference < 0.8
    assert valid.current_version_preference == 1.0 and valid.top1_recall > 0.9
    assert "dense" not in retrieval.paper_retrievers()


def test_without_the_dense_extra_the_error_names_it(monkeypatch: pytest.MonkeyPatch) -> None:
    from layerlab import extras

    monkeypatch.setattr(dense.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ModuleNotFoundError) as err:
        dense.package_folder()
    line = extras.missing_line(err.value, "the dense retriever")
    assert line == "the dense retriever needs wordllama (pip install 'layerlab[dense]')"
