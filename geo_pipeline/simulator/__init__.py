"""The HTTP platform simulator: imitates every simulated platform of the connector registry at once
(task API, OpenAI-compatible chat completions, fee statements) with configurable faults."""
