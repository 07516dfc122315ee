"""Retrieval: the lexical and semantic lanes, their fusion, embedders and rerankers."""
