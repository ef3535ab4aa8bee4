"""Analysis: brand mentions in a partition's valid answers and the analyst tables built from
them (visibility with its interval, charts, per-brand plots), with their checks."""
