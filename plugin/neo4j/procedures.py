"""kgqr's Neo4j procedures (the Java sources beside this module) and whether a server has them.

The Neo4j that `kgqr services up` runs compiles and registers them. Another Neo4j (the
Docker image, a server of the user's own) may not have them, and callers then send the
equivalent Cypher; the answer is asked once per driver.
"""

from __future__ import annotations

import weakref
from typing import Any

RELATION_MERGE = "kgqr.mergeRelations"

_INSTALLED = (
    "SHOW PROCEDURES YIELD name WHERE name STARTS WITH 'kgqr.' RETURN collect(name) AS names"
)
_known: weakref.WeakKeyDictionary[Any, frozenset[str]] = weakref.WeakKeyDictionary()


def installed(driver: Any) -> frozenset[str]:
    """Names of the kgqr procedures the driver's server has."""
    if driver not in _known:
        records, _, _ = driver.execute_query(_INSTALLED)
        _known[driver] = frozenset(records[0]["names"])
    return _known[driver]
