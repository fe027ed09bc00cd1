"""The relevance-tuning page served by the proxy at /_kgqr/tune: strategies side by side,
judgments stored in OpenSearch, each strategy's metrics over every saved judgment."""
