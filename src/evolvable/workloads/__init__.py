"""Built-in workloads: environments with tasks and programmatic verifiers for measuring agents."""
