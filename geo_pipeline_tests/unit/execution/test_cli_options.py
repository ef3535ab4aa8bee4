"""Long-running commands refuse values that would make them useless or unsafe before they
connect to anything, with the option's name in the message (exit 2); an unknown platform is
one line, not a traceback."""

from __future__ import annotations

import pytest

from geo_pipeline.cli.main import main


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["worker", "--accept-defer-s", "-1"], "--accept-defer-s"),
        (["worker", "--submit-horizon-s", "0"], "--submit-horizon-s"),
        (["worker", "--submit-horizon-s", "nan"], "not a finite number of seconds"),
        (["worker", "--lease-s", "inf"], "--lease-s"),
        (["worker", "--claim-batch", "0"], "--claim-batch"),
        (["worker", "--metrics-port", "99999"], "--metrics-port"),
        (["relay", "--batch", "-5"], "--batch"),
        (["sweeper", "--interval-s", "-1"], "--interval-s"),
        (["samples", "uncertain", "--limit", "-1"], "--limit"),
        (["worker", "--platform", "nosuch"], "platform 'nosuch' is not registered; known:"),
    ],
)
def test_bad_option_values_are_refused_with_the_option_named(argv, says, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert says in err and "Traceback" not in err


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://geo:s3cret@db:5432/geo",
        "host=db user=geo password=s3cret dbname=geo",
        "host=db password='s3cret word'",
        "postgresql://geo@db/geo?sslmode=require&password=s3cret",
    ],
)
def test_database_urls_in_messages_never_show_the_password(url):
    from geo_pipeline.store.db import redact

    shown = redact(url)
    assert "s3cret" not in shown and "***" in shown
