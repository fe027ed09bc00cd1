from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from kgqr_ops.cli import main


def test_every_command_and_subcommand_loads_and_explains_itself() -> None:
    """Each lazily loaded command imports and answers --help, down to every subcommand:
    a broken import or option shows here, not when a user first runs it."""
    import click

    from kgqr_ops.cli import SUBCOMMANDS

    top = CliRunner().invoke(main, ["--help"])
    assert top.exit_code == 0
    ctx = click.Context(main)
    for name, (_, summary) in SUBCOMMANDS.items():
        assert name in top.output and summary.split()[0] in top.output
        command = main.get_command(ctx, name)
        assert command is not None, name
        paths = [[name]] + [
            [name, sub] for sub in getattr(command, "commands", {})
        ]  # groups: each subcommand too
        for path in paths:
            result = CliRunner().invoke(main, [*path, "--help"])
            assert result.exit_code == 0, (path, result.output)
            assert "Usage:" in result.output and len(result.output.splitlines()) > 3, path


def test_ingest_source_is_the_default_subcommand() -> None:
    result = CliRunner().invoke(main, ["ingest", "nosuchkind:/tmp", "--kb", "x"])
    assert result.exit_code == 2
    assert "must be KIND:PATH" in result.output


def test_ingest_missing_path_is_reported_before_any_connection() -> None:
    result = CliRunner().invoke(main, ["ingest", "jsonl:/definitely/not/here", "--kb", "x"])
    assert result.exit_code == 2
    assert "does not exist" in result.output


def test_ingest_subcommands_stay_reachable() -> None:
    result = CliRunner().invoke(main, ["ingest", "status", "--help"])
    assert result.exit_code == 0 and "JOB_ID" in result.output
    run_help = CliRunner().invoke(main, ["ingest", "run", "--help"])
    assert "stark:DIR" in run_help.output and "--restart" in run_help.output


def test_eval_query_set_is_the_default_subcommand_and_sweep_stays_reachable() -> None:
    result = CliRunner().invoke(main, ["eval", "trec:/tmp/x", "--kb", "x"])
    assert result.exit_code == 2 and "KIND:PATH" in result.output
    sweep_help = CliRunner().invoke(main, ["eval", "sweep", "--help"])
    assert sweep_help.exit_code == 0 and "--grid" in sweep_help.output
    bad_grid = CliRunner().invoke(
        main, ["eval", "sweep", "--dataset", "x=jsonl:/nope", "--grid", "alpha=high"]
    )
    assert bad_grid.exit_code == 2 and "alpha=high" in bad_grid.output


def test_a_sweeps_default_grid_is_what_its_strategy_reads_by_namespaced_name() -> None:
    from workbench.evaluation.cli import _parse_grid

    kar, graph = _parse_grid((), "kar"), _parse_grid((), "graph")
    assert {"kar.k", "knn.k", "kar.h", "rewrite.n", "rewrite.alpha"} == set(kar)
    assert {"graph.weight", "knn.k", "rewrite.alpha"} == set(graph)
    walk = _parse_grid((), "graph_walk")
    assert {"graph.damping", "graph.weight", "knn.k", "rewrite.alpha"} == set(walk)
    assert _parse_grid(("kar.k=5,10",), "kar") == {"kar.k": [5.0, 10.0]}


def _commands_with_kb() -> list[list[str]]:
    """Every command path whose options include --kb, found by walking the command tree."""
    import click

    from kgqr_ops.cli import SUBCOMMANDS

    ctx = click.Context(main)
    found = []
    for name in SUBCOMMANDS:
        command = main.get_command(ctx, name)
        children = getattr(command, "commands", {None: command})
        for sub, child in children.items():
            if any("--kb" in getattr(p, "opts", ()) for p in child.params):
                found.append([name] if sub is None else [name, sub])
    return found


def test_every_kb_option_refuses_a_bad_name_as_a_usage_error() -> None:
    """A name that cannot be an index name is a usage error, before any connection; it
    used to be a ValueError traceback from nine commands."""
    paths = _commands_with_kb()
    assert len(paths) >= 10, paths
    for path in paths:
        result = CliRunner().invoke(main, [*path, "--kb", "Bad_KB"])
        assert result.exit_code == 2, (path, result.output)
        assert "Invalid value for '--kb': invalid knowledge-base name 'Bad_KB'" in result.output


def test_a_configuration_mistake_is_one_line_from_any_command(
    tmp_path: Path, kgqr_env: Callable[..., None]
) -> None:
    config = tmp_path / "kgqr.toml"
    config.write_text('opensearch_ulr = "http://search:9200"\n')
    kgqr_env(KGQR_CONFIG=str(config))
    for path in (["ingest", "verify"], ["agent", "show"], ["serve"]):
        args = [*path, "--kb", "movies"] if path[0] != "serve" else path
        result = CliRunner().invoke(main, args)
        assert result.exit_code == 1, (path, result.output)
        assert result.output.startswith("Error: config file ") and "did you mean" in (
            result.output
        ), path
        assert "Traceback" not in result.output


def test_every_number_option_has_a_range() -> None:
    """`--concurrency 0`, `--limit -1` or `--size 0` were taken and failed (or did less)
    later; every count is now refused as a usage error. Seeds may be any number."""
    import click

    from kgqr_ops.cli import SUBCOMMANDS

    ctx = click.Context(main)
    unranged = []
    for name in SUBCOMMANDS:
        command = main.get_command(ctx, name)
        for sub, child in getattr(command, "commands", {name: command}).items():
            unranged += [
                f"{name} {sub} {param.name}"
                for param in child.params
                if isinstance(param.type, click.types.IntParamType | click.types.FloatParamType)
                and not isinstance(param.type, click.IntRange | click.FloatRange)
                and param.name != "seed"
            ]
    assert unranged == []
    refused = CliRunner().invoke(
        main, ["eval", "run", "jsonl:x", "--kb", "m", "--concurrency", "0"]
    )
    assert refused.exit_code == 2 and "0 is not in the range x>=1" in refused.output


def test_a_front_port_in_use_is_one_line_not_a_traceback() -> None:
    import socket

    from kgqr_ops.background_proxy import free_port

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        args = ["serve", "--port", str(free_port()), "--front-port", str(port)]
        result = CliRunner().invoke(main, args)
    assert result.exit_code == 1, result.output
    assert result.output == f"Error: front: 127.0.0.1:{port} is already in use\n"


def test_a_store_that_is_not_running_is_one_line_not_a_traceback(
    kgqr_env: Callable[..., None],
) -> None:
    from kgqr_ops.background_proxy import free_port

    nowhere = free_port()  # nothing listens there
    kgqr_env(KGQR_OPENSEARCH_URL=f"http://127.0.0.1:{nowhere}",
             KGQR_REDIS_URL=f"redis://127.0.0.1:{nowhere}/0")  # fmt: skip
    verify = CliRunner().invoke(main, ["ingest", "verify", "--kb", "movies"])
    status = CliRunner().invoke(main, ["ingest", "status", "some-job"])
    assert verify.exit_code == status.exit_code == 1
    assert verify.output.startswith(
        f"Error: OpenSearch could not be reached at http://127.0.0.1:{nowhere}: is it running?"
    )
    assert status.output.startswith("Error: Redis could not be reached (")


def test_a_tls_failure_is_told_apart_from_a_store_that_is_down(
    kgqr_env: Callable[..., None],
) -> None:
    """https:// to a plain-HTTP server (or a certificate that does not verify) reached
    the server: "is it running?" would send the user the wrong way."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    server = ThreadingHTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    kgqr_env(KGQR_OPENSEARCH_URL=f"https://127.0.0.1:{server.server_port}")
    try:
        result = CliRunner().invoke(main, ["ingest", "verify", "--kb", "movies"])
    finally:
        server.shutdown()
    assert result.exit_code == 1
    assert "TLS failed ([SSL: WRONG_VERSION_NUMBER]" in result.output
    assert "is it running" not in result.output


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["eval", "sweep", "--dataset", "m=jsonl:x", "--strategy", "base,kar"],
         "Invalid value for --strategy: one strategy, not 2"),
        (["eval", "sweep", "--dataset", "Bad_KB=jsonl:x", "--strategy", "base"],
         "Invalid value for --dataset: invalid knowledge-base name 'Bad_KB'"),
        (["rewrites", "warm", "--kb", "m", "--strategy", "karr", "--from-log", "5"],
         "Invalid value for --strategy: unknown ['karr']; valid: base, "),
        (["eval", "run", "jsonl:x", "--kb", "m", "--param", "knn.k=5000"],
         "Invalid value for --param: kgqr parameter [knn.k] must be a whole number from 1 to"),
        (["eval", "sweep", "--dataset", "m=jsonl:x", "--strategy", "base", "--grid",
          "knn.k=10,0"], "Invalid value for --grid: kgqr parameter [knn.k] must be"),
        (["eval", "sweep", "--dataset", "m=jsonl:x", "--metric", "R@50"],
         "Invalid value for '--metric': 'R@50' is not one of 'Hit@1', "),
        (["ingest", "run", "jsonl:x", "--kb", "m", "--replicas", "abc"],
         "Invalid value for '--replicas': 'abc' is neither a number of replicas nor a range"),
    ],
)  # fmt: skip
def test_strategy_and_dataset_names_are_checked_before_anything_runs(
    args: list[str], said: str
) -> None:
    """Two strategies for a sweep ended on "too many values to unpack", a bad KB name in a
    dataset on a traceback, warming an unknown strategy sent a search per query, and a
    sweep with a metric it does not report ran for hours to fail when plotting."""
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2, result.output
    assert said in result.output


def test_a_sweep_naming_one_knowledge_base_twice_is_refused_before_it_runs(
    tmp_path: Path,
) -> None:
    """Its points and baselines are kept by KB: the second set's baseline replaced the
    first's, whose points were then compared with it by id (other questions, same ids)."""
    judged = tmp_path / "judged.jsonl"
    judged.write_text('{"id": "1", "query": "q", "relevant": ["d"]}\n')
    dataset = f"m=jsonl:{judged}"
    result = CliRunner().invoke(main, ["eval", "sweep", "--dataset", dataset, "--dataset",
                                       dataset, "--strategy", "base"])  # fmt: skip
    assert result.exit_code == 2, result.output
    assert "Invalid value for --dataset: m is named twice" in result.output


def test_a_bad_line_in_the_agents_questions_is_a_usage_error(tmp_path: Path) -> None:
    """It was a QuerySetError traceback, after connecting to OpenSearch."""
    train = tmp_path / "train.jsonl"
    train.write_text('{"query": "q", "relevant": ["d"]}\nnot json\n')
    (tmp_path / "val.jsonl").write_text('{"query": "q", "relevant": ["d"]}\n')
    result = CliRunner().invoke(main, ["agent", "optimize", "--kb", "m", "--queries", str(train)])
    assert result.exit_code == 2, result.output
    assert f"Invalid value for --queries: {train}:2: not JSON" in result.output


def test_a_warm_file_line_that_starts_as_json_but_is_not_is_a_usage_error(
    tmp_path: Path,
) -> None:
    queries = tmp_path / "queries.txt"
    queries.write_text('films with Al Pacino\n{"query": "heat"\n')
    args = ["rewrites", "warm", "--kb", "m", "--strategy", "kar", "--file", str(queries)]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2, result.output
    assert f"Invalid value for --file: {queries}:2: not JSON" in result.output


def test_the_front_and_the_proxy_cannot_share_a_port() -> None:
    """nginx took the port, then the proxy failed to bind it, after both had started."""
    result = CliRunner().invoke(main, ["serve", "--port", "9299", "--front-port", "9299"])
    assert result.exit_code == 2, result.output
    assert "Invalid value for --front-port: 9299 is the proxy's port too" in result.output


def test_help_and_usage_errors_do_not_read_the_settings(kgqr_env: Callable[..., None]) -> None:
    """With any bad setting, `kgqr kb list --help` and every usage error ended in a
    ConfigurationError traceback."""
    kgqr_env(KGQR_PROXY_PORT="abc")
    shown = CliRunner().invoke(main, ["kb", "list", "--help"])
    assert shown.exit_code == 0 and "Usage:" in shown.output, shown.output
    missing = CliRunner().invoke(main, ["kb", "show"])
    assert missing.exit_code == 2 and "Missing argument 'NAME'" in missing.output
    ran = CliRunner().invoke(main, ["kb", "list"])
    assert ran.exit_code == 1 and "KGQR_PROXY_PORT='abc'" in ran.output
    assert isinstance(ran.exception, SystemExit)  # a one-line error, no traceback


def test_the_default_subcommand_takes_options_first_and_a_typo_is_named() -> None:
    """`kgqr eval --kb x QUERY_SET` said "No such option --kb", and `kgqr eval swep` ran
    `run` and asked for --kb."""
    options_first = CliRunner().invoke(main, ["eval", "--kb", "x", "trec:/tmp"])
    assert options_first.exit_code == 2 and "KIND:PATH" in options_first.output
    typo = CliRunner().invoke(main, ["eval", "swep"])
    assert typo.exit_code == 2 and "Did you mean 'sweep'" in typo.output
    assert "No such command 'stauts'" in CliRunner().invoke(main, ["ingest", "stauts"]).output


def test_version_and_short_help() -> None:
    assert CliRunner().invoke(main, ["--version"]).output.startswith("kgqr, version ")
    assert "kb [OPTIONS] COMMAND" in CliRunner().invoke(main, ["kb", "-h"]).output


@pytest.mark.parametrize(
    ("grid", "said"),
    [("foo", "expected NAME=V1,V2"), ("knn.k=", "expected NAME=V1,V2"),
     ("kar.k=3,5", "base does not read kar.k")],
)  # fmt: skip
def test_a_sweep_over_nothing_or_over_what_the_strategy_ignores_is_refused(
    grid: str, said: str
) -> None:
    """An empty grid ended the whole run on a missing folder; a parameter the strategy
    does not read swept points that all rank alike."""
    args = ["eval", "sweep", "--dataset", "x=jsonl:/nope", "--strategy", "base", "--grid", grid]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2 and said in result.output, result.output


def test_tune_auto_checks_its_queries_before_making_anything(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, ["tune", "auto", "--kb", "x", "--queries", "nokind"])
    assert result.exit_code == 2 and "KIND:PATH" in result.output
    assert not (tmp_path / "eval-results").exists()


def test_the_status_of_a_local_redis_writes_no_password(tmp_path: Path) -> None:
    """`kgqr services status` made and wrote the local Redis's password file."""
    from kgqr_core.settings import Settings, local_redis_password_file
    from kgqr_ops.services.redis_server import RedisServer

    server = RedisServer(Settings.of({"home": tmp_path}))
    server.is_healthy()  # what `status` asks (whatever answers on the port)
    assert server.password is None and not local_redis_password_file(tmp_path).exists()


def test_a_version_to_roll_back_to_needs_rollback() -> None:
    """Without --rollback, --to-version was ignored and a new version recorded."""
    args = ["kb", "set-default", "movies", "graph", "--to-version", "2"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2 and "--to-version goes with --rollback" in result.output


def test_a_query_set_under_an_unknown_users_home_is_a_usage_error() -> None:
    result = CliRunner().invoke(main, ["eval", "jsonl:~no-such-user-here/q.jsonl", "--kb", "x"])
    assert result.exit_code == 2 and "Invalid value for QUERY_SET" in result.output


def test_the_sweeps_help_names_every_parameter_of_its_default_grid() -> None:
    from workbench.evaluation.sweep import DEFAULT_GRID

    shown = " ".join(CliRunner().invoke(main, ["eval", "sweep", "--help"]).output.split())
    assert [name for name in DEFAULT_GRID if name not in shown] == []


@pytest.mark.parametrize(
    ("info", "told"),
    [
        ({"error": {"root_cause": [{"type": "index_closed_exception", "reason": "closed"}],
                    "type": "index_closed_exception", "reason": "closed"}},
         "(400): index_closed_exception: closed"),
        # "all shards failed" answers may name no root cause.
        ({"error": {"root_cause": [], "type": "search_phase_execution_exception",
                    "reason": "all shards failed"}},
         "(400): search_phase_execution_exception: all shards failed"),
        ("not json", "(400): an_error"),
    ],
)  # fmt: skip
def test_an_engine_refusal_is_told_in_one_line(info: Any, told: str) -> None:
    import opensearchpy.exceptions

    from kgqr_ops.cli import _refused_by_the_engine

    refusal = opensearchpy.exceptions.RequestError(400, "an_error", info)
    assert _refused_by_the_engine(refusal) == f"OpenSearch refused a request {told}"
    assert _refused_by_the_engine(ValueError("no")) is None
