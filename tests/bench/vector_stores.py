"""The embedded vector stores compared for the dense example (docs/dense.md), one store per run.

Each store is measured in its own scratch venv (its installed size there is what it costs), on
the same wordllama vectors of enterprise_v2 (160 documents, 240 questions), offline: every
socket connect is refused and recorded. Printed: import, index and query time (240 questions
unfiltered + 240 through the ``status == "current"`` filter, top 3), agreement with exact
cosine, and the network attempts (none expected)::

    # 1. the vectors, from layerlab's own dense embedder (the shared venv)
    python tests/bench/vector_stores.py vectors /tmp/vs-data
    # 2. per store, in a fresh venv (faiss-cpu, chromadb, lancedb, qdrant-client, sqlite-vec)
    python3.11 -m venv /tmp/vs-qdrant && /tmp/vs-qdrant/bin/pip install qdrant-client numpy
    /tmp/vs-qdrant/bin/python tests/bench/vector_stores.py qdrant /tmp/vs-data
    du -sk /tmp/vs-qdrant/lib/python3.11/site-packages   # minus numpy, pip and setuptools

Not part of the benchmark suite (``python -m tests.bench``): it needs the scratch venvs.
"""

import json
import os
import socket
import sys
import tempfile
import time
from pathlib import Path

K = 3


def write_vectors(out: Path) -> None:
    """``D.npy``, ``Q.npy`` (unit float32) and ``meta.json`` from layerlab's dense embedder."""
    import numpy as np

    from layerlab import paths
    from layerlab.corpus import build
    from layerlab.system.retrieval import base, dense

    c = build.load(paths.CORPUS_DIR)
    out.mkdir(parents=True, exist_ok=True)
    e = dense.embedder()
    np.save(out / "D.npy", e.embed([base.index_text(d) for d in c.documents]))
    np.save(out / "Q.npy", e.embed([t.question for t in c.tasks]))
    meta = [{"doc_id": d.doc_id, "status": d.status, "domain": d.domain, "year": d.effective_year}
            for d in c.documents]  # fmt: skip
    (out / "meta.json").write_text(json.dumps(meta))


def measure(store: str, data: Path) -> dict:
    attempts: list[str] = []

    def refuse(self, addr):  # noqa: ANN001
        attempts.append(str(addr))
        raise OSError("network refused by the benchmark")

    socket.socket.connect = refuse
    import numpy as np

    D, Q = np.load(data / "D.npy"), np.load(data / "Q.npy")
    meta = json.loads((data / "meta.json").read_text())
    ids = [m["doc_id"] for m in meta]
    tmp = tempfile.mkdtemp()
    t0 = time.perf_counter()
    if store == "faiss":
        import faiss

        t1 = time.perf_counter()
        idx = faiss.IndexFlatIP(D.shape[1])
        idx.add(D)
        t2 = time.perf_counter()
        _, top = idx.search(Q, K)
        res = [[ids[j] for j in row] for row in top]
        # filter: faiss has an id selector; current-only
        cur = np.array([i for i, m in enumerate(meta) if m["status"] == "current"], dtype=np.int64)
        sel = faiss.IDSelectorArray(cur)
        _, top2 = idx.search(Q, K, params=faiss.SearchParameters(sel=sel))
        resf = [[ids[j] for j in row] for row in top2]
        t3 = time.perf_counter()
    elif store == "chromadb":
        os.environ["ANONYMIZED_TELEMETRY"] = "False"
        import chromadb
        from chromadb.config import Settings

        t1 = time.perf_counter()
        cl = chromadb.EphemeralClient(settings=Settings(anonymized_telemetry=False))
        col = cl.create_collection(
            "docs", metadata={"hnsw:space": "cosine"}, embedding_function=None
        )
        col.add(
            ids=ids,
            embeddings=D.tolist(),
            metadatas=[
                {"status": m["status"], "domain": m["domain"], "year": m["year"]} for m in meta
            ],
        )
        t2 = time.perf_counter()
        r = col.query(query_embeddings=Q.tolist(), n_results=K)
        res = r["ids"]
        r = col.query(query_embeddings=Q.tolist(), n_results=K, where={"status": "current"})
        resf = r["ids"]
        t3 = time.perf_counter()
    elif store == "lancedb":
        import lancedb

        t1 = time.perf_counter()
        db = lancedb.connect(tmp)
        tbl = db.create_table(
            "d",
            data=[
                {
                    "vector": D[i].tolist(),
                    "doc_id": ids[i],
                    "status": m["status"],
                    "domain": m["domain"],
                    "year": m["year"],
                }
                for i, m in enumerate(meta)
            ],
        )
        t2 = time.perf_counter()
        res = [tbl.search(q.tolist()).metric("cosine").limit(K).to_list() for q in Q]
        res = [[x["doc_id"] for x in r] for r in res]
        resf = [
            [
                x["doc_id"]
                for x in tbl.search(q.tolist())
                .metric("cosine")
                .where("status = 'current'", prefilter=True)
                .limit(K)
                .to_list()
            ]
            for q in Q
        ]
        t3 = time.perf_counter()
    elif store == "qdrant":
        from qdrant_client import QdrantClient, models

        t1 = time.perf_counter()
        cl = QdrantClient(location=":memory:")
        cl.create_collection(
            "d",
            vectors_config=models.VectorParams(size=D.shape[1], distance=models.Distance.COSINE),
        )
        cl.upsert(
            "d",
            points=[
                models.PointStruct(
                    id=i,
                    vector=D[i].tolist(),
                    payload={
                        "doc_id": ids[i],
                        "status": m["status"],
                        "domain": m["domain"],
                        "year": m["year"],
                    },
                )
                for i, m in enumerate(meta)
            ],
        )
        t2 = time.perf_counter()
        res = [
            [p.payload["doc_id"] for p in cl.query_points("d", query=q.tolist(), limit=K).points]
            for q in Q
        ]
        flt = models.Filter(
            must=[models.FieldCondition(key="status", match=models.MatchValue(value="current"))]
        )
        resf = [
            [
                p.payload["doc_id"]
                for p in cl.query_points("d", query=q.tolist(), limit=K, query_filter=flt).points
            ]
            for q in Q
        ]
        t3 = time.perf_counter()
    elif store == "sqlite":
        import sqlite3

        import sqlite_vec

        t1 = time.perf_counter()
        db = sqlite3.connect(":memory:")
        db.enable_load_extension(True)
        sqlite_vec.load(db)
        db.enable_load_extension(False)
        db.execute(
            "create virtual table d using vec0(embedding float[256] distance_metric=cosine, status text, doc_id text)"
        )
        db.executemany(
            "insert into d(rowid, embedding, status, doc_id) values (?,?,?,?)",
            [(i, D[i].tobytes(), m["status"], ids[i]) for i, m in enumerate(meta)],
        )
        t2 = time.perf_counter()
        res = [
            [
                r[0]
                for r in db.execute(
                    "select doc_id from d where embedding match ? and k = ? order by distance",
                    (q.tobytes(), K),
                )
            ]
            for q in Q
        ]
        resf = [
            [
                r[0]
                for r in db.execute(
                    "select doc_id from d where embedding match ? and k = ? and status = 'current' order by distance",
                    (q.tobytes(), K),
                )
            ]
            for q in Q
        ]
        t3 = time.perf_counter()
    exact = [[ids[j] for j in np.argsort(-(Q[i] @ D.T), kind="stable")[:K]] for i in range(len(Q))]
    curmask = np.array([m["status"] == "current" for m in meta])
    exactf = []
    for i in range(len(Q)):
        s = Q[i] @ D.T
        s[~curmask] = -np.inf
        exactf.append([ids[j] for j in np.argsort(-s, kind="stable")[:K]])
    agree = np.mean([set(a) == set(b) for a, b in zip(res, exact, strict=True)])
    agreef = np.mean([set(a) == set(b) for a, b in zip(resf, exactf, strict=True)])
    allcur = all(meta[ids.index(x)]["status"] == "current" for r in resf for x in r)
    return {
        "store": store,
        "import_s": round(t1 - t0, 3),
        "index_s": round(t2 - t1, 4),
        "query_480_s": round(t3 - t2, 4),
        "top3_agrees_exact": round(float(agree), 3),
        "filtered_agrees_exact": round(float(agreef), 3),
        "filter_only_current": allcur,
        "network_attempts": attempts,
    }


if __name__ == "__main__":
    if sys.argv[1] == "vectors":
        write_vectors(Path(sys.argv[2]))
    else:
        print(json.dumps(measure(sys.argv[1], Path(sys.argv[2]))))
