"""The ``geo-pipeline`` command line. Each module registers one command group on the root."""
