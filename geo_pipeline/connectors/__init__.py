"""Engine connectors: the contract (base), one module per protocol, and the registry."""
