"""Operations: the daily retention pass (asset, job, schedule), the expiry of old runs'
partitions, and the alerts sensor that tells on-call about incidents once."""
