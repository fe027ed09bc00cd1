"""The standard OpenSearch modules the minimal distribution on Maven Central lacks.

The ``integ-test-zip`` holds only ``transport-netty4``. k-NN extends ``lang-painless``, and
the clients users bring expect the rest of a normal node: Haystack and LlamaIndex delete
with ``_delete_by_query`` (``reindex``), ingest pipelines need ``ingest-common``, analyzers
such as ``stop`` or ``pattern`` live in ``analysis-common``, ``match_only_text`` and
``rank_feature`` in ``mapper-extras``, search templates in ``lang-mustache``. Maven Central
carries each module as jars only, so each module folder is built from them: the jars its
artifact's pom resolves, minus those already in the distribution's ``lib/`` or in a module
it extends (the same class twice is a "jar hell" start-up failure).
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from kgqr_ops.services import maven
from kgqr_ops.services.errors import ServiceError

# The policies of the modules in the OpenSearch source tree that need permissions.
PAINLESS_POLICY = """\
grant {
  permission java.lang.RuntimePermission "createClassLoader";
  permission java.lang.RuntimePermission "getClassLoader";
};
"""
REINDEX_POLICY = """\
grant {
  // reindex from a remote cluster opens connections through the REST client
  permission java.net.SocketPermission "*", "connect";
  permission java.net.NetPermission "getProxySelector";
};
"""
MUSTACHE_POLICY = """\
grant {
  permission java.lang.reflect.ReflectPermission "suppressAccessChecks";
  permission java.lang.RuntimePermission "accessDeclaredMembers";
};
"""

DESCRIPTOR = """\
description={description}
version={version}
name={name}
classname={classname}
java.version=11
opensearch.version={version}
extended.plugins={extends}
has.native.controller=false
"""


@dataclass(frozen=True)
class OpenSearchModule:
    name: str  # its folder under modules/, as in a full distribution
    artifact: str  # under org.opensearch.plugin on Maven Central
    classname: str
    description: str
    extends: tuple[str, ...] = ()
    policy: str | None = None


MODULES = (
    OpenSearchModule("lang-painless", "lang-painless", "org.opensearch.painless.PainlessPlugin",
                     "An easy, safe and fast scripting language for OpenSearch",
                     policy=PAINLESS_POLICY),
    OpenSearchModule("reindex", "reindex-client", "org.opensearch.index.reindex.ReindexPlugin",
                     "_reindex, _update_by_query and _delete_by_query", policy=REINDEX_POLICY),
    OpenSearchModule("analysis-common", "analysis-common",
                     "org.opensearch.analysis.common.CommonAnalysisPlugin",
                     "The common analyzers, tokenizers and token filters",
                     extends=("lang-painless",)),
    OpenSearchModule("ingest-common", "ingest-common",
                     "org.opensearch.ingest.common.IngestCommonPlugin",
                     "The common ingest processors", extends=("lang-painless",)),
    OpenSearchModule("mapper-extras", "mapper-extras-client",
                     "org.opensearch.index.mapper.MapperExtrasPlugin",
                     "Field types such as scaled_float, rank_feature and match_only_text"),
    OpenSearchModule("parent-join", "parent-join-client", "org.opensearch.join.ParentJoinPlugin",
                     "The join field type and has_child / has_parent queries"),
    OpenSearchModule("percolator", "percolator-client",
                     "org.opensearch.percolator.PercolatorPlugin",
                     "The percolator field and query"),
    OpenSearchModule("rank-eval", "rank-eval-client",
                     "org.opensearch.index.rankeval.RankEvalPlugin", "The _rank_eval API"),
    OpenSearchModule("lang-mustache", "lang-mustache-client",
                     "org.opensearch.script.mustache.MustachePlugin",
                     "Mustache search templates", policy=MUSTACHE_POLICY),
    OpenSearchModule("aggs-matrix-stats", "aggs-matrix-stats-client",
                     "org.opensearch.search.aggregations.matrix.MatrixAggregationPlugin",
                     "The matrix_stats aggregation"),
    OpenSearchModule("geo", "geo", "org.opensearch.geo.GeoModulePlugin",
                     "Geo shapes and geo aggregations"),
)  # fmt: skip


def add_missing_modules(home: Path, version: str, downloads: Path, maven_repo: Path) -> list[str]:
    """Build every module in MODULES that `home/modules` lacks; the names built."""
    built = []
    for module in MODULES:
        if not (home / "modules" / module.name).is_dir():
            _add_module(home, module, version, downloads, maven_repo)
            built.append(module.name)
    return built


def _add_module(
    home: Path, module: OpenSearchModule, version: str, downloads: Path, maven_repo: Path
) -> None:
    pom = resources.files("kgqr_ops.services.opensearch").joinpath("module-pom.xml")
    resolved = maven.resolve_jars(
        Path(str(pom)),
        {"opensearch.version": version, "module.artifact": module.artifact},
        downloads / f"{module.name}-{version}-jars",
        maven_repo,
        "opensearch",
    )
    present = {artifact_name(jar) for jar in (home / "lib").glob("*.jar")}
    for extended in module.extends:
        present |= {artifact_name(jar) for jar in (home / "modules" / extended).glob("*.jar")}
    folder = home / "modules" / module.name
    folder.mkdir(parents=True)
    for jar in resolved:
        if artifact_name(jar) not in present:
            shutil.copy2(jar, folder / jar.name)
    if not (folder / f"{module.artifact}-{version}.jar").is_file():
        raise ServiceError("opensearch", f"Maven resolved no {module.artifact} jar for {version}")
    (folder / "plugin-descriptor.properties").write_text(
        DESCRIPTOR.format(
            description=module.description,
            version=version,
            name=module.name,
            classname=module.classname,
            extends=",".join(module.extends),
        )
    )
    if module.policy:
        (folder / "plugin-security.policy").write_text(module.policy)


def artifact_name(jar: Path) -> str:
    """``lucene-core-9.12.1.jar`` -> ``lucene-core``: the name without its version."""
    parts = jar.stem.split("-")
    for index, part in enumerate(parts):
        if part[:1].isdigit():
            return "-".join(parts[:index])
    return jar.stem
