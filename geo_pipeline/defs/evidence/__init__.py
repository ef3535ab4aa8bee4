"""Evidence: the validated evidence of a (run, channel) partition (answers archived raw with a
sanitised rendering, judged valid or invalid, citations traceable, screenshots per policy) and
its checks."""
