"""Every `geo-pipeline tenants ...` command the docs show is one the CLI parses (a renamed option
fails here, not in a reader's shell), and the ones that manage analyst logins in a shell block act
on the tenant's analyst replica: no analyst logs in to the service's server (issue 35), so a
`grant-analyst`, `revoke`, `analysts` or `guard-analysts` without `--replica` would run against
GEO_DATABASE_URL, where there are no logins to manage. Also what the analyst docs tell a BI
tool: the endpoint's address only, and TLS only if the endpoint speaks it."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import click
import pytest

from geo_pipeline.cli.main import cli

ROOT = Path(__file__).resolve().parents[3]
DOCS = [
    "README.md",
    "docs/analysts.md",
    "docs/operations.md",
    "docs/monitors.md",
    "deploy/env.example",
    "deploy/docker-compose.yaml",
    "deploy/grafana/provisioning/datasources/analyst.yaml",
]
# Commands about analyst logins; in a shell block each must say where the logins live.
ON_THE_REPLICA = {"grant-analyst", "revoke", "analysts", "guard-analysts"}


def _shell_lines(text: str) -> list[str]:
    """The lines of ```bash / ``` blocks, comments cut."""
    out: list[str] = []
    fence: str | None = None  # the open block's language, "" for a bare fence
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            fence = line.strip()[3:] if fence is None else None
            continue
        if fence in ("", "bash", "sh", "console"):
            out.append(line.split(" #", 1)[0])
    return out


def _inline(text: str) -> list[str]:
    """Inline code spans (they may wrap a line) that start with a tenants command."""
    spans = re.findall(r"`([^`]+)`", text.replace("\n", " "))
    return [s for s in spans if re.match(r"(geo-pipeline )?tenants [a-z]", s)]


def _argv(command: str) -> list[str]:
    words = shlex.split(command.replace("[", " ").replace("]", " ").replace("|", " "))
    if words and words[0] == "geo-pipeline":
        words = words[1:]
    return words


def _commands() -> list[tuple[str, list[str], bool]]:
    found = []
    for rel in DOCS:
        text = (ROOT / rel).read_text(encoding="utf-8")
        for line in _shell_lines(text):
            m = re.search(r"geo-pipeline (tenants .*)", line)
            if m:
                found.append((rel, _argv(m[1]), True))
        for span in _inline(text):
            argv = _argv(span)
            if argv and argv[0] == "tenants":
                found.append((rel, argv, False))
    return found


COMMANDS = _commands()


def test_the_docs_show_tenants_commands() -> None:
    assert len(COMMANDS) >= 20, COMMANDS  # the extraction itself works


@pytest.mark.parametrize(
    ("where", "argv", "in_shell"), COMMANDS, ids=[f"{w}:{' '.join(a)}" for w, a, _ in COMMANDS]
)
def test_a_doc_command_parses_and_manages_logins_on_the_replica(
    where: str, argv: list[str], in_shell: bool
) -> None:
    cmd: click.Command = cli
    rest = list(argv)
    name = "geo-pipeline"
    while isinstance(cmd, click.Group):
        if not rest:  # a group named on its own (`tenants analyst-replica`)
            return
        assert rest[0] in cmd.commands, f"{where}: no command {rest[0]!r} in {name}: {argv}"
        name = rest.pop(0)
        cmd = cmd.commands[name]
    # Inline spans may stop before an argument (`tenants grant-analyst acme`): parse what is
    # given, with placeholders for the missing required arguments.
    try:
        cmd.make_context(name, list(rest), resilient_parsing=not in_shell)
    except click.UsageError as exc:
        pytest.fail(f"{where}: {' '.join(argv)}: {exc.format_message()}")
    if in_shell and name in ON_THE_REPLICA:
        assert "--replica" in rest, (
            f"{where}: `geo-pipeline {' '.join(argv)}` acts on the service's server "
            "(GEO_DATABASE_URL), where no analyst logs in (issue 35): add --replica"
        )


def test_the_docs_ask_for_tls_only_where_the_endpoint_speaks_it() -> None:
    """The endpoint's PgBouncer is configured without client_tls_*: it answers a client's SSL
    request with 'no', so a client set to sslmode require or verify-full fails ('server does
    not support SSL, but SSL was required'). The analyst docs must not tell one to."""
    from geo_pipeline.runtime.analyst_pooler import PoolerConfig

    ini = PoolerConfig(server_host="/run/standby", server_port=5432).ini(Path("/state"))
    if "client_tls_sslmode" in ini:
        return
    text = (ROOT / "docs/analysts.md").read_text(encoding="utf-8")
    demands = re.findall(r"sslmode: (?:require|verify-\w+)|`(?:require|verify-full)`", text)
    assert not demands, f"docs/analysts.md asks analysts for TLS the endpoint lacks: {demands}"


def test_every_connection_string_in_the_analyst_docs_is_the_endpoints() -> None:
    """An analyst connects to the analyst endpoint only (port 6432): a string naming the
    service's server (5432, the superuser) would be the old way, refused since migration 0083."""
    text = (ROOT / "docs/analysts.md").read_text(encoding="utf-8")
    urls = re.findall(r"postgresql(?:\+\w+)?://[^\s\"'`]+", text)
    assert urls
    wrong = [u for u in urls if ":6432/" not in u]
    assert not wrong, f"docs/analysts.md connects analysts elsewhere than the endpoint: {wrong}"
