"""kgqr's roles on a cluster with the security plugin (opensearch/security/kgqr-roles.yml),
put there through the security REST API. configure.sh appends the file to a node's
roles.yml at its first start only, after which the security index is what counts: a role
kgqr narrows later (its accounts held `cluster_monitor` until 2026-12-01) keeps its old
reach on every cluster set up before, unless put again."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources
from typing import Any

import yaml

# (method, path, JSON body or None) -> the answer's JSON, or None where there is none
# (a role not there yet; for the local secured node's admin calls, any failure).
SecurityCall = Callable[[str, str, Any | None], Any | None]


class RoleNotPut(RuntimeError):
    """The cluster did not take one of kgqr's roles."""


def kgqr_roles() -> dict[str, Any]:
    """kgqr's roles, by name, as this version of kgqr defines them."""
    text = resources.files("plugin.opensearch.security").joinpath("kgqr-roles.yml").read_text()
    roles: dict[str, Any] = yaml.safe_load(text)
    return roles


@dataclass(frozen=True)
class RoleChange:
    """One role as the cluster had it against kgqr's definition, as grant lines."""

    name: str
    present: bool
    added: tuple[str, ...]
    removed: tuple[str, ...]

    @property
    def changed(self) -> bool:
        return not self.present or bool(self.added or self.removed)

    def describe(self, put: bool) -> str:
        if not self.changed:
            return f"{self.name}: as kgqr defines it"
        if not self.present:
            return f"{self.name}: {'made' if put else 'missing'}"
        lines = [f"{self.name}: {'put' if put else 'differs'}"]
        lines += [f"  - {grant}" for grant in self.removed]
        lines += [f"  + {grant}" for grant in self.added]
        return "\n".join(lines)


def grants(role: dict[str, Any]) -> set[str]:
    """What a role grants, a line each, comparable across the file's shape and the REST
    API's (which adds empty DLS, FLS and masks, and its own flags)."""
    lines = {f"cluster: {permission}" for permission in role.get("cluster_permissions") or []}
    for entry in role.get("index_permissions") or []:
        patterns = ", ".join(sorted(entry.get("index_patterns") or []))
        lines |= {f"{patterns}: {action}" for action in entry.get("allowed_actions") or []}
        for limit in ("dls", "fls", "masked_fields"):
            if entry.get(limit):
                lines.add(f"{patterns}: {limit} {json.dumps(entry[limit])}")
    for entry in role.get("tenant_permissions") or []:
        tenants = ", ".join(sorted(entry.get("tenant_patterns") or []))
        lines |= {f"tenant {tenants}: {action}" for action in entry.get("allowed_actions") or []}
    return lines


def put_kgqr_roles(call: SecurityCall, check_only: bool = False) -> list[RoleChange]:
    """Each of kgqr's roles compared with the cluster's, and put where it differs (unless
    `check_only`). Only kgqr's roles: the users they are mapped to are the operator's."""
    changes = []
    for name, wanted in kgqr_roles().items():
        path = f"/_plugins/_security/api/roles/{name}"
        current = (call("GET", path, None) or {}).get(name)
        had = grants(current) if current is not None else set()
        change = RoleChange(
            name,
            present=current is not None,
            added=tuple(sorted(grants(wanted) - had)),
            removed=tuple(sorted(had - grants(wanted))),
        )
        if change.changed and not check_only and call("PUT", path, wanted) is None:
            raise RoleNotPut(f"the cluster did not take kgqr's role {name}")
        changes.append(change)
    return changes
