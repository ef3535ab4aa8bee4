"""Operations: the demo and dev commands, the process supervisor, run reports and exports, and
evidence retention (R7, R26, D1, D2, D6, D7, D9-D11)."""
