"""The parameters a request may set, each named for the knob it turns.

Parameters used to share one flat namespace: `k` set the hybrid query's k-NN k, KAR's
top-k and KG-CQR's top-k at once, so a sweep of `k` moved two knobs together. Each
parameter now has a namespaced name (`knn.k`, `kar.k`, `kgcqr.k`), a range (what request
validation checks), and the setting its default comes from; each strategy declares the
ones it reads (`Strategy.params`). The old flat names keep working for now, with a
deprecation warning in the explain, and set every parameter they used to.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from kgqr_core.settings import Settings
from query_rewriter.engine.errors import RewriteRequestError


@dataclass(frozen=True)
class Param:
    name: str
    setting: str  # the Settings field holding its default
    low: float
    high: float
    integer: bool = False
    legacy: str | None = None  # the flat name requests used before (deprecated)

    def check(self, given: Any) -> float:
        """The value as a number in range, else the 400 a client sees."""
        try:
            value = float(given)
        except (TypeError, ValueError, OverflowError):  # OverflowError: an integer of 400 digits
            value = math.nan
        in_range = not isinstance(given, bool) and math.isfinite(value)
        if not in_range or not self.low <= value <= self.high:
            raise RewriteRequestError(400, "illegal_argument_exception", self.message())
        if self.integer and value != int(value):
            raise RewriteRequestError(400, "illegal_argument_exception", self.message())
        return value

    def message(self) -> str:
        kind = "a whole number" if self.integer else "a number"
        return f"kgqr parameter [{self.name}] must be {kind} from {self.low:g} to {self.high:g}"

    def default(self, settings: Settings) -> float:
        return float(settings.value(self.setting))


ALPHA = Param("rewrite.alpha", "rewrite_alpha", 0.0, 1.0, legacy="alpha")
KNN_K = Param("knn.k", "rewrite_knn_k", 1, 1000, integer=True, legacy="k")
EXPANSIONS = Param("rewrite.n", "rewrite_expansions", 1, 8, integer=True, legacy="n")
PRF_DOCS = Param("prf.docs", "rewrite_prf_docs", 1, 20, integer=True, legacy="prf_docs")
KAR_K = Param("kar.k", "kar_top_k", 1, 1000, integer=True, legacy="k")
KAR_SEEDS = Param("kar.seeds", "kar_index_seeds", 1, 50, integer=True)
KAR_HOPS = Param("kar.h", "kar_hops", 1, 2, integer=True, legacy="h")
KGCQR_K = Param("kgcqr.k", "kgcqr_top_k", 1, 1000, integer=True, legacy="k")
KGCQR_PATH_LENGTH = Param("kgcqr.L", "kgcqr_max_path_length", 1, 5, integer=True, legacy="L")
FUSE_PLAIN = Param("fusion.plain", "rewrite_fusion_plain", 0, 2, integer=True)
KEEP_TOP = Param("fusion.keep", "rewrite_fusion_keep", 0, 10, integer=True)
# BM25's share of the hybrid query (k-NN has the rest); a strong embedder wants less.
HYBRID_BM25 = Param("hybrid.bm25", "hybrid_bm25_weight", 0.0, 1.0)
# Every strategy's rewrite is fused (alpha) and searched (k-NN k, BM25's weight), and its
# ranking may be fused with the plain query's (query_rewriter/search/plain_fusion.py).
COMMON = (ALPHA, KNN_K, FUSE_PLAIN, KEEP_TOP, HYBRID_BM25)
# Accepted for a release and ignored: it never did anything.
IGNORED_LEGACY = {"boost": "[boost] never changed a rewrite and is ignored"}


@dataclass(frozen=True)
class RequestParams:
    """What a request set, by namespaced name, and the warnings its spelling earned."""

    values: dict[str, float]
    warnings: tuple[str, ...] = ()


def request_params(declared: Iterable[Param], given: Mapping[str, Any]) -> RequestParams:
    """The request's parameters checked against what the strategy reads (`declared`, plus
    COMMON); an old flat name sets each declared parameter it used to set."""
    params = {param.name: param for param in (*COMMON, *declared)}
    values: dict[str, float] = {}
    warnings: list[str] = []
    for name, value in given.items():
        if name in params:
            values[name] = params[name].check(value)
            continue
        aliased = [param for param in params.values() if param.legacy == name]
        if aliased:
            for param in aliased:
                values.setdefault(param.name, param.check(value))
            names = ", ".join(param.name for param in aliased)
            warnings.append(f"[{name}] is deprecated: use {names}")
        elif name in IGNORED_LEGACY:
            warnings.append(IGNORED_LEGACY[name])
        else:
            valid = ", ".join(sorted(params))
            raise RewriteRequestError(
                400,
                "illegal_argument_exception",
                f"unknown kgqr parameter [{name}] for this strategy; valid: {valid}",
            )
    return RequestParams(values, tuple(warnings))


def param_value(param: Param, values: Mapping[str, float], settings: Settings) -> float:
    """The request's value, else the setting's."""
    return values.get(param.name, param.default(settings))


def requested_value(param: Param, values: Mapping[str, float]) -> float | None:
    """The request's value only, None where it set none: for a knob whose default is not
    one number kgqr sends but something the engine holds already (`hybrid.bm25`: the
    installed pipeline's weights)."""
    return values.get(param.name)
