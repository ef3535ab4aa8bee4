"""The transactions that cross parts, each written once.

``create_run``: validate, plan, and persist a run with its estimate and reservation.
``complete``: the fenced end of attempts -- evidence rows, charges, layers, outbox.
``settle``: close a run, fetch the platforms' statements, reconcile.

Flows sit between the shells (cli, defs, ops, worker) and the parts (store, billing, evidence,
connectors, ...): a shell calls a flow; a part never imports one.
"""
