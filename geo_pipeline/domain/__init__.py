"""Pure logic: values in, values out. No I/O here; everything is unit-tested without services."""
