"""Knowledge-grounded LLM rewrites: KAR (entities, their neighbourhood ranked by
document similarity, a grounded expansion) and KG-CQR (subgraph, completion, context)."""
