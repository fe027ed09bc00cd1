"""One search, from plan to answer: which strategy and parameters a request asks for,
the rewrite (cached per caller, coalesced, budgeted), the fusions, and the explanation."""
