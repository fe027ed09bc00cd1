"""Rewrite strategies by name. Adding one: a module with a Strategy subclass, listed here."""

from __future__ import annotations

from query_rewriter.strategies.agr import AnalyzeGenerateRefine
from query_rewriter.strategies.base import Strategy
from query_rewriter.strategies.hyde import HypotheticalDocuments, RetrievalAugmentedRewrite
from query_rewriter.strategies.plain import PlainQuery
from query_rewriter.strategies.prf import PseudoRelevanceFeedback

STRATEGIES: dict[str, Strategy] = {
    strategy.name: strategy
    for strategy in (
        PlainQuery(),
        PseudoRelevanceFeedback(),
        HypotheticalDocuments(),
        RetrievalAugmentedRewrite(),
        AnalyzeGenerateRefine(),
    )
}
