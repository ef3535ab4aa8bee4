"""``python -m geo_pipeline.simulator`` = ``geo-pipeline simulator`` without loading the other CLI
modules (faster start for test fixtures and benchmarks)."""

import sys

from geo_pipeline.cli.simulator import simulator

if __name__ == "__main__":
    sys.exit(simulator.main(standalone_mode=True))
