"""Run configurations: one ml_collections file per scenario, each with named variants."""
