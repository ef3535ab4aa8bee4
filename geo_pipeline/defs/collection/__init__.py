"""Collection: a run's sampling plan (checked, then dispatched to the workers) and its collection
results (published when every sample is terminal or at the run's deadline), with their checks;
the launchpad's jobs that create and plan a run, the daily re-sampling of monitors, and the
sensors that request a partition's plan and, once it is publishable, everything downstream."""
