"""Rewrite strategies by name. Adding one: a module with a Strategy subclass (declaring the
parameters and settings it reads), listed here; new settings in kgqr_core/settings.py, its
prompt in kgqr_core/prompts/. A variant of an existing strategy (an ablation) is one more
line here: the same class composed with other stages."""

from __future__ import annotations

from kgqr_core.settings import ConfigurationError
from query_rewriter.strategies.agent.strategy import PlanAgent
from query_rewriter.strategies.base import Strategy
from query_rewriter.strategies.baselines.agr import AnalyzeGenerateRefine
from query_rewriter.strategies.baselines.hyde import HypotheticalDocuments
from query_rewriter.strategies.baselines.prf import PseudoRelevanceFeedback
from query_rewriter.strategies.context import CONTEXT_SETTINGS
from query_rewriter.strategies.graph.bridge import GraphBridge
from query_rewriter.strategies.graph.mix import GraphMix
from query_rewriter.strategies.graph.walk import GraphWalk
from query_rewriter.strategies.knowledge.kar import KnowledgeAwareRewrite
from query_rewriter.strategies.knowledge.kar_stages import IndexEntityLinker, NameSimilarity
from query_rewriter.strategies.knowledge.kgcqr import ContextualQueryRetrieval
from query_rewriter.strategies.params import Param
from query_rewriter.strategies.plain import PlainQuery

STRATEGIES: dict[str, Strategy] = {
    strategy.name: strategy
    for strategy in (
        PlainQuery(),
        GraphBridge(),
        GraphWalk(),
        GraphMix(),
        PseudoRelevanceFeedback(),
        HypotheticalDocuments("hyde"),
        HypotheticalDocuments("rar", grounded=True),
        AnalyzeGenerateRefine(),
        KnowledgeAwareRewrite("kar"),
        KnowledgeAwareRewrite("kar_no_kg", ranker=None, kind="ablation"),
        KnowledgeAwareRewrite("kar_no_drf", ranker=NameSimilarity(), kind="ablation"),
        KnowledgeAwareRewrite("kar+boost", boost=True, kind="ablation"),
        KnowledgeAwareRewrite("kar_index", linker=IndexEntityLinker()),
        ContextualQueryRetrieval("kgcqr"),
        ContextualQueryRetrieval("kgcqr_no_ttr", use_ttr=False, kind="ablation"),
        ContextualQueryRetrieval("kgcqr_no_completion", complete=False, kind="ablation"),
        PlanAgent(),
    )
}

# The strategies a user chooses from first (the tune page, `--help`), then the seed
# papers' baselines and the ablations, which stay reachable for `kgqr eval`.
KIND_ORDER = ("strategy", "baseline", "ablation")


def by_kind() -> list[Strategy]:
    """Every strategy, those to choose from first, each kind in registry order."""
    return sorted(STRATEGIES.values(), key=lambda s: KIND_ORDER.index(s.kind))


def menu() -> str:
    """Every strategy by kind, those to choose from first, each LLM one with its calls
    (`kar (2 LLM calls)`): what `--help` lists."""

    def described(strategy: Strategy) -> str:
        if not strategy.uses_llm:
            return strategy.name
        calls = "1 LLM call" if strategy.llm_calls == 1 else f"{strategy.llm_calls} LLM calls"
        return f"{strategy.name} ({calls})"

    groups = {kind: [described(s) for s in by_kind() if s.kind == kind] for kind in KIND_ORDER}
    titles = {"strategy": "to choose from", "baseline": "baselines", "ablation": "ablations"}
    return "; ".join(f"{titles[kind]}: {', '.join(names)}" for kind, names in groups.items())


# Every parameter some strategy reads, once (what `kgqr eval --param` accepts).
ALL_PARAMS: tuple[Param, ...] = tuple(
    {p.name: p for s in STRATEGIES.values() for p in s.readable_params}.values()
)

# `kar+boost` arrives as "kar boost" when a client forgets to URL-encode the "+".
ALIASES = {"kar boost": "kar+boost", "kar_boost": "kar+boost"}


def known_strategy(name: str) -> str | None:
    """The registered strategy `name` stands for (an alias resolved), else None: what a
    request, a command-line option and the default strategy setting are all checked by."""
    name = ALIASES.get(name, name)
    return name if name in STRATEGIES else None


# KGQR_REWRITE_DEFAULT_STRATEGY's value for "what the KB's embedder is measured best with"
# (kgqr_core/embedder_models.py, EmbedderModel.default_strategy).
AUTO_DEFAULT = "auto"


def check_default_strategy(name: str | None) -> None:
    """Refuse a misspelt KGQR_REWRITE_DEFAULT_STRATEGY when the proxy starts: found at the
    first search, every search on a knowledge base would be a 400."""
    if name is not None and name != AUTO_DEFAULT and known_strategy(name) is None:
        raise ConfigurationError(
            f"KGQR_REWRITE_DEFAULT_STRATEGY={name!r} is no strategy; valid: "
            f"{AUTO_DEFAULT}, {', '.join(STRATEGIES)}, or none to pass searches through"
        )


# Every setting some strategy's rewrite depends on (what an evaluation report records).
SHAPING_SETTINGS: frozenset[str] = frozenset(
    {*CONTEXT_SETTINGS, *(p.setting for p in ALL_PARAMS)}
    | {name for s in STRATEGIES.values() for name in s.settings}
)
