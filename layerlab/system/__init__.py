"""The system under test: the retriever (`retrieval`), the search tool and its contract modes
(`contract`), readers (`reader`) and the live reader's prompt and reply contract (`prompt`)."""

__all__ = ["contract", "convreader", "prompt", "reader", "retrieval"]
